"""Settings from defaults, config.toml, environment and flags; tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from voda.cli.main import app
from voda.client_settings import load_client_settings
from voda.config import (
    ConfigError,
    User,
    UserLimits,
    hash_token,
    load_server_settings,
    parse_tokens,
)
from voda.core.placement.manager import TopologyPlacer
from voda.core.placement.registry import get_placer


def test_tokens_are_kept_hashed_and_may_be_given_hashed() -> None:
    digest = hash_token("second-token-0123456789")
    assert parse_tokens(f"alice:first-token-0123456789, admin:sha256:{digest}:admin") == {
        hash_token("first-token-0123456789"): User("alice"), digest: User("admin", admin=True)}
    assert parse_tokens("vera:viewer-token-0123456789:viewer") == {
        hash_token("viewer-token-0123456789"): User("vera", viewer=True)}
    for bad in ("alice", "alice:long-enough-token:root", "alice:long-enough-token:admin:viewer",
                ":long-enough-token", "alice:short", "alice:sha256:abc",
                "al/ice:long-enough-token"):
        with pytest.raises(ConfigError, match="tokens"):
            parse_tokens(bad)


def test_user_limits_and_history_sharing_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[server]\nuser_best_priority = 3\nshared_history = "alice, bob"\n'
                    "[users.carol]\nbest_priority = 1\nmax_queued_jobs = 2\n")
    settings = load_server_settings(env={}, path=path)
    assert settings.limits_of("carol") == UserLimits(1, 2)
    assert settings.limits_of("dave") == UserLimits(3, 1000)
    assert settings.history_owner("bob") == "shared" and settings.history_owner("dave") == "dave"
    path.write_text("[users.carol]\nbest_priority = -1\n")
    with pytest.raises(ConfigError, match=r"users\.carol\.best_priority"):
        load_server_settings(env={}, path=path)


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[server]\nport = 9000\ncluster = "2x2"\ntime_scale = 5.0\n'
                    'tokens = "a:t-admin-token-0123456789:admin"\n'
                    '[client]\nurl = "http://h:1/"\ntoken = "t"\n')
    env = {"VODA_CLUSTER": "8x8", "VODA_PORT": "9100"}
    settings = load_server_settings({"port": 9200}, env=env, path=path)
    assert (settings.port, settings.cluster, settings.time_scale) == (9200, "8x8", 5.0)
    assert settings.tokens[hash_token("t-admin-token-0123456789")].admin
    client = load_client_settings(env={}, path=path)
    assert (client.url, client.token) == ("http://h:1", "t")
    assert load_client_settings(token="x", env={"VODA_URL": "http://e:2"}, path=path).url == (
        "http://e:2")


def test_no_tokens_configured_means_a_generated_one(tmp_path: Path) -> None:
    from voda.api.token_file import ensure_token

    settings = load_server_settings(env={"VODA_TOKEN_FILE": str(tmp_path / "t")},
                                    path=tmp_path / "none.toml")
    assert not settings.tokens
    with_token, token, path = ensure_token(replace(settings, token_file=str(tmp_path / "t")))
    assert token and path == tmp_path / "t" and with_token.tokens[hash_token(token)].admin
    path.chmod(0o644)  # readable by others: replaced
    _, again, _ = ensure_token(replace(settings, token_file=str(tmp_path / "t")))
    assert again != token and path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("text", "match"), [
    ("[server]\nport = 'x'\n", "port"),
    ("[server]\ncolour = 1\n", "colour"),
    ("[server\n", "TOML"),
    ("[server]\nmax_streams_per_user = 0\n", "max_streams_per_user: must be greater"),
    ("[server]\nheader_timeout_seconds = -1\n", "header_timeout_seconds"),
    ("[server]\nhistory_sample_seconds = 0\n", "history_sample_seconds: expected 0.1 to 3600"),
    ("[server]\nhistory_days = 1000\n", "history_days: expected days > 0"),
], ids=["a port that is not a number", "an unknown setting", "a file that is not TOML",
        "no stream allowed", "a negative deadline", "samples taken all the time",
        "history kept for ever"])
def test_bad_settings_name_the_problem(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_server_settings(env={}, path=path)


def test_the_placer_and_its_settings_come_from_the_file_and_the_environment(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[server]\nplacement = "topology-packed"\n'
                    "[placement]\nresource_weight = 0.5\nmax_nodes_per_leaf = 2\n")
    settings = load_server_settings(env={}, path=path)
    assert settings.placement == "topology-packed"
    assert settings.placement_settings == {"resource_weight": 0.5, "max_nodes_per_leaf": 2}
    placer = get_placer(settings.placement, settings.placement_settings)
    assert isinstance(placer, TopologyPlacer)
    assert (placer.settings.resource_weight, placer.settings.max_nodes_per_leaf) == (0.5, 2)
    assert placer.settings.learn_layout is False  # what topology-packed means, kept
    assert load_server_settings(env={"VODA_PLACEMENT": "naive"}, path=path).placement == "naive"
    path.write_text('placement = "tight"\n')
    with pytest.raises(ConfigError, match="placement: expected a table"):
        load_server_settings(env={}, path=path)


@pytest.mark.parametrize(("config", "flags", "message"), [
    ("", ("--placement", "tight"), "placement: unknown placer 'tight'"),
    ("[placement]\nresource_weight = -1\n", (),
     "placement.resource_weight: must be a non-negative number"),
    ("[placement]\nweight = 1\n", (), "placement.weight: unknown setting"),
    ("[placement]\nresource_weight = 0.5\n", ("--placement", "naive"),
     "placer 'naive' takes no settings"),
], ids=["unknown placer", "negative weight", "unknown setting", "settings for naive"])
def test_serve_refuses_bad_placement_settings_with_exit_2(
    tmp_path: Path, config: str, flags: tuple[str, ...], message: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(config)
    result = CliRunner().invoke(
        app, ["serve", "--backend", "emulated", "--db", f"sqlite:///{tmp_path}/v.db", *flags],
        env={"VODA_CONFIG": str(path)},
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_connection_limits_come_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[server]\nmax_streams_per_user = 2\nheader_timeout_seconds = 3\n")
    settings = load_server_settings(env={"VODA_MAX_STREAMS": "5",
                                         "VODA_BODY_TIMEOUT": "1.5"}, path=path)
    assert (settings.max_streams_per_user, settings.max_streams) == (2, 5)
    assert (settings.header_timeout_seconds, settings.body_timeout_seconds) == (3.0, 1.5)
    assert settings.max_connections == 1000
    assert settings.max_connections_per_address == 256


def test_the_log_format_and_level_come_from_the_file_the_environment_and_flags(
        tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert (load_server_settings(env={}, path=path).log_format,
            load_server_settings(env={}, path=path).log_level) == ("text", "info")
    path.write_text('[server]\nlog_format = "json"\nlog_level = "warning"\n')
    settings = load_server_settings(env={"VODA_LOG_LEVEL": "DEBUG"}, path=path)
    assert (settings.log_format, settings.log_level) == ("json", "debug")
    flagged = load_server_settings({"log_format": "text", "log_level": "error"},
                                   env={"VODA_LOG_FORMAT": "json"}, path=path)
    assert (flagged.log_format, flagged.log_level) == ("text", "error")
    path.write_text('[server]\nlog_format = "xml"\n')
    with pytest.raises(ConfigError, match=r"log_format: expected one of text, json, got 'xml'"):
        load_server_settings(env={}, path=path)


@pytest.mark.parametrize(("flags", "env", "message"), [
    (("--log-format", "xml"), {}, "log_format: expected one of text, json, got 'xml'"),
    ((), {"VODA_LOG_LEVEL": "loud"},
     "log_level: expected one of debug, info, warning, error, got 'loud'"),
], ids=["a bad --log-format", "a bad VODA_LOG_LEVEL"])
def test_serve_refuses_a_bad_log_setting_with_exit_2(
    tmp_path: Path, flags: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--backend", "emulated", "--db", f"sqlite:///{tmp_path}/v.db", *flags],
        env={"VODA_CONFIG": str(tmp_path / "none.toml"), **env},
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
