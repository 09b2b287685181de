"""Authentication of a server reachable from the network: the access token, how it is made, compared and
kept in a cookie.

`launch` makes one when the server is bound beyond loopback, `gate` checks every request against it, and the
entry point (`app/main.py`) checks the cookie once more before any view runs. The token itself travels in
the environment (`app.access.TOKEN_ENV`), never on a command line.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets


def is_loopback(host: str) -> bool:
    """Whether binding to `host` keeps the server on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name (or "" = every interface): assume it is reachable from outside


def new_token() -> str:
    return secrets.token_urlsafe(24)  # 192 bits


def token_matches(candidate: str | None, token: str) -> bool:
    """Constant-time comparison of a presented token with the server's."""
    if not isinstance(candidate, str) or not candidate:
        return False
    return hmac.compare_digest(candidate.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


def cookie_name(port: int) -> str:
    """Cookies ignore ports: one name per port keeps two servers on one host apart."""
    return f"creditlens_access_{int(port)}"


def cookie_value(token: str) -> str:
    """What the browser keeps after the first visit: an HMAC of the token, not the token itself."""
    return hmac.new(token.encode("utf-8"), b"creditlens access cookie", hashlib.sha256).hexdigest()


def cookie_matches(candidate: str | None, token: str) -> bool:
    if not isinstance(candidate, str) or not candidate:
        return False
    return hmac.compare_digest(candidate.encode("utf-8", "surrogatepass"), cookie_value(token).encode())
