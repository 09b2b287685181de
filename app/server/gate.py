"""The token gate in front of every HTTP request and WebSocket of the Streamlit server (ASGI middleware).

Streamlit 1.67 serves apps with Starlette and lets an `st.App` add middleware (see `asgi.py`).
With a token set, a request passes when it carries the access cookie (an HMAC of the token, HttpOnly,
SameSite=Lax), an `Authorization: token <T>` / `Bearer <T>` header, or `?token=<T>` in the URL; the
last is answered with a redirect that sets the cookie and drops the token from the address bar. Anything
else gets a small page asking for the token (HTTP 401, 403 for a wrong one) and no WebSocket, so no
script runs for it. `/_stcore/health` stays open: it says "ok" and nothing else.
"""

from __future__ import annotations

import html
import os
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from app import access, keys
from app.server import auth

OPEN_PATHS = ("/_stcore/health",)

LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Credit Lens · access token</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; max-width: 34rem; margin: 12vh auto; padding: 0 1rem;
       color: #262730; }}
h1 {{ font-size: 1.5rem; }} .error {{ color: #b00020; }}
input {{ font-size: 1rem; padding: .45rem; width: 70%; }} button {{ font-size: 1rem; padding: .45rem 1rem; }}
code {{ background: #f0f2f6; padding: 0 .25rem; }}
</style></head>
<body><h1 data-testid="creditlens-token-page">Credit Lens · access token required</h1>
<p>This Credit Lens server is reachable from the network, so it asks for the token that
<code>creditlens app</code> printed when it started (or that was set with <code>--token</code> /
<code>CREDITLENS_TOKEN</code>).</p>
{error}
<form method="get" action="{action}">
<input type="password" name="{param}" placeholder="token" autocomplete="off" autofocus aria-label="token">
<button type="submit">Open</button></form>
<p>After the first visit this browser keeps a cookie, so links without the token work.</p>
</body></html>
"""


def _cookies(headers: dict[bytes, bytes]) -> dict[str, str]:
    jar = SimpleCookie()
    try:
        jar.load(headers.get(b"cookie", b"").decode("latin-1"))
    except CookieError:
        return {}
    return {k: m.value for k, m in jar.items()}


def _header_token(headers: dict[bytes, bytes]) -> str | None:
    scheme, _, value = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return value.strip() if scheme.lower() in ("token", "bearer") else None


class TokenGate:
    """ASGI middleware; `token=None` reads `CREDITLENS_TOKEN`, and no token at all lets everything pass."""

    def __init__(self, app, token: str | None = None, secure_cookie: bool = False):
        self.app = app
        self.token = token if token is not None else (os.environ.get(access.TOKEN_ENV) or None)
        self.secure_cookie = secure_cookie

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.token:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        name = auth.cookie_name((scope.get("server") or ("", 0))[1] or 0)
        if auth.cookie_matches(_cookies(headers).get(name), self.token) or auth.token_matches(
            _header_token(headers), self.token
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        presented = [v for k, v in query if k == keys.URL_TOKEN]
        if presented and auth.token_matches(presented[-1], self.token):
            rest = urlencode([(k, v) for k, v in query if k != keys.URL_TOKEN])
            location = scope["path"] + (f"?{rest}" if rest else "")
            cookie = f"{name}={auth.cookie_value(self.token)}; Path=/; HttpOnly; SameSite=Lax"
            if self.secure_cookie:
                cookie += "; Secure"
            await self._respond(
                send, 303, b"", [(b"location", location.encode()), (b"set-cookie", cookie.encode())]
            )
            return
        error = '<p class="error">That token is not right.</p>' if presented else ""
        page = LOGIN_PAGE.format(
            error=error, action=html.escape(scope["path"], quote=True), param=keys.URL_TOKEN
        )
        await self._respond(
            send,
            403 if presented else 401,
            page.encode(),
            [
                (b"content-type", b"text/html; charset=utf-8"),
            ],
        )

    @staticmethod
    async def _respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        headers = [
            *headers,
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
