"""A real server bound to 0.0.0.0 asks for its token: over plain HTTP, over the WebSocket, in Chromium.

Every request goes to 127.0.0.1 (the tests never send traffic anywhere else); binding to 0.0.0.0 is what
turns the gate on.
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import access
from app.server import auth
from bench.chromium import CHROMIUM
from tests.browser.conftest import after, runs, serving
from tests.conftest import copy_store, free_test_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-7f3a9c2e1b5d4f60a8e2c4b6d8f0a1c3"
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def gated(bundled_template, tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    root = tmp_path_factory.mktemp("gated")
    db = copy_store(bundled_template, root / "runs.duckdb")
    with serving(db, host="0.0.0.0", token=TOKEN, log=root / "streamlit.log") as srv:
        yield srv


def request(port: int, path: str, headers: dict | None = None, method: str = "GET"):
    """One plain HTTP request to 127.0.0.1:`port` (redirects are not followed)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def cookie_header(server) -> dict:
    return {"Cookie": f"{auth.cookie_name(server.port)}={auth.cookie_value(TOKEN)}"}


def test_without_a_token_every_path_gets_the_token_page(gated):
    for path in (
        "/",
        "/runs",
        "/?run=demo&rollout=3",
        "/_stcore/host-config",
        "/static/js/index.js",
        "/media/x.png",
        "/component/x/index.html",
        "/x/_stcore/health",
    ):
        status, headers, body = request(gated.port, path)
        assert status == 401, path
        assert "access token required" in body and "demo" not in body, path
        assert headers.get("cache-control") == "no-store"
    status, _, _ = request(gated.port, "/_stcore/upload_file/session/file", method="PUT")
    assert status == 401
    assert request(gated.port, "/_stcore/health")[0] == 200  # liveness only: "ok"


def test_a_wrong_token_is_refused(gated):
    for wrong in ("wrong", TOKEN[:-1], TOKEN + "0", TOKEN.upper(), ""):
        status, headers, body = request(gated.port, f"/?token={wrong}")
        assert status == 403 and "not right" in body, wrong
        assert "set-cookie" not in {k.lower() for k in headers}
    status, _, _ = request(gated.port, "/", {"Authorization": "token wrong"})
    assert status == 401
    other_port = {"Cookie": f"{auth.cookie_name(gated.port + 1)}={auth.cookie_value(TOKEN)}"}
    assert request(gated.port, "/", other_port)[0] == 401
    forged = {"Cookie": f"{auth.cookie_name(gated.port)}={auth.cookie_value('guess')}"}
    assert request(gated.port, "/", forged)[0] == 401


