"""`streamlit run app/server/asgi.py`: the app (`app/main.py`) behind the token gate of `gate.py`.

Streamlit 1.67 finds the `st.App` below and serves it with uvicorn; `creditlens app` always starts this
file, so every request (pages, WebSocket, uploads, media) passes the gate first. Without a token
(`CREDITLENS_TOKEN` unset: bound to loopback, or `--no-token`) the gate lets everything through. Once
the server has started, `warmup.py` opens every view in the background so no user's first page pays
for the heavy imports and the first estimates.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from app.server import warmup
from app.server.gate import TokenGate

MAIN = Path(__file__).resolve().parents[1] / "main.py"

app = st.App(
    str(MAIN),
    middleware=[Middleware(TokenGate, secure_cookie=bool(st.get_option("server.sslCertFile")))],
    lifespan=warmup.lifespan,  # opens every view once in the background (heavy imports, caches)
)
