"""Report tokens (voda.api.report_tokens) and the report channel the Kubernetes backend
renders into its objects: a token verifies only as minted, under its own secret; the env
reaches every container of every replica without overriding the user's, and what is
sent validates against the CRDs and Kubernetes 1.32."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from voda.api import token_file
from voda.api.report_tokens import PREFIX, Reporter, ReportKeys, incarnation_of, new_secret
from voda.api.service import Service
from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.backends.kubernetes.adapters import Sizes
from voda.backends.kubernetes.config import kubernetes_settings
from voda.backends.kubernetes.manifests import (
    add_report_env,
    render_job,
    report_secret,
    report_secret_name,
    secret_token,
)
from voda.backends.kubernetes.settings import KubernetesSettings
from voda.config import ServerSettings
from voda.spec import crd
from voda.store.models import ServiceStateRow

ROOT = Path(__file__).resolve().parent.parent
KEYS = ReportKeys(new_secret())
names = st.text(min_size=1, max_size=200)
URL = "http://voda.voda.svc:8470"


owners = st.from_regex(r"\A[A-Za-z0-9][-_.A-Za-z0-9]{0,63}\Z")  # config.USER_RE
jobs = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?\Z")  # a job name, 40 at most


@given(owners, jobs, st.floats(0, 4e9))
def test_a_minted_token_names_its_owner_job_and_incarnation(owner: str, job: str,
                                                            submitted: float) -> None:
    token = KEYS.mint(owner, job, incarnation_of(submitted))
    assert token.startswith(PREFIX) and len(token) <= 4096
    assert KEYS.verify(token) == Reporter(name=owner, admin=False, job=job,
                                          incarnation=incarnation_of(submitted))


@given(names, names, st.floats(0, 4e9))
def test_any_names_make_a_token_that_verifies_or_none_at_all(owner: str, job: str,
                                                             submitted: float) -> None:
    try:
        token = KEYS.mint(owner, job, incarnation_of(submitted))
    except ValueError as refused:
        assert "too long" in str(refused)
        return
    assert KEYS.verify(token) == Reporter(name=owner, admin=False, job=job,
                                          incarnation=incarnation_of(submitted))


def test_names_too_long_to_sign_are_refused_not_signed_unverifiable() -> None:
    with pytest.raises(ValueError, match="too long"):
        KEYS.mint("alice", "\U0001f600" * 200, "1.0")


@given(names, st.integers(0, 10_000), st.characters(codec="ascii"))
def test_a_changed_character_never_verifies(job: str, where: int, new: str) -> None:
    token = KEYS.mint("alice", job, "1.5")
    i = len(PREFIX) + where % (len(token) - len(PREFIX))
    forged = token[:i] + new + token[i + 1:]
    if forged != token:
        reporter = KEYS.verify(forged)
        # base64 may ignore a changed padding bit, never what the token says
        assert reporter is None or reporter == KEYS.verify(token)


def test_tokens_of_another_secret_or_of_no_shape_do_not_verify() -> None:
    other = ReportKeys(new_secret()).mint("alice", "job", "1.0")
    assert KEYS.verify(other) is None
    for bad in ("", PREFIX, f"{PREFIX}.", f"{PREFIX}abc", f"{PREFIX}abc.def",
                "tok-alice-4f9c2e7a1b", f"{PREFIX}{'a' * 5000}.x", PREFIX + "!!.??"):
        assert KEYS.verify(bad) is None
    # A payload of another shape, signed with the right key, is refused too.
    payload = base64.urlsafe_b64encode(b'{"owner":"alice"}').decode().rstrip("=")
    signature = base64.urlsafe_b64encode(KEYS._sign(payload)).decode().rstrip("=")
    assert KEYS.verify(f"{PREFIX}{payload}.{signature}") is None
    with pytest.raises(ValueError, match="report secret"):
        ReportKeys("short")


def test_the_same_secret_mints_the_same_token_after_a_restart() -> None:
    secret = new_secret()
    assert ReportKeys(secret).mint("a", "j", "2.0") == ReportKeys(secret).mint("a", "j", "2.0")
    assert ReportKeys(secret).mint("a", "j", "2.0") != ReportKeys(secret).mint("a", "j", "2.5")


# ----- the channel in the objects ----------------------------------------------------------
def example(kind: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())


def env_of(obj: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """'Replica/container' -> its env."""
    specs = obj["spec"].get("mpiReplicaSpecs") or obj["spec"]["pytorchReplicaSpecs"]
    return {f"{role}/{c['name']}": c.get("env", []) for role, spec in specs.items()
            for c in spec["template"]["spec"]["containers"]}


def channel(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env
            if e["name"].startswith("VODA_")}


@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob"])
def test_every_container_of_every_replica_gets_the_channel_and_stays_crd_valid(
        kind: str) -> None:
    doc = example(kind)
    specs = doc["spec"].get("mpiReplicaSpecs") or doc["spec"]["pytorchReplicaSpecs"]
    sidecar = {"name": "sidecar", "image": "busybox",
               "env": [{"name": "VODA_JOB", "value": "mine"}]}
    specs["Worker"]["template"]["spec"]["containers"].append(sidecar)
    settings = KubernetesSettings(report_url=URL)
    obj = render_job(doc, "job-a", Sizes(2, 1, 4), {0: "n0", 1: "n1"}, "r1", settings,
                     report=True)
    assert crd.schema_errors(obj) == []
    envs = env_of(obj)
    roles = {"mpijob": {"Launcher/launcher", "Worker/worker", "Worker/sidecar"},
             "pytorchjob": {"Worker/pytorch", "Worker/sidecar"}}[kind]
    assert set(envs) == roles
    secret_ref = {"secretKeyRef": {"name": report_secret_name("job-a"), "key": "token"}}
    for where, env in envs.items():
        expected_job = "mine" if where.endswith("sidecar") else "job-a"  # the user's stays
        assert channel(env) == {"VODA_REPORT": URL, "VODA_JOB": expected_job,
                                "VODA_TOKEN": secret_ref}, where
        assert len([e for e in env if e["name"] == "VODA_JOB"]) == 1
    if kind == "pytorchjob":  # what the user had is kept, first
        assert envs["Worker/pytorch"][0] == {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
                                             "value": "1"}


def test_without_a_report_url_nothing_is_added() -> None:
    obj = render_job(example("mpijob"), "job-a", Sizes(2, 1, 4), {}, "r1",
                     KubernetesSettings(), report=True)
    assert all(not channel(env) for env in env_of(obj).values())


def test_a_launcher_master_and_workers_all_get_it() -> None:
    obj = {"spec": {"pytorchReplicaSpecs": {
        role: {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}
        for role in ("Master", "Worker")}}}
    add_report_env(obj, "pytorchReplicaSpecs", "j", URL)
    assert {k: sorted(channel(v)) for k, v in env_of(obj).items()} == {
        "Master/c": ["VODA_JOB", "VODA_REPORT", "VODA_TOKEN"],
        "Worker/c": ["VODA_JOB", "VODA_REPORT", "VODA_TOKEN"]}


def test_the_secret_validates_against_kubernetes_1_32_and_holds_the_token() -> None:
    owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
             "metadata": {"name": "job-a", "uid": "0b7c2f5e-1a3d-4a8e-9d6c-2f1e0a9b8c7d"}}
    settings = KubernetesSettings(namespace="training", report_url=URL)
    for secret in (report_secret("job-a", "vr1.x.y", settings),
                   report_secret("job-a", "vr1.x.y", settings, owner)):
        kubernetes_validate.validate(copy.deepcopy(secret), desired_version="1.32",
                                     strict=True)
        assert secret_token(secret) == "vr1.x.y"
        assert secret["metadata"]["namespace"] == "training"
    assert secret["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "job-a",
         "uid": owner["metadata"]["uid"]}]


@pytest.mark.parametrize("url", ["voda:8470", "ftp://voda", "http://", "http://h:99999",
                                 "http://a b", "x" * 2000])
def test_a_report_url_that_is_no_http_url_is_refused_naming_it(url: str) -> None:
    with pytest.raises(ValueError, match=r"kubernetes\.report_url"):
        kubernetes_settings(ServerSettings(kubernetes_settings={"report_url": url}))


def test_the_report_url_comes_from_the_table_or_voda_report_url() -> None:
    table = ServerSettings(kubernetes_settings={"report_url": URL})
    assert kubernetes_settings(table).report_url == URL
    assert kubernetes_settings(ServerSettings(report_url="https://v:1")).report_url == (
        "https://v:1")
    assert kubernetes_settings(ServerSettings()).report_url == ""


# ----- the signing key, kept out of the store -------------------------------------------
def started(url: str, key_file: Path) -> Service:
    service = Service(ServerSettings(db=url, backend="emulated",
                                     report_key_file=str(key_file)),
                      EmulatedBackend(parse_cluster("1x4"), time_scale=0.001))
    service.start()
    return service


def test_replicas_and_restarts_share_one_key_even_when_two_make_it_at_once(
        store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "keys" / "report-key"
    first = started(store_url, key_file)
    token = first.report_keys.mint("alice", "job", "1.0")
    first.close()
    restarted = started(store_url, key_file)
    assert restarted.report_keys.verify(token) is not None
    restarted.close()
    with restarted.sessions() as session:  # the store keeps a hash of the key, not the key
        values = [r.value for r in session.query(ServiceStateRow)]
    assert key_file.read_text().strip() not in values
    # A replica that found no key file, as another made one: its link fails on the name
    # and it reads the other's.
    peek, calls = token_file._peek_key, []

    def unseen_once(path: Path) -> object:
        calls.append(path)
        return None if len(calls) == 1 else peek(path)

    monkeypatch.setattr(token_file, "_peek_key", unseen_once)
    racer = started(store_url, key_file)
    assert len(calls) == 2 and racer.report_keys.verify(token) is not None
    racer.close()
    # Given by the settings (VODA_REPORT_KEY: replicas on several machines), no file.
    given = Service(ServerSettings(db=store_url, backend="emulated",
                                   report_key="k" * 32, report_key_file=str(tmp_path / "no")),
                    EmulatedBackend(parse_cluster("1x4"), time_scale=0.001))
    given.start()
    assert given.report_keys.verify(ReportKeys("k" * 32).mint("a", "b", "1.0")) is not None
    assert given.report_keys.verify(token) is None and not (tmp_path / "no").exists()
    given.close()
