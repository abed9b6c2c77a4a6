"""The dashboard's login is a server-side session, over real HTTP against `voda serve`:
the cookie holds a random id (never the token), logging out ends it wherever the cookie
was copied, it expires, and a user's sessions are bounded (the oldest ended first)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.conftest import TOKENS, ServeProcess
from tests.polling import wait_for
from voda.config import User


def login(server: ServeProcess, user: str) -> httpx.Response:
    answer = httpx.post(f"{server.url}/ui/login", data={"token": TOKENS[user]},
                        headers={"Origin": server.url})
    assert answer.status_code == 303, answer.text
    return answer


def page(server: ServeProcess, cookies: httpx.Cookies | dict[str, str],
         path: str = "/ui/cluster") -> httpx.Response:
    return httpx.get(f"{server.url}{path}", cookies=cookies)


def form_token_of(html: str) -> str:
    found = re.search(r'name="form_token" value="([^"]+)"', html)
    assert found, "no form token on the page"
    return found.group(1)


@pytest.fixture
def server(serve, tmp_path: Path) -> ServeProcess:
    return serve(f"sqlite:///{tmp_path / 'v.db'}", tokens=True)


def test_the_cookie_is_a_session_that_logging_out_ends(server: ServeProcess) -> None:
    answer = login(server, "alice")
    header = answer.headers["set-cookie"]
    name = f"voda_session_{server.port}"
    assert header.startswith(f"{name}=")
    assert "HttpOnly" in header and "SameSite=strict" in header.replace("Strict", "strict")
    assert "Path=/;" in header and "Secure" not in header  # plain HTTP on loopback
    session_id = answer.cookies[name]
    assert len(session_id) >= 43 and TOKENS["alice"] not in header  # not the token
    copied = {name: session_id}
    shown = page(server, copied)
    assert shown.status_code == 200 and 'id="user-name"' in shown.text
    # A form without the session's form token does not log out (nor does another site's).
    assert httpx.post(f"{server.url}/ui/logout", cookies=copied,
                      data={"form_token": "made-up"}).status_code == 403
    assert httpx.post(f"{server.url}/ui/logout", cookies=copied,
                      data={"form_token": form_token_of(shown.text)},
                      headers={"Origin": "http://evil.example"}).status_code == 403
    assert page(server, copied).status_code == 200
    out = httpx.post(f"{server.url}/ui/logout", cookies=copied,
                     data={"form_token": form_token_of(shown.text)})
    assert out.status_code == 303 and out.headers["location"] == "/ui/login"
    assert f"{name}=;" in out.headers["set-cookie"] and "Max-Age=0" in out.headers["set-cookie"]
    # The copied cookie is refused from now on: pages go to the login, streams are 401.
    after = page(server, copied)
    assert after.status_code == 303 and after.headers["location"].startswith("/ui/login")
    assert f"{name}=;" in after.headers["set-cookie"]  # the browser forgets it
    assert page(server, copied, "/ui/stream/cluster").status_code == 401
    assert httpx.post(f"{server.url}/ui/actions/algorithm", cookies=copied, data={
        "gpu_type": "default", "algorithm": "FIFO", "confirm": "yes",
        "form_token": form_token_of(shown.text)}).status_code == 401
    # The token itself is no cookie: presenting it as one is no login.
    assert page(server, {name: TOKENS["alice"]}).status_code == 303
    assert page(server, {"voda_token": TOKENS["alice"]}).status_code == 303
    # Logging in again starts a new session; the API's bearer token never changed.
    again = login(server, "alice").cookies
    assert again[name] != session_id and page(server, again).status_code == 200
    with server.client("alice") as client:
        assert client.get("/v1/jobs").status_code == 200


def test_the_form_token_belongs_to_the_session(server: ServeProcess) -> None:
    root = login(server, "root").cookies
    other = login(server, "root").cookies  # the same user, another session
    token = form_token_of(page(server, root, "/ui/scheduler").text)
    assert form_token_of(page(server, root, "/ui/scheduler").text) == token  # stable
    assert token != form_token_of(page(server, other, "/ui/scheduler").text)
    assert TOKENS["root"] not in page(server, root, "/ui/scheduler").text
    fields = {"gpu_type": "default", "algorithm": "FIFO", "confirm": "yes"}
    wrong = httpx.post(f"{server.url}/ui/actions/algorithm", cookies=other,
                       data={**fields, "form_token": token})
    assert wrong.status_code == 403 and "form_token" in wrong.text
    switched = httpx.post(f"{server.url}/ui/actions/algorithm", cookies=root,
                          data={**fields, "form_token": token})
    assert switched.status_code == 200, switched.text
    with server.client("root") as client:
        assert client.get("/v1/schedulers/default").json()["algorithm"] == "FIFO"


def test_a_session_expires_after_session_hours(serve, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", tokens=True,
                   config="[server]\nsession_hours = 0.002\n")  # 7.2 s
    answer = login(server, "alice")
    assert "Max-Age=7;" in answer.headers["set-cookie"]
    cookies = answer.cookies
    assert page(server, cookies).status_code == 200
    wait_for(lambda: page(server, cookies).status_code == 303)  # expired: to the login
    assert page(server, cookies, "/ui/stream/cluster").status_code == 401


def test_a_users_sessions_are_bounded_the_oldest_ended_first(server: ServeProcess) -> None:
    first = login(server, "bob").cookies
    second = login(server, "bob").cookies
    for _ in range(19):  # 20 sessions per user at most
        login(server, "bob")
    assert page(server, first).status_code == 303  # ended
    assert page(server, second).status_code == 200
    alice = login(server, "alice").cookies  # other users' sessions are their own
    assert page(server, alice).status_code == 200


def test_sessions_are_bounded_in_all_and_expire() -> None:
    from voda.api.ui.session import Sessions

    now = [0.0]
    sessions = Sessions(hours=1.0, per_user=2, total=3, clock=lambda: now[0])
    alice, bob = User("alice"), User("bob", admin=True)
    a1, a2, a3 = sessions.create(alice), sessions.create(alice), sessions.create(alice)
    assert sessions.get(a1) is None and sessions.get(a2) and sessions.get(a3)  # per user
    b1 = sessions.create(bob)
    b2 = sessions.create(bob)  # the fourth in all: alice's oldest goes
    assert len(sessions) == 3 and sessions.get(a2) is None
    assert sessions.get(b1).user == bob and sessions.get(b2) and sessions.get(a3)
    sessions.revoke(b1)
    assert sessions.get(b1) is None and len(sessions) == 2
    now[0] = 3599.0
    assert sessions.get(a3) is not None
    now[0] = 3600.0
    assert sessions.get(a3) is None and sessions.get(b2) is None
    sessions.create(alice)
    assert len(sessions) == 1  # the expired are dropped, not kept
    assert sessions.get("") is None and sessions.get("x" * 5000) is None


def test_under_tls_the_cookie_is_secure_with_the_host_prefix(
        serve, tmp_path: Path, certificate: tuple[Path, Path, Path]) -> None:
    import ssl

    ca, chain, key = certificate
    context = ssl.create_default_context(cafile=str(ca))
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", "--tls-cert", str(chain), "--tls-key",
                   str(key), tokens=True, scheme="https", verify=context)
    answer = httpx.post(f"{server.url}/ui/login", data={"token": TOKENS["alice"]},
                        headers={"Origin": server.url}, verify=context)
    assert answer.status_code == 303, answer.text
    header = answer.headers["set-cookie"]
    assert header.startswith(f"__Host-voda_session_{server.port}=")
    assert "Secure" in header and "Path=/;" in header and "Domain" not in header
    shown = httpx.get(f"{server.url}/ui/cluster", cookies=answer.cookies, verify=context)
    assert shown.status_code == 200
