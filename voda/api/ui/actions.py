"""The dashboard's actions, each confirmed before it is done: cancel a job, change its
priority, drain a node, put it back in service (uncordon), switch a GPU type's algorithm.

`POST /ui/actions/ACTION` without `confirm=yes` changes nothing: it answers what the action
would do (for an algorithm switch, the jobs the first decision under the new algorithm
would start, grow, shrink, move or preempt: voda.api.previews) as a dialog with Confirm
and Cancel. Confirm posts the same fields with `confirm=yes`, and the action is done.

Both steps check everything, on the server: the form token and the Origin (a page of
another site cannot post them: session.check_form), the user (a viewer changes nothing,
jobs are the owner's or an administrator's as in the API, nodes and algorithms are the
administrators'). A refusal is a fragment naming the field, with the API's status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from voda.api.auth import check_may_change
from voda.api.errors import Conflict, Forbidden, NotFound
from voda.api.job_labels import labels
from voda.api.previews import jobs_on, switch_actions
from voda.api.service import Service
from voda.api.ui.routes import StreamUser, _form, html, render, service_of
from voda.api.ui.session import FORM_TOKEN_FIELD, check_form, form_token
from voda.config import User
from voda.core.allocation.registry import UnknownAlgorithm
from voda.core.model import ActionKind
from voda.spec.parse import MAX_PRIORITY

router = APIRouter(prefix="/ui", include_in_schema=False)

# How a switch preview names each kind of change, in the order said.
CHANGE_WORDS = ((ActionKind.HALT, "preempts"), (ActionKind.SCALE_IN, "shrinks"),
                (ActionKind.MIGRATE, "moves"), (ActionKind.SCALE_OUT, "grows"),
                (ActionKind.START, "starts"))
ADMIN_WORDS = {"drain": "drain nodes", "uncordon": "uncordon nodes",
               "algorithm": "switch algorithms"}
LISTED = 20  # jobs named in a confirmation at most; the rest are counted


@dataclass(frozen=True, slots=True)
class Confirmation:
    title: str
    text: str
    items: list[str] = field(default_factory=list)
    more: int = 0
    danger: bool = True


@dataclass(frozen=True, slots=True)
class Action:
    fields: tuple[str, ...]  # the form fields it takes (carried again by Confirm)
    admin: bool  # administrators only
    preview: Callable[[Service, User, dict[str, str]], Confirmation]
    run: Callable[[Service, User, dict[str, str]], str]  # what was done, in words


def _required(form: dict[str, str], name: str) -> str:
    value = form.get(name, "").strip()
    if not value:
        raise HTTPException(422, f"{name}: required")
    if len(value) > 200:
        raise HTTPException(422, f"{name}: longer than 200 characters")
    return value


def _listed(items: list[str]) -> tuple[list[str], int]:
    return items[:LISTED], max(0, len(items) - LISTED)


def _active_job(service: Service, user: User, form: dict[str, str]) -> dict[str, Any]:
    job = service.get(_required(form, "job"), user)  # 404 for another user's job
    if job["status"] in ("Completed", "Failed", "Canceled"):
        raise Conflict("status", f"job {job['name']!r} is {job['status']}: it can no "
                       "longer change")
    return job


# ----- cancel a job --------------------------------------------------------------------------
def _cancel_preview(service: Service, user: User, form: dict[str, str]) -> Confirmation:
    job = _active_job(service, user, form)
    held = (f" and gives back its {job['workers']} GPUs" if job["workers"] else "")
    return Confirmation(f"Cancel job {job['name']}?",
                        f"It stops now{held}, and ends as Canceled. This cannot be undone.")


def _cancel(service: Service, user: User, form: dict[str, str]) -> str:
    job = service.delete(_required(form, "job"), user)
    return f"Job {job['name']} is {job['status']}."


# ----- change a job's priority ----------------------------------------------------------------
def _priority_of(form: dict[str, str]) -> int:
    text = _required(form, "priority")
    try:
        value = int(text)
    except ValueError:
        raise HTTPException(422, f"priority: expected a whole number, got {text[:50]!r}") \
            from None
    if not 0 <= value <= MAX_PRIORITY:
        raise HTTPException(422, f"priority: expected 0 to {MAX_PRIORITY}, got {value}")
    return value


def _priority_preview(service: Service, user: User, form: dict[str, str]) -> Confirmation:
    new = _priority_of(form)
    job = _active_job(service, user, form)
    best = service.settings.limits_of(user.name).best_priority
    if not user.admin and new < best:
        raise Forbidden("priority", f"{new} is better than the best priority {user.name} "
                        f"may use ({best})")
    direction = ("up" if new < job["priority"] else "down" if new > job["priority"]
                 else "unchanged")
    return Confirmation(
        f"Change the priority of {job['name']}?",
        f"From {job['priority']} to {new} (0 is the highest: {direction}). The scheduler "
        "decides again with it, which may start, rescale or preempt jobs.", danger=False)


def _priority(service: Service, user: User, form: dict[str, str]) -> str:
    job = service.set_priority(_required(form, "job"), _priority_of(form), user)
    return f"The priority of {job['name']} is now {job['priority']}."


# ----- drain and uncordon a node -----------------------------------------------------------------
def _drain_preview(service: Service, user: User, form: dict[str, str]) -> Confirmation:
    name = _required(form, "node")
    with service.lock:
        service._node(name)  # 404 for a node not in service
    if name in service.drained:
        raise Conflict("node", f"node {name!r} is drained already")
    jobs = jobs_on(service, name)
    said = labels(jobs, service.job_names.name_of)
    items, more = _listed([f"{said[job]}: {count} GPUs here"
                           for job, count in sorted(jobs.items(), key=lambda j: said[j[0]])])
    count = "the job" if len(jobs) == 1 else f"the {len(jobs)} jobs"
    stopped = (f"{count.capitalize()} on it stop, keeping their checkpoints, and wait to be "
               "placed elsewhere:" if jobs else "No job runs on it.")
    return Confirmation(f"Drain node {name}?", f"It takes no workers from now on. {stopped}",
                        items, more)


def _drain(service: Service, user: User, form: dict[str, str]) -> str:
    node = service.drain_node(_required(form, "node"))
    return f"Node {node['name']} is drained."


def _drained(service: Service, form: dict[str, str]) -> Any:
    name = _required(form, "node")
    node = service.drained.get(name)
    if node is None:
        raise Conflict("node", f"node {name!r} is not drained")
    return node


def _uncordon_preview(service: Service, user: User, form: dict[str, str]) -> Confirmation:
    node = _drained(service, form)
    return Confirmation(f"Put node {node.name} back in service?",
                        f"Its {node.gpus} {node.gpu_type} GPUs take workers again at the next "
                        "decision.", danger=False)


def _uncordon(service: Service, user: User, form: dict[str, str]) -> str:
    view = service.add_node(_drained(service, form))
    return f"Node {view['name']} is back in service."


# ----- switch the algorithm ---------------------------------------------------------------------
def _switch_preview(service: Service, user: User, form: dict[str, str]) -> Confirmation:
    gpu_type, algorithm = _required(form, "gpu_type"), _required(form, "algorithm")
    current = service.scheduler_view(gpu_type)["algorithm"]
    actions = switch_actions(service, gpu_type, algorithm)
    said_as = labels((a.job for a in actions), service.job_names.name_of)
    parts, items = [], []
    for kind, word in CHANGE_WORDS:
        of_kind = [a for a in actions if a.kind is kind]
        if not of_kind:
            continue
        names = [a.job for a in of_kind]
        parts.append(f"{word} {len(names)} {'job' if len(names) == 1 else 'jobs'}")
        items += [f"{word} {said_as[a.job]} ({a.workers_before} → {a.workers_after} GPUs)"
                  for a in of_kind]
    said = ", ".join(parts) if parts else "changes no job's GPUs"
    shown, more = _listed(items)
    return Confirmation(f"Switch {gpu_type} from {current} to {algorithm}?",
                        f"Switching to {algorithm} now {said} (as the scheduler would decide "
                        "at once; jobs that arrive or end meanwhile change it).",
                        shown, more, danger=any(a.kind in (ActionKind.HALT,
                                                           ActionKind.SCALE_IN)
                                                for a in actions))


def _switch(service: Service, user: User, form: dict[str, str]) -> str:
    gpu_type, algorithm = _required(form, "gpu_type"), _required(form, "algorithm")
    view = service.set_scheduler(gpu_type, algorithm, None, None)
    return f"{view['gpu_type']}: now {view['algorithm']}."


ACTIONS: dict[str, Action] = {
    "cancel": Action(("job",), False, _cancel_preview, _cancel),
    "priority": Action(("job", "priority"), False, _priority_preview, _priority),
    "drain": Action(("node",), True, _drain_preview, _drain),
    "uncordon": Action(("node",), True, _uncordon_preview, _uncordon),
    "algorithm": Action(("gpu_type", "algorithm"), True, _switch_preview, _switch),
}


def refused(field_name: str, reason: str, status: int) -> HTMLResponse:
    return html(render("_refused.html", field=field_name, reason=reason), status)


@router.post("/actions/{name}", response_class=HTMLResponse)
async def act(request: Request, name: str, user: StreamUser) -> HTMLResponse:
    """Without confirm=yes: what the action would do, to confirm. With it: done."""
    action = ACTIONS.get(name)
    if action is None:
        return refused("action", f"unknown action {name[:50]!r}; valid: "
                       f"{', '.join(ACTIONS)}", 404)
    form = await _form(request)
    service = service_of(request)
    try:
        check_form(request, form)
        check_may_change(user)
        if action.admin and not user.admin:
            raise HTTPException(403, "authorization: only an administrator may "
                                f"{ADMIN_WORDS.get(name, name)}")
        if form.get("confirm") != "yes":
            confirmation = await run_in_threadpool(action.preview, service, user, form)
            return html(render("_confirm.html", c=confirmation, action=name,
                               fields={f: form.get(f, "") for f in action.fields},
                               form_field=FORM_TOKEN_FIELD, form_token=form_token(request)))
        done = await run_in_threadpool(action.run, service, user, form)
    except HTTPException as exc:
        field_name, _, reason = str(exc.detail).partition(": ")
        return refused(field_name, reason or field_name, exc.status_code)
    except (NotFound, Forbidden, Conflict) as exc:
        status = 404 if isinstance(exc, NotFound) else 403 if isinstance(exc, Forbidden) \
            else 409
        return refused(getattr(exc, "field", action.fields[0]),
                       getattr(exc, "reason", str(exc)), status)
    except (UnknownAlgorithm, ValueError) as exc:  # the switch's checks
        return refused("algorithm", str(exc), 422)
    return html(render("_done.html", message=done, action=name, form=form,
                       algorithm_index=_algorithm_index(service, name, form)))


def _algorithm_index(service: Service, name: str, form: dict[str, str]) -> int | None:
    """Where the switched GPU type's algorithm is shown on the scheduler page."""
    if name != "algorithm":
        return None
    types = service.scheduler.cluster.gpu_types()
    gpu_type = form.get("gpu_type", "")
    return types.index(gpu_type) if gpu_type in types else None
