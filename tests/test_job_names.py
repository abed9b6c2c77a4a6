"""A job keeps the name it is submitted with (issue #44): unique among live jobs (409 naming
the field and the live job), free again once its job has finished, generated only when
asked (generate_name), kept across a restart; the store refuses a second live job of a
name atomically, on SQLite and PostgreSQL, whichever service writes it."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from tests.polling import wait_for
from voda.api.errors import Conflict, NotFound
from voda.api.job_names import GENERATED_ALPHABET, JobNames
from voda.api.service import Service
from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.config import ServerSettings, User
from voda.spec import SpecError, parse_submission
from voda.spec.parse import GENERATED_LENGTH, PREFIX_MAX
from voda.store import jobs as store
from voda.store.db import make_engine, migrate, session_factory

ALICE = User("alice", admin=False)
ROOT = User("root", admin=True)
UID = r"^{name}-\d{{14}}-[0-9a-f]{{6}}$"
MPIJOB = b"""apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {%s}
spec:
  mpiReplicaSpecs:
    Worker:
      replicas: 1
      template: {spec: {containers: [{name: w, image: busybox, command: [sleep, "1"]}]}}
"""


def spec(text: str) -> bytes:
    return f"{text}\ncommand: train\nepochs: 1000\n".encode()


@pytest.fixture
def make_service(store_url: str) -> Iterator[Callable[..., Service]]:
    """Services on one store (a restart, or a second replica), each closed at the end;
    their emulated jobs run `time_scale` times faster than real time."""
    made: list[Service] = []

    def make(time_scale: float = 0.001) -> Service:
        settings = ServerSettings(db=store_url, backend="emulated")
        service = Service(settings, EmulatedBackend(parse_cluster("1x4"),
                                                    time_scale=time_scale))
        service.start()
        made.append(service)
        return service
    yield make
    for service in made:
        service.close()


def submit(service: Service, body: bytes, user: User = ALICE) -> dict:
    return service.submit(parse_submission(body), user)[0]


def test_a_job_keeps_its_name_and_gets_a_uid_of_its_own(
        make_service: Callable[[], Service]) -> None:
    service = make_service()
    job = submit(service, spec("name: resnet-cifar"))
    assert job["name"] == "resnet-cifar"
    assert re.match(UID.format(name="resnet-cifar"), job["uid"]), job["uid"]
    assert service.get("resnet-cifar", ALICE)["uid"] == job["uid"]
    assert service.get(job["uid"], ALICE)["name"] == "resnet-cifar"
    assert service.job_history("resnet-cifar", ALICE)[0]["new"] == "Submitted"
    listed, _ = service.list(ALICE, None, None, None, 0, 10)
    assert [(j["name"], j["uid"]) for j in listed] == [("resnet-cifar", job["uid"])]


@pytest.mark.parametrize(("body", "field"), [
    (spec("name: alpha"), "name"),
    (MPIJOB % b"name: alpha", "metadata.name"),
], ids=["a compact spec names `name`", "an MPIJob names `metadata.name`"])
def test_a_live_name_is_refused_with_409_naming_the_field_and_its_job(
        make_service: Callable[[], Service], body: bytes, field: str) -> None:
    service = make_service()
    first = submit(service, spec("name: alpha"))
    with pytest.raises(Conflict) as refused:
        submit(service, body, ROOT)
    assert refused.value.field == field
    assert first["uid"] in refused.value.reason and "'alpha'" in refused.value.reason
    listed, total = service.list(ROOT, None, None, None, 0, 10)
    assert total == 1 and listed[0]["uid"] == first["uid"]
    assert service.queued_by_user.get("root", 0) == 0, "a refused job counts for nothing"


def test_a_name_held_by_another_users_job_is_refused_without_its_uid(
        make_service: Callable[[], Service]) -> None:
    service = make_service()
    held = submit(service, spec("name: taken"))
    with pytest.raises(Conflict) as refused:
        submit(service, spec("name: taken"), User("bob", admin=False))
    assert refused.value.field == "name" and held["uid"] not in refused.value.reason
    assert "another user's live job" in refused.value.reason


def test_concurrent_submissions_of_one_name_accept_exactly_one(
        make_service: Callable[[], Service]) -> None:
    service = make_service()
    gate = threading.Barrier(8)

    def one(_: int) -> str:
        gate.wait()
        try:
            return submit(service, spec("name: burst"))["uid"]
        except Conflict as refused:
            assert refused.field == "name"
            return "409"

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(one, range(8)))
    accepted = [o for o in outcomes if o != "409"]
    assert len(accepted) == 1 and outcomes.count("409") == 7
    assert service.get("burst", ALICE)["uid"] == accepted[0]


def test_the_store_refuses_a_second_live_job_of_a_name_from_another_service(
        make_service: Callable[[], Service]) -> None:
    """Two services on one store (replicas): neither knows the other's jobs, and still
    only one of two concurrent submissions of a name is stored; the other is a 409."""
    first, second = make_service(), make_service()
    for _ in range(3):
        gate = threading.Barrier(2)

        def one(service: Service, gate: threading.Barrier = gate) -> str | None:
            gate.wait()
            try:
                return submit(service, spec("name: shared"))["uid"]
            except Conflict as refused:
                assert refused.field == "name" and "'shared'" in refused.reason
                return None

        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(one, (first, second)))
        assert outcomes.count(None) == 1, outcomes
        owner = first if outcomes[0] else second
        owner.delete("shared", ALICE)  # finished: the name is free for the next round
    with first.sessions() as session:
        rows = store.load_jobs(session)
    assert len(rows) == 3 and {r.status for r in rows} == {"Canceled"}
    assert {r.given_name for r in rows} == {"shared"}


def test_a_name_is_free_again_once_its_job_has_finished(
        make_service: Callable[..., Service]) -> None:
    service = make_service(time_scale=100_000.0)
    short = submit(service, b"name: again\ncommand: x\nepochs: 1\nprofile: ncf\n")

    def completed() -> bool:
        service.tick()
        return service.get("again", ALICE)["status"] == "Completed"
    wait_for(completed, timeout=60)
    second = submit(service, spec("name: again"))
    service.delete("again", ALICE)
    third = submit(service, spec("name: again"))
    uids = [short["uid"], second["uid"], third["uid"]]
    assert len(set(uids)) == 3
    assert service.get("again", ALICE)["uid"] == third["uid"], "the live one"
    assert [service.get(u, ALICE)["status"] for u in uids[:2]] == ["Completed", "Canceled"]
    assert service.job_history(short["uid"], ALICE)[-1]["new"] == "Completed"
    service.delete("again", ALICE)
    assert service.get("again", ALICE)["uid"] == third["uid"], "else the newest"
    listed, total = service.list(ALICE, None, None, None, 0, 10)
    assert total == 3 and [j["name"] for j in listed] == ["again"] * 3


def test_a_restarted_service_keeps_names_and_the_rule(
        make_service: Callable[[], Service]) -> None:
    service = make_service()
    old = submit(service, spec("name: kept"))
    service.delete("kept", ALICE)
    live = submit(service, spec("name: kept"))
    service.close()
    restarted = make_service()
    assert restarted.get("kept", ALICE)["uid"] == live["uid"]
    assert restarted.get(old["uid"], ALICE)["status"] == "Canceled"
    with pytest.raises(Conflict, match=live["uid"]):
        submit(restarted, spec("name: kept"))
    restarted.delete("kept", ALICE)
    assert restarted.get("kept", ALICE)["uid"] == live["uid"]
    again = submit(restarted, spec("name: kept"))
    assert restarted.get("kept", ALICE)["uid"] == again["uid"]


def test_generated_names_are_opt_in(make_service: Callable[[], Service]) -> None:
    service = make_service()
    names = {submit(service, spec("generate_name: sweep-"))["name"] for _ in range(5)}
    pattern = re.compile(f"^sweep-[{GENERATED_ALPHABET}]{{{GENERATED_LENGTH}}}$")
    assert len(names) == 5 and all(pattern.match(n) for n in names), names
    job = service.get(sorted(names)[0], ALICE)
    assert job["category"] == "sweep" and re.match(UID.format(name=job["name"]), job["uid"])
    mpijob = submit(service, MPIJOB % b"generateName: tf-")
    assert re.match(f"^tf-[{GENERATED_ALPHABET}]{{5}}$", mpijob["name"])
    assert submit(service, spec("name: plain"))["name"] == "plain", "given: kept as is"


@pytest.mark.parametrize(("body", "field"), [
    (spec("name: a\ngenerate_name: a-"), "generate_name"),
    (spec("generate_name: Upper-"), "generate_name"),
    (spec("generate_name: -dash"), "generate_name"),
    (spec(f"generate_name: {'p' * (PREFIX_MAX + 1)}"), "generate_name"),
    (b"command: x\n", "name"),
    (MPIJOB % b"name: a, generateName: a-", "metadata.generateName"),
    (MPIJOB % b"generateName: Bad_", "metadata.generateName"),
], ids=["name and generate_name both", "an upper-case prefix", "a prefix starting with '-'",
        "a prefix leaving no room for the suffix", "neither name nor generate_name",
        "an MPIJob with both", "an MPIJob with a bad prefix"])
def test_bad_names_are_refused_naming_the_field(body: bytes, field: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_submission(body)
    assert field in {e.field for e in refused.value.errors}, refused.value.errors


def test_the_longest_prefix_makes_the_longest_name() -> None:
    job = parse_submission(spec(f"generate_name: {'p' * PREFIX_MAX}"))
    assert job.generate_name == "p" * PREFIX_MAX and job.name == ""
    names = JobNames()
    name, uid = names.claim_generated(job.generate_name, 0.0)
    assert len(name) == 40 and len(uid) <= 62, "uids stay within a DNS-1123 label"


def test_a_name_resolves_to_the_live_job_else_the_uid_else_the_newest() -> None:
    names = JobNames()
    names.add("a", "a-1", live=False)
    names.add("a", "a-2", live=False)
    known = {"a-1", "a-2", "a-3"}
    assert names.resolve("a", known) == "a-2"
    assert names.claim("a", "a-3") is None
    assert names.resolve("a", known) == "a-3"
    assert names.resolve("a-1", known) == "a-1"
    assert names.claim("a", "a-4") == "a-3", "held by a live job: nothing claimed"
    assert names.resolve("a", known) == "a-3"
    names.release("a-3")
    assert names.resolve("a", known) == "a-3"
    assert names.claim("a", "a-4") is None
    assert names.resolve("a", known) == "a-3", "a-4 is not admitted yet"
    names.forget("a-4")
    assert names.resolve("a", known | {"a-4"}) == "a-3" and "a" not in names.live
    assert names.resolve("b", known) is None


def test_an_unknown_name_is_404(make_service: Callable[[], Service]) -> None:
    service = make_service()
    submit(service, spec("name: mine"))
    with pytest.raises(NotFound):
        service.get("nobody", ALICE)
    with pytest.raises(NotFound):
        service.get("mine", User("bob", admin=False))


def test_jobs_stored_before_keep_their_generated_names(store_url: str) -> None:
    """A store of revision 0007: its jobs' names were the generated ones, and stay."""
    from tests.test_store_jobs import to_revision
    from voda.engine.scheduler import JobRecord

    engine = make_engine(store_url)
    to_revision(engine, "0007")

    with engine.begin() as connection:
        old_columns = {c["name"] for c in sa.inspect(connection).get_columns("jobs")}
        for name in ("x-20261101000000-aaaaaa", "x-20261101000000-bbbbbb"):
            values = store.new_job_values(JobRecord(name=name, epochs=1, category="alice/x"),
                                          {"user": "alice", "kind": "VodaJob", "spec": {}},
                                          1.0)
            row = {k: v for k, v in values.items() if k in old_columns}
            jobs = sa.table("jobs", *(sa.column(k, sa.JSON() if isinstance(v, dict | list)
                                                else None) for k, v in row.items()))
            connection.execute(jobs.insert().values(row))
    migrate(engine)
    with session_factory(engine)() as session:
        rows = store.load_jobs(session)
    assert [(r.name, r.given_name) for r in rows] == [
        ("x-20261101000000-aaaaaa", "x-20261101000000-aaaaaa"),
        ("x-20261101000000-bbbbbb", "x-20261101000000-bbbbbb")]
    engine.dispose()


