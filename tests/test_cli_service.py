"""The client commands against a real `voda serve` over HTTP (the CLI runs in-process)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, ServeFactory, ServeProcess, free_port
from voda.cli.main import app

runner = CliRunner()


def voda(server: ServeProcess | None, *args: str, user: str = "alice",
         url: str | None = None) -> tuple[int, str]:
    env = {"VODA_CONFIG": "/nonexistent/config.toml",
           "VODA_URL": url or (server.url if server else ""),
           "VODA_TOKEN": server.tokens[user] if server else ""}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def renamed(example: str, name: str, folder: Path) -> str:
    """A copy of an example job under another name (the shared service holds each live
    name once); its path."""
    import yaml

    document = yaml.safe_load((ROOT / "examples" / "jobs" / example).read_text())
    if "metadata" in document:
        document["metadata"]["name"] = name
    else:
        document["name"] = name
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_submit_list_describe_priority_delete(api_server: ServeProcess) -> None:
    names, uids = [], []
    for example in ("compact.yaml", "mpijob.yaml", "pytorchjob.yaml"):
        code, out = voda(api_server, "submit", "-f", str(ROOT / "examples" / "jobs" / example),
                         "--json")
        assert code == 0, out
        names.append(json.loads(out)["name"])
        uids.append(json.loads(out)["uid"])
    assert names == ["resnet-cifar", "tf-mnist", "bert-finetune"], "the names in the files"
    code, out = voda(api_server, "jobs", "--json", "--limit", "1000")
    assert code == 0 and set(names) <= {j["name"] for j in json.loads(out)["items"]}
    code, out = voda(api_server, "jobs")
    assert code == 0 and "STATUS" in out and names[0][:12] in out
    code, out = voda(api_server, "describe", names[0], "--json")
    assert code == 0 and json.loads(out)["kind"] == "VodaJob"
    code, out = voda(api_server, "describe", names[1])
    assert code == 0 and "MPIJob" in out and "Speedup" in out
    code, out = voda(api_server, "priority", names[2], "7", "--json")
    assert code == 0 and json.loads(out)["priority"] == 7
    code, out = voda(api_server, "delete", *names, "--json")
    assert code == 0 and {j["status"] for j in json.loads(out)} == {"Canceled"}
    # A finished job's name is free: the new job has it, the old one keeps it and its uid.
    code, out = voda(api_server, "submit", "-f", str(ROOT / "examples" / "jobs" /
                                                     "compact.yaml"), "--json")
    assert code == 0 and json.loads(out)["name"] == "resnet-cifar"
    again = json.loads(out)["uid"]
    code, out = voda(api_server, "submit", "-f", str(ROOT / "examples" / "jobs" /
                                                     "compact.yaml"))
    assert code == 1 and "error 409" in out and again in " ".join(out.split())
    code, out = voda(api_server, "describe", "resnet-cifar", "--json")
    assert code == 0 and json.loads(out)["uid"] == again and again != uids[0]
    code, out = voda(api_server, "describe", uids[0])
    assert code == 0 and uids[0] in out and "Canceled" in out
    code, out = voda(api_server, "delete", "resnet-cifar", "--json")
    assert code == 0 and json.loads(out)[0]["uid"] == again
    code, out = voda(api_server, "cluster", "--json")
    assert code == 0 and {t["gpu_type"] for t in json.loads(out)["gpu_types"]} == {
        "default", "a100"}
    code, out = voda(api_server, "cluster")
    assert code == 0 and "ALGORITHM" in out


def test_algorithm_set_and_get(api_server: ServeProcess) -> None:
    code, out = voda(api_server, "algorithm", "get", "--gpu-type", "default", "--json",
                     user="root")
    assert code == 0
    current = json.loads(out)["algorithm"]
    code, out = voda(api_server, "algorithm", "set", "Unknown", "--gpu-type", "default",
                     user="root")
    assert code == 1 and "ElasticFIFO" in out
    code, out = voda(api_server, "algorithm", "set", current, "--gpu-type", "default", "--json",
                     user="root")
    assert code == 0 and json.loads(out)["algorithm"] == current
    code, out = voda(api_server, "algorithm", "set", current, "--gpu-type", "default")
    assert code == 1 and "administrator" in out


@pytest.mark.parametrize(("args", "code"), [
    (("describe", "no-such-job"), 4),
    (("delete", "no-such-job"), 4),
    (("submit", "-f", "/nonexistent/job.yaml"), 2),
    (("priority", "no-such-job", "--", "-1"), 1),
], ids=["describe of an unknown job", "delete of an unknown job", "a missing job file",
        "a negative priority"])
def test_clear_exit_codes(api_server: ServeProcess, args: tuple[str, ...], code: int) -> None:
    got, out = voda(api_server, *args)
    assert got == code, out
    assert out.strip()


def test_refused_submission_names_the_field(api_server: ServeProcess, tmp_path: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text("name: a\ncommand: x\nmin: 3\nmax: 1\n")
    code, out = voda(api_server, "submit", "-f", str(job))
    assert code == 1 and "max" in out


def test_unreachable_service() -> None:
    code, out = voda(None, "jobs", url=f"http://127.0.0.1:{free_port()}")
    assert code == 3 and "cannot reach" in out


def test_without_configured_tokens_a_token_is_generated_and_required(
    serve: ServeFactory, tmp_path: Path
) -> None:
    server = serve(f"sqlite:///{tmp_path / 'open.db'}")
    token_file = tmp_path / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= 32 and f"token: {token}" in server.log_path.read_text()
    with server.client(anonymous=True) as anonymous:
        assert anonymous.get("/v1/jobs").status_code == 401
        assert anonymous.post("/v1/jobs", json={"name": "x", "command": "touch /tmp/p"},
                              headers={"Origin": "http://evil.example"}).status_code == 403
    env = {"VODA_CONFIG": str(tmp_path / "none.toml"), "VODA_URL": server.url,
           "VODA_TOKEN_FILE": str(token_file)}
    result = runner.invoke(app, ["jobs", "--json"], env=env)  # the CLI finds the token
    assert result.exit_code == 0 and json.loads(result.output)["total"] == 0
    server.kill()
    again = serve(f"sqlite:///{tmp_path / 'open.db'}", port=server.port)
    assert token_file.read_text().strip() == token  # kept across restarts
    with again.client() as client:
        assert client.get("/v1/jobs").status_code == 200


def test_plan_what_if_says_when_a_spec_would_start_and_finish(
        api_server: ServeProcess, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: what-if\ncommand: sleep 1\nmin: 1\nmax: 2\nepochs: 20\n")
    code, out = voda(api_server, "plan", "--what-if", str(spec))
    assert code == 0, out
    assert out.startswith("what-if (1-2 GPUs of type ")
    assert "starts " in out and "finishes " in out
    assert "(assuming no new arrivals)" in out
    code, out = voda(api_server, "plan", "--what-if", str(spec), "--json")
    assert code == 0, out
    answer = json.loads(out)
    assert answer["forecast"]["basis"] == "assuming no new arrivals"
    assert answer["forecast"]["start"] is not None
    code, listed = voda(api_server, "jobs", "--json", "--limit", "1000")
    assert not [j for j in json.loads(listed)["items"] if j["name"].startswith("what-if")]


def test_plan_what_if_refuses_a_bad_spec_naming_the_field_and_mixed_modes(
        api_server: ServeProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a\ncommand: x\nmin: 3\nmax: 1\n")
    code, out = voda(api_server, "plan", "--what-if", str(bad))
    assert code != 0 and "max" in out
    code, out = voda(api_server, "plan", "--what-if", str(bad), "--gpus", "4")
    assert code == 2 and "--gpus" in out
    code, out = voda(api_server, "plan")
    assert code == 2 and "--what-if" in out


EXAMPLES = ROOT / "examples" / "jobs"


def test_submit_takes_several_documents_and_files_in_order(api_server: ServeProcess,
                                                           tmp_path: Path) -> None:
    several = tmp_path / "several.yaml"
    several.write_text(Path(renamed("compact.yaml", "several-1", tmp_path)).read_text()
                       + "---\n" + Path(renamed("mpijob.yaml", "several-2", tmp_path)).read_text())
    code, out = voda(api_server, "submit", "-f", str(several), "-f",
                     renamed("pytorchjob.yaml", "several-3", tmp_path), "--json")
    assert code == 0, out
    submitted = json.loads(out)
    assert [j["kind"] for j in submitted] == ["VodaJob", "MPIJob", "PyTorchJob"]
    assert [j["name"] for j in submitted] == ["several-1", "several-2", "several-3"]
    # A refused document stops the rest, and the message says which one it was.
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(renamed("compact.yaml", "several-4", tmp_path)).read_text()
                   + "---\nname: broken\n")
    code, out = voda(api_server, "submit", "-f", str(bad))
    assert code == 1
    assert out.count("submitted ") == 1
    assert f"{bad} (document 2 of 2): error 422" in " ".join(out.split())
    code, _ = voda(api_server, "delete", *(f"several-{i}" for i in range(1, 5)))
    assert code == 0


def test_jobs_print_as_yaml_or_json_and_a_bad_output_is_named(api_server: ServeProcess,
                                                              tmp_path: Path) -> None:
    import yaml

    code, out = voda(api_server, "submit", "-f", renamed("compact.yaml", "printed", tmp_path),
                     "--json")
    name = json.loads(out)["name"]
    code, out = voda(api_server, "jobs", "-o", "yaml", "--limit", "1000")
    assert code == 0 and name in {j["name"] for j in yaml.safe_load(out)["items"]}
    code, out = voda(api_server, "jobs", "-o", "json", "--limit", "1000")
    assert code == 0 and name in {j["name"] for j in json.loads(out)["items"]}
    code, out = voda(api_server, "jobs", "-o", "tsv")
    assert code == 2 and "output: must be one of wide, yaml, json" in out
    assert voda(api_server, "delete", name)[0] == 0


def test_a_negative_priority_reaches_the_service_and_is_refused_there(
        api_server: ServeProcess, tmp_path: Path) -> None:
    code, out = voda(api_server, "submit", "-f", renamed("compact.yaml", "negative", tmp_path),
                     "--json")
    name = json.loads(out)["name"]
    code, out = voda(api_server, "priority", name, "-1")
    assert code == 1, out
    assert "No such option" not in out and "priority" in out
    assert voda(api_server, "delete", name)[0] == 0


def test_a_job_accepting_several_gpu_types_shows_them_and_the_one_chosen(
        api_server: ServeProcess, tmp_path: Path) -> None:
    spec = tmp_path / "either.yaml"
    spec.write_text("name: either-type\ncommand: python train.py\nmin: 1\nmax: 2\n"
                    "epochs: 3\ngpu_types: [default, a100]\n")
    code, out = voda(api_server, "submit", "-f", str(spec), "--json")
    assert code == 0, out
    submitted = json.loads(out)
    assert submitted["gpu_types"] == ["default", "a100"]
    # The shared service's other jobs may move it to another type between two reads:
    # the text must agree with a JSON read taken right after it, in one of a few tries.
    for _ in range(5):
        code, out = voda(api_server, "describe", "either-type")
        assert code == 0, out
        shown = " ".join(out.split())
        now = json.loads(voda(api_server, "describe", "either-type", "--json")[1])
        reason = " ".join((now["gpu_type_reason"] or "").split())
        if f"GPU type {now['gpu_type']} (of default|a100)" in shown and (
                not reason or f"Type chosen {reason}" in shown):
            break
    else:
        raise AssertionError(f"the types are not shown as the job has them: {shown}")
    code, _ = voda(api_server, "delete", "either-type", "--json")
    assert code == 0
