"""The client's settings (URL, token, CA bundle) and the config file's location: what
every `voda` client command reads before it calls the service. Kept apart from
voda.config, whose server settings cost a client command about 10 ms to import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8470
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ClientSettings:
    url: str = DEFAULT_URL
    token: str | None = None
    verify: str | bool = True  # a CA bundle for a service with its own certificate


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("VODA_CONFIG"):
        return Path(env["VODA_CONFIG"])
    import platformdirs  # imported on use: every client command reads this module

    return Path(platformdirs.user_config_dir("voda")) / "config.toml"


def token_path(setting: str = "", env: Mapping[str, str] | None = None) -> Path:
    """Where `voda serve` keeps the token it generated and the CLI looks for it."""
    env = os.environ if env is None else env
    chosen = setting or env.get("VODA_TOKEN_FILE", "")
    return Path(chosen).expanduser() if chosen else config_path(env).parent / "token"


def read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    import tomllib  # only when there is a file: every client command reads this module

    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


def load_client_settings(
    url: str | None = None,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> ClientSettings:
    env = os.environ if env is None else env
    file = read_file(path or config_path(env))
    values = file.get("client", {})
    token = token or env.get("VODA_TOKEN") or values.get("token")
    if not token:
        token = read_token_file(token_path(file.get("server", {}).get("token_file", ""), env))
    ca = env.get("VODA_CA_BUNDLE") or values.get("ca_bundle")
    return ClientSettings(
        url=(url or env.get("VODA_URL") or values.get("url") or DEFAULT_URL).rstrip("/"),
        token=token or None,
        verify=str(ca) if ca else True,
    )


def read_token_file(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None