def test_the_store_holds_the_rule_without_the_service(store_url: str) -> None:
    """Two live rows of one name cannot both be stored; a finished one and a live one
    can, and so can any number of finished ones."""
    engine = make_engine(store_url)
    migrate(engine)
    sessions = session_factory(engine)
    from voda.engine.scheduler import JobRecord

    def insert(uid: str, status: str) -> None:
        record = JobRecord(name=uid, epochs=1, category="alice/c")
        values = store.new_job_values(record, {"user": "alice", "kind": "VodaJob",
                                               "spec": {}, "given_name": "n"}, 1.0)
        values["status"] = status
        with sessions.begin() as session:
            store.insert_jobs(session, [values])

    insert("n-1", "Completed")
    insert("n-2", "Canceled")
    insert("n-3", "Waiting")
    with pytest.raises(sa.exc.IntegrityError):
        insert("n-4", "Submitted")
    with sessions.begin() as session:
        store.save_states(session, [{"name": "n-3", "status": "Failed"}])
    insert("n-4", "Submitted")
    with sessions() as session:
        assert [(r.name, r.status) for r in store.load_jobs(session)] == [
            ("n-1", "Completed"), ("n-2", "Canceled"), ("n-3", "Failed"),
            ("n-4", "Submitted")]
    engine.dispose()