def test_the_right_token_sets_a_cookie_and_leaves_the_url(gated):
    status, headers, body = request(gated.port, f"/?run=demo&token={TOKEN}&rollout=3")
    headers = {k.lower(): v for k, v in headers.items()}
    assert status == 303
    assert headers["location"] == "/?run=demo&rollout=3"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{auth.cookie_name(gated.port)}=")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie  # the cookie holds an HMAC of the token
    status, _, body = request(gated.port, "/?run=demo&rollout=3", cookie_header(gated))
    assert status == 200 and '<div id="root">' in body  # Streamlit's page
    assert request(gated.port, "/", {"Authorization": f"token {TOKEN}"})[0] == 200
    assert request(gated.port, "/", {"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_the_websocket_needs_the_cookie(gated):
    # The synchronous client: the browser tests' Playwright keeps an event loop on this thread.
    from websockets.exceptions import InvalidStatus  # noqa: PLC0415 - only here
    from websockets.sync.client import connect  # noqa: PLC0415 - only here

    def handshake(headers: dict) -> str:
        url = f"ws://127.0.0.1:{gated.port}/_stcore/stream"
        try:
            with connect(url, additional_headers=headers, subprotocols=["streamlit"], open_timeout=30):
                return "open"
        except InvalidStatus as exc:
            return str(exc.response.status_code)

    assert handshake({}) == "403"
    forged = {"Cookie": f"{auth.cookie_name(gated.port)}={TOKEN}"}  # the token itself is not the cookie
    assert handshake(forged) == "403"
    assert handshake(cookie_header(gated)) == "open"


def test_browser_token_page_then_app_then_cookie(browser, gated):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    runs(page)
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{gated.url}/rollout?run=demo&rollout=2")
        page.wait_for_selector("[data-testid=creditlens-token-page]")
        assert page.locator("[data-testid=stApp]").count() == 0
        assert "demo" not in page.locator("body").inner_text()

        page.fill("input[name=token]", "not-the-token")
        page.click("button[type=submit]")
        page.wait_for_selector("text=That token is not right.")
        assert page.locator("[data-testid=stApp]").count() == 0

        page.fill("input[name=token]", TOKEN)
        after(page, lambda: page.click("button[type=submit]"))
        page.wait_for_selector(".js-plotly-plot .main-svg")
        assert "token=" not in page.url
        assert "run demo" in page.locator("body").inner_text()
        cookies = {c["name"]: c for c in context.cookies()}
        kept = cookies[auth.cookie_name(gated.port)]
        assert kept["httpOnly"] and kept["value"] != TOKEN

        # A link without the token opens in the same browser: the cookie is enough.
        other = context.new_page()
        after(other, lambda: other.goto(f"{gated.url}/runs"))
        other.wait_for_selector("h1:has-text('Runs')")
        assert other.locator("[data-testid=creditlens-token-page]").count() == 0
        assert other.locator("[data-testid=stException]").count() == 0
    finally:
        context.close()


def test_browser_with_the_token_in_the_url_lands_on_the_view(browser, gated):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        after(page, lambda: page.goto(f"{gated.url}/rollout?token={TOKEN}&run=demo&rollout=5"))
        page.wait_for_selector(".js-plotly-plot .main-svg")
        assert "token=" not in page.url and "rollout=5" in page.url
    finally:
        context.close()


def _start_cli(db: Path, port: int, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    """`creditlens app --host 0.0.0.0` as a user starts it; returns the process and its first lines. The
    token is the point: the store has the bundled runs already (a copy) and the server skips its warm-up."""
    env = {k: v for k, v in os.environ.items() if k != access.TOKEN_ENV}
    env["CREDITLENS_WARMUP"] = "0"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "app",
            "--db",
            str(db),
            "--port",
            str(port),
            "--host",
            "0.0.0.0",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if line.startswith("Credit Lens on http://127.0.0.1"):
            break
    return proc, lines


def _wait_health(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/_stcore/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("the server did not come up")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_cli_generates_a_token_and_prints_a_ready_url(bundled_db):
    port = free_test_port()
    proc, lines = _start_cli(bundled_db, port)
    try:
        text = "\n".join(lines)
        assert "reachable from the network" in text and "generated for this start" in text, text
        url = next(line for line in lines if line.startswith("Credit Lens on http://127.0.0.1"))
        token = re.search(r"\?token=([A-Za-z0-9_-]+)$", url).group(1)
        assert len(token) >= 32
        _wait_health(port, proc)
        assert request(port, "/")[0] == 401
        status, headers, _ = request(port, f"/?token={token}")
        assert status == 303 and "set-cookie" in {k.lower() for k in headers}
    finally:
        _stop(proc)


@pytest.mark.slow
def test_cli_no_token_warns_and_serves_openly(bundled_db):
    port = free_test_port()
    proc, lines = _start_cli(bundled_db, port, "--no-token")
    try:
        text = "\n".join(lines)
        assert "reachable from the network" in text and "WARNING: --no-token" in text, text
        assert "?token=" not in text
        _wait_health(port, proc)
        assert request(port, "/")[0] == 200
    finally:
        _stop(proc)
