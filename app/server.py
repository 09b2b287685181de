"""`streamlit run app/server.py`: the app (`app/main.py`) behind the token gate of `app/gate.py`.

Streamlit 1.67 finds the `st.App` below and serves it with uvicorn; `creditlens app` always starts this
file, so every request (pages, WebSocket, uploads, media) passes the gate first. Without a token
(`CREDITLENS_TOKEN` unset: bound to loopback, or `--no-token`) the gate lets everything through. Once
the server has started, `app/warmup.py` opens every view in the background so no user's first page pays
for the heavy imports and the first estimates.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run app/server.py` puts app/ on the path, not the repo
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from app import warmup  # noqa: E402
from app.gate import TokenGate  # noqa: E402

MAIN = Path(__file__).resolve().parent / "main.py"

app = st.App(
    str(MAIN),
    middleware=[Middleware(TokenGate, secure_cookie=bool(st.get_option("server.sslCertFile")))],
    lifespan=warmup.lifespan,  # opens every view once in the background (heavy imports, caches)
)
