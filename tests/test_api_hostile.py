"""Hostile input over real HTTP against `voda serve` (SQLite and PostgreSQL): nothing
crashes, hangs or wedges the service, nothing runs that should not, and every refusal
is a 4xx JSON body naming the field."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import ServeProcess, read_example
from tests.polling import wait_for

YAML = {"Content-Type": "application/yaml"}


def refused(response: httpx.Response, status: int, field: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert field in [e["field"] for e in body["errors"]], body
    assert all(e["reason"] for e in body["errors"])
    return body


# What these bodies would cost if they were parsed, expanded or sized on every count is
# minutes (or the memory); an answer within SOON is one that did none of it, even on a
# loaded machine.
SOON = 10.0


def alive(server: ServeProcess) -> None:
    assert server.proc is not None and server.proc.poll() is None, "the service died"
    with server.client("alice") as client:
        started = time.monotonic()
        assert client.get("/v1/jobs", params={"limit": 1}).status_code == 200
        assert time.monotonic() - started < SOON


# ----- browsers and other callers that must not run commands -------------------------------
def test_cross_site_and_rebinding_requests_are_refused(api_server: ServeProcess,
                                                       tmp_path: Path) -> None:
    proof = tmp_path / "proof"
    body = json.dumps({"name": "x", "command": f"touch {proof}"}).encode()
    with api_server.client("root") as client:
        cross = client.post("/v1/jobs", content=body, headers={
            "Origin": "http://evil.example", "Content-Type": "text/plain"})
        refused(cross, 403, "Origin")
        refused(client.post("/v1/jobs", content=body, headers={"Content-Type": "text/plain"}),
                415, "Content-Type")
        refused(client.post("/v1/jobs", content=body), 415, "Content-Type")  # none at all
        rebound = client.get("/v1/jobs", headers={"Host": f"evil.example:{api_server.port}"})
        refused(rebound, 403, "Host")
        assert client.get("/v1/jobs", headers={"Host": f"localhost:{api_server.port}"}
                          ).status_code == 200
        same_origin = client.get("/v1/jobs", headers={"Origin": api_server.url})
        assert same_origin.status_code == 200
    with api_server.client(anonymous=True) as anonymous:
        refused(anonymous.post("/v1/jobs", content=body, headers={
            "Content-Type": "application/json"}), 401, "authorization")
    assert not proof.exists()


@pytest.mark.parametrize(("name", "first", "second"), [
    ("Host", "127.0.0.1:{port}", "evil.example"),
    ("Host", "evil.example", "127.0.0.1:{port}"),
    ("Origin", "{url}", "http://evil.example"),
    ("Content-Type", "application/json", "text/plain"),
    ("Authorization", "Bearer {token}", "Bearer made-up"),
], ids=lambda v: str(v)[:20])
def test_a_header_sent_twice_is_refused_whichever_copy_is_first(
        api_server: ServeProcess, tmp_path: Path, name: str, first: str, second: str) -> None:
    """The guard and the routes must not read different copies of one header."""
    proof = tmp_path / "proof"
    body = json.dumps({"name": "twice", "command": f"touch {proof}"}).encode()
    values = {"port": api_server.port, "url": api_server.url,
              "token": api_server.tokens["root"]}
    headers = [(k, v) for k, v in (("Host", f"127.0.0.1:{api_server.port}"),
                                    ("Content-Type", "application/json"),
                                    ("Authorization", f"Bearer {api_server.tokens['root']}"))
               if k != name]
    headers += [(name, first.format(**values)), (name, second.format(**values))]
    status, answer = raw_post(api_server.port, "/v1/jobs", headers, body)
    assert status == 400, answer
    if answer.startswith(b"{"):  # the HTTP parser itself may refuse two Host headers first
        response = httpx.Response(status, content=answer)
        refused(response, 400, name)
    assert not proof.exists()
    alive(api_server)


def raw_post(port: int, path: str, headers: list[tuple[str, str]],
             body: bytes) -> tuple[int, bytes]:
    """POST as the bytes given (an HTTP client would refuse to send two Host headers)."""
    lines = [f"POST {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers),
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall("\r\n".join(lines).encode() + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), content


def test_the_scheduler_registry_imports_nothing_a_request_names(api_server: ServeProcess,
                                                                 tmp_path: Path) -> None:
    proof = tmp_path / "popen"
    with api_server.client("root") as root:
        answer = root.put("/v1/schedulers/default", json={
            "algorithm": "subprocess:Popen", "params": {"args": ["touch", str(proof)]}})
        body = refused(answer, 422, "algorithm")
        assert "subprocess:Popen" not in body["valid"]
    time.sleep(0.3)
    assert not proof.exists()


def test_failed_tokens_are_rate_limited(serve, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", tokens=True,
                   config="[server]\nauth_failures_per_minute = 3\n")
    with httpx.Client(base_url=server.url) as client:
        for _ in range(3):
            wrong = client.get("/v1/jobs", headers={"Authorization": "Bearer wrong-token"})
            refused(wrong, 401, "authorization")
        blocked = client.get("/v1/jobs", headers={"Authorization": "Bearer wrong-token"})
        assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) >= 1


def test_a_valid_token_is_accepted_from_an_address_held_back_for_others_guesses(
        serve, tmp_path: Path) -> None:
    """Everyone behind one address (a NAT, a proxy, one login host) shares the failure
    count: one guesser must not lock out the users who hold a token."""
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", tokens=True,
                   config="[server]\nauth_failures_per_minute = 3\n")
    with httpx.Client(base_url=server.url) as guesser:
        answers = [guesser.get("/v1/jobs", headers={"Authorization": f"Bearer guess-{i}"})
                   for i in range(6)]
    assert [a.status_code for a in answers] == [401] * 3 + [429] * 3
    assert int(answers[-1].headers["Retry-After"]) >= 1
    with server.client("alice") as alice:  # the same address, right away
        assert alice.get("/v1/jobs").status_code == 200
        assert alice.post("/v1/jobs", json={"name": "held", "command": "x"}).status_code == 201
    login = httpx.post(f"{server.url}/ui/login", data={"token": server.tokens["bob"]},
                       headers={"Origin": server.url})
    assert login.status_code == 303 and login.cookies  # the dashboard's login too
    page = httpx.get(f"{server.url}/ui/cluster", cookies=login.cookies)
    assert page.status_code == 200
    with httpx.Client(base_url=server.url) as guesser:  # guessing is still held back
        again = guesser.get("/v1/jobs", headers={"Authorization": "Bearer guess-again"})
        assert again.status_code == 429 and int(again.headers["Retry-After"]) >= 1
        form = guesser.post("/ui/login", data={"token": "guess-again"},
                            headers={"Origin": server.url})
        assert form.status_code == 429 and "too many failed attempts" in form.text


def test_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy(serve,
                                                                      tmp_path: Path) -> None:
    """A local client that names another address per request does not escape the
    failed-token limit (uvicorn believes X-Forwarded-For from 127.0.0.1 by default)."""
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", tokens=True)
    with httpx.Client(base_url=server.url) as client:
        statuses = [client.get("/v1/jobs", headers={
            "Authorization": f"Bearer guess-{i}",
            "X-Forwarded-For": f"198.51.100.{i + 1}"}).status_code for i in range(40)]
    assert statuses == [401] * 10 + [429] * 30  # auth_failures_per_minute = 10


def test_a_trusted_proxy_names_the_client_its_failures_are_charged_to(serve,
                                                                      tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", tokens=True,
                   config='[server]\nauth_failures_per_minute = 3\n'
                          'trusted_proxies = "127.0.0.1, 10.0.0.0/8"\n')

    def guess(forwarded: str | None) -> int:
        headers = {"Authorization": "Bearer guess"}
        if forwarded is not None:
            headers["X-Forwarded-For"] = forwarded
        return httpx.get(f"{server.url}/v1/jobs", headers=headers).status_code

    assert [guess("203.0.113.7") for _ in range(5)] == [401] * 3 + [429] * 2
    assert guess("203.0.113.8") == 401  # another client behind the proxy is not held back
    assert guess(None) == 401  # nor the proxy itself
    # The client is the last address not of a trusted proxy (one a client adds is not).
    assert guess("203.0.113.7, 10.1.2.3") == 429
    assert guess("203.0.113.7, 203.0.113.9") == 401


@pytest.mark.parametrize(("config", "says"), [
    ('trusted_proxies = "127.0.0.1, proxy.example"', "trusted_proxies: 'proxy.example' is "
                                                     "not an IP address or a CIDR network"),
    ('trusted_proxies = "10.0.0.0/33"', "trusted_proxies: '10.0.0.0/33'"),
    ('tokens = "carol:Short-Token-1"', "tokens: carol: the token has 13 characters; at least "
                                       "16 are required"),
    ('session_hours = 0', "session_hours"),
], ids=["a host name as a proxy", "a bad network", "a short token", "no session time"])
def test_serve_refuses_to_start_with_a_bad_setting_naming_it(serve, tmp_path: Path,
                                                             config: str, says: str) -> None:
    with pytest.raises(RuntimeError, match="voda serve exited") as failed:
        serve(f"sqlite:///{tmp_path / 'v.db'}", config=f"[server]\n{config}\n")
    assert says in " ".join(str(failed.value).split())
    assert "Short-Token-1" not in str(failed.value)  # a token is never repeated


def test_a_short_token_in_the_environment_is_refused_naming_its_user(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env.update(VODA_CONFIG=str(tmp_path / "none.toml"),
               VODA_TOKENS="alice:tok-alice-4f9c2e7a1b,dave:tok-dave")
    done = subprocess.run([sys.executable, "-m", "voda.cli.main", "serve", "--db",
                           f"sqlite:///{tmp_path / 'v.db'}", "--backend", "emulated"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "tokens: dave: the token has 8 characters; at least 16 are required" in (
        " ".join(done.stderr.split()))
    assert "tok-dave" not in done.stderr


# ----- bodies that crashed or froze the service --------------------------------------------
@pytest.mark.parametrize(("body", "headers", "status", "field"), [
    (b"a: " + b"[" * 30_000 + b"]" * 30_000, YAML, 422, "body"),
    (b"[" * 100_000 + b"]" * 100_000, {"Content-Type": "application/json"}, 422, "body"),
    (b"- " * 30_000 + b"x", YAML, 422, "body"),
    (b"apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: bomb\n"
     b"  labels: {a: &a [x,x,x,x,x,x,x,x,x], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a],"
     b" c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]}\n"
     b"spec: {}\n", YAML, 422, "body"),
], ids=["YAML nested 30,000 deep", "JSON nested 100,000 deep", "a block sequence 30,000 deep",
        "YAML aliases"])
def test_deep_or_expanding_bodies_are_refused_before_parsing(
    api_server: ServeProcess, body: bytes, headers: dict, status: int, field: str
) -> None:
    with api_server.client("alice") as client:
        started = time.monotonic()
        refused(client.post("/v1/jobs", content=body, headers=headers), status, field)
        assert time.monotonic() - started < SOON
    alive(api_server)


def _pytorchjob(max_replicas: int | None = None, annotation: str | None = None) -> bytes:
    doc = yaml.safe_load(read_example("pytorchjob.yaml"))
    if max_replicas is not None:
        doc["spec"]["elasticPolicy"]["maxReplicas"] = max_replicas
    if annotation is not None:
        doc["metadata"]["annotations"]["voda.io/max-workers"] = annotation
        del doc["spec"]["elasticPolicy"]["maxReplicas"]
    return yaml.safe_dump(doc).encode()


@pytest.mark.parametrize(("body", "field"), [
    (b"name: a\ncommand: x\nmax: 1000000\n", "max"),
    (b"name: a\ncommand: x\nmax: 1099511627776\n", "max"),
    (b"name: a\ncommand: x\nepochs: 1099511627776\n", "epochs"),
    (_pytorchjob(max_replicas=2**40), "spec.elasticPolicy.maxReplicas"),
    (_pytorchjob(annotation=str(2**40)), "metadata.annotations.voda.io/max-workers"),
], ids=["max 10^6", "max 2^40", "epochs 2^40", "PyTorchJob maxReplicas 2^40",
        "the max-workers annotation 2^40"])
def test_every_count_is_bounded_at_admission(api_server: ServeProcess, body: bytes,
                                             field: str) -> None:
    with api_server.client("alice") as client:
        started = time.monotonic()
        refused(client.post("/v1/jobs", content=body, headers=YAML), 422, field)
        assert time.monotonic() - started < SOON
    alive(api_server)


def test_a_job_at_the_clusters_size_answers_at_once(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        started = time.monotonic()
        job = client.post("/v1/jobs", json={"name": "wide", "command": "x", "min": 1,
                                            "max": 16, "epochs": 100000})
        assert job.status_code == 201, job.text
        assert max(int(k) for k in job.json()["speedup"]) == 16
        assert len(job.json()["speedup"]) <= 40
        assert client.get(f"/v1/jobs/{job.json()['name']}").status_code == 200
        assert client.delete(f"/v1/jobs/{job.json()['name']}").status_code == 200
        assert time.monotonic() - started < SOON


# ----- input that was silently accepted ----------------------------------------------------
SILENT = [
    ("an unknown placement strategy", {"placement_strategy": "wild"}, "placement_strategy"),
    ("an unknown preferred domain", {"preferred_domain": "rack-9"}, "preferred_domain"),
    ("min as a string", {"min": "2"}, "min"),
    ("priority as a boolean", {"priority": True}, "priority"),
    ("a category past its column", {"category": "c" * 101}, "category"),
    ("a command holding NUL", {"command": "run\x00me"}, "command"),
    ("a name past its length", {"name": "n" * 41}, "name"),
    ("priority past the column's width", {"priority": 2**31}, "priority"),
    ("kind as a mapping", {"kind": {"a": 1}}, "kind"),
]


@pytest.mark.parametrize(("change", "field"), [(c, f) for _, c, f in SILENT],
                         ids=[f"refuses {what}" for what, *_ in SILENT])
def test_silently_accepted_values_are_refused(api_server: ServeProcess, change: dict,
                                              field: str) -> None:
    doc = {"name": "silent", "command": "x", **change}
    with api_server.client("alice") as client:
        refused(client.post("/v1/jobs", json=doc), 422, field)


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("post", "/v1/jobs", b'{"name": "a", "command": "x", "max": 1%s}', "max"),
    ("post", "/v1/jobs", b'{"name": "a", "command": "x", "epochs": -1%s}', "epochs"),
    ("post", "/v1/jobs", b"name: a\ncommand: x\npriority: 1%s\n", "priority"),
    ("put", "/v1/schedulers/default", b'{"algorithm": "FIFO", "rate_limit_seconds": 1%s}',
     "rate_limit_seconds"),
    ("post", "/v1/jobs", read_example("mpijob.yaml").replace(
        b'voda.io/max-workers: "4"', b'voda.io/max-workers: "1%s"'),
     "metadata.annotations.voda.io/max-workers"),
], ids=["JSON", "negative", "YAML", "another route", "annotation"])
def test_an_out_of_range_integer_is_said_to_be_out_of_range(
        api_server: ServeProcess, method: str, path: str, body: bytes, field: str) -> None:
    headers = {"Content-Type": "application/yaml" if b"{" not in body[:1] else
               "application/json"}
    with api_server.client("root") as client:
        for zeros in (20, 60):  # within the guard's 30 digits, and beyond them
            response = client.request(method, path, content=body.replace(
                b"%s", b"0" * zeros), headers=headers)
            reason = next(e["reason"] for e in refused(response, 422, field)["errors"]
                          if e["field"] == field)
            assert "integer" not in reason.split(":")[0]
            assert any(words in reason for words in (
                "out of range", "at most", "at least", "less than", "greater than")), reason


@pytest.mark.parametrize(("body", "headers", "field"), [
    (b'{"name": "a", "command": "x", "min": 1, "min": 2}', {"Content-Type": "application/json"},
     "min"),
    (b"name: a\ncommand: x\nmin: 1\nmin: 2\n", YAML, "min"),
    (b'{"name": "a", "command": "x", "epochs": NaN}', {"Content-Type": "application/json"},
     "body"),
    (b"name: a\ncommand: x\nepochs: .inf\n", YAML, "epochs"),
    (read_example("mpijob.yaml").replace(b"slotsPerWorker: 1", b"slotsPerWorker: 0"), YAML,
     "spec.slotsPerWorker"),
], ids=["duplicate JSON keys", "duplicate YAML keys", "NaN", "infinity", "slotsPerWorker 0"])
def test_malformed_documents_are_refused(api_server: ServeProcess, body: bytes, headers: dict,
                                         field: str) -> None:
    with api_server.client("alice") as client:
        refused(client.post("/v1/jobs", content=body, headers=headers), 422, field)


def test_patch_put_and_metrics_bodies_are_checked(api_server: ServeProcess) -> None:
    big = b'{"priority": 1, "x": "' + b"y" * (1 << 20) + b'"}'
    json_type = {"Content-Type": "application/json"}
    with api_server.client("alice") as client, api_server.client("root") as root:
        name = client.post("/v1/jobs", json={"name": "bodies", "command": "x",
                                             "epochs": 10_000}).json()["name"]
        refused(client.patch(f"/v1/jobs/{name}", content=big, headers=json_type), 413, "body")
        refused(root.put("/v1/schedulers/default", content=big, headers=json_type), 413,
                "body")
        refused(client.post(f"/v1/jobs/{name}/metrics", content=big, headers=json_type), 413,
                "body")
        refused(client.patch(f"/v1/jobs/{name}", json={"priority": 2**63}), 422, "priority")
        refused(client.patch(f"/v1/jobs/{name}", json={"priority": "1"}), 422, "priority")
        refused(client.patch(f"/v1/jobs/{name}", content=b'{"priority": 1, "priority": 2}',
                             headers=json_type), 422, "priority")
        refused(client.patch(f"/v1/jobs/{name}", content=b"priority: 1",
                             headers={"Content-Type": "application/yaml"}), 415, "Content-Type")
        refused(root.put("/v1/schedulers/default", content=b'{"rate_limit_seconds": Infinity}',
                         headers=json_type), 422, "body")
        assert client.delete(f"/v1/jobs/{name}").status_code == 200
        refused(client.patch(f"/v1/jobs/{name}", json={"priority": 1}), 409, "priority")


def test_epoch_reports_are_bounded_by_the_job(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        name = client.post("/v1/jobs", json={"name": "reports", "command": "x", "min": 1,
                                             "max": 1, "epochs": 5}).json()["name"]
        wait_for(lambda: client.get(f"/v1/jobs/{name}").json()["status"] == "Running")
        url = f"/v1/jobs/{name}/metrics"
        refused(client.post(url, json={"epoch": 6, "epoch_seconds": 1.0, "workers": 1}), 422,
                "epoch")
        refused(client.post(url, json={"epoch": 1, "epoch_seconds": 1e-9, "workers": 16}), 422,
                "workers")
        refused(client.post(url, content=b'{"epoch": 1, "epoch_seconds": NaN, "workers": 1}',
                            headers={"Content-Type": "application/json"}), 422, "body")
        refused(client.post(url, json={"epoch": 1, "epoch_seconds": 1e300, "workers": 1}), 422,
                "epoch_seconds")
        assert client.post(url, json={"epoch": 1, "epoch_seconds": 2.0,
                                      "workers": 1}).status_code == 200
        client.delete(f"/v1/jobs/{name}")


def test_the_openapi_document_declares_the_bearer_scheme_and_the_job_body(
    api_server: ServeProcess,
) -> None:
    document = httpx.get(f"{api_server.url}/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    body = document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["anyOf"][0]["$ref"] == "#/components/schemas/VodaJob"
    job = document["components"]["schemas"]["VodaJob"]
    assert {"name", "command", "min", "max"} <= set(job["properties"])
    assert job["properties"]["max"]["anyOf"][0]["maximum"] >= 1


# ----- nothing replayed, nothing seen that is someone else's --------------------------------
def test_an_idempotency_key_makes_one_job_of_retries(api_server: ServeProcess) -> None:
    key = f"retry-{uuid.uuid4()}"
    doc = {"name": "once", "command": "x", "epochs": 10_000}
    with api_server.client("alice") as client, api_server.client("bob") as bob:
        first = client.post("/v1/jobs", json=doc, headers={"Idempotency-Key": key})
        again = client.post("/v1/jobs", json=doc, headers={"Idempotency-Key": key})
        assert first.status_code == 201 and again.status_code == 200, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json()["uid"] == first.json()["uid"]
        # The same job re-serialized is the same request: keys reordered, other spacing,
        # YAML for JSON.
        reordered = json.dumps(dict(reversed(list(doc.items()))), indent=3).encode()
        as_yaml = yaml.safe_dump(doc, default_flow_style=False).encode()
        for body, media in ((reordered, "application/json"), (as_yaml, "application/yaml")):
            retry = client.post("/v1/jobs", content=body, headers={
                "Idempotency-Key": key, "Content-Type": media})
            assert retry.status_code == 200, retry.text
            assert retry.json()["uid"] == first.json()["uid"]
        # Without the key, the same job again is a second job of a live job's name: 409.
        refused(client.post("/v1/jobs", json=doc), 409, "name")
        other = client.post("/v1/jobs", json={**doc, "epochs": 5},
                            headers={"Idempotency-Key": key})
        refused(other, 422, "Idempotency-Key")
        bobs = bob.post("/v1/jobs", json={**doc, "name": "once-bob"},
                        headers={"Idempotency-Key": key})  # keys are per user
        assert bobs.status_code == 201 and bobs.json()["uid"] != first.json()["uid"]
        refused(client.post("/v1/jobs", json=doc, headers={"Idempotency-Key": "a b"}), 422,
                "Idempotency-Key")
        listed = client.get("/v1/jobs", params={"limit": 1000}).json()["items"]
        assert sum(j["uid"] == first.json()["uid"] for j in listed) == 1
        assert sum(j["name"] == "once" and j["status"] != "Canceled" for j in listed) == 1
        client.delete(f"/v1/jobs/{first.json()['name']}")
        bob.delete(f"/v1/jobs/{bobs.json()['name']}")


def test_others_jobs_are_anonymous_usage_in_the_cluster_view(api_server: ServeProcess) -> None:
    with api_server.client("alice") as alice, api_server.client("bob") as bob, \
            api_server.client("root") as root:
        name = bob.post("/v1/jobs", json={"name": "secret-model", "command": "x",
                                          "gpu_type": "a100", "min": 2, "max": 2,
                                          "epochs": 100_000}).json()["name"]
        wait_for(lambda: bob.get(f"/v1/jobs/{name}").json()["status"] == "Running")
        seen = alice.get("/v1/cluster").json()
        text = json.dumps(seen)
        assert "secret-model" not in text
        assert sum(n["others"] for n in seen["nodes"]) >= 2
        assert seen["last_error"] is None
        assert name in json.dumps(root.get("/v1/cluster").json())
        assert name in json.dumps(bob.get("/v1/cluster").json()["plan"])
        bob.delete(f"/v1/jobs/{name}")


def test_the_cli_encodes_job_names(api_server: ServeProcess) -> None:
    from typer.testing import CliRunner

    from voda.cli.main import app

    env = {"VODA_CONFIG": "/nonexistent/config.toml", "VODA_URL": api_server.url,
           "VODA_TOKEN": api_server.tokens["alice"]}
    result = CliRunner().invoke(app, ["describe", "../../healthz", "--json"], env=env)
    assert result.exit_code == 2 and "not a name" in result.output
    assert '"status": "ok"' not in result.output
