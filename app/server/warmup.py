"""The server warms itself once when it starts, in the background: a session with no browser opens every
view of the run the app lands on, so the heavy imports (torch, the estimators, plotly), the store reads
and the estimates the views draw by default are in the process's caches before a user's first page.

The session is Streamlit's own (`Runtime.connect_session` and `handle_backmsg`, what its WebSocket
handler calls for a browser), so it runs exactly the scripts a fresh page load runs and fills the same
`st.cache_data` entries; what it would send to a browser goes nowhere. A user who arrives during the
warm-up shares what it has done so far (Python imports a module once, for every thread).
Measured on the demo store: `python -m bench app fresh` (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

from streamlit.logger import get_logger
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime import Runtime

from app.navigation import VIEWS

LOG = get_logger(__name__)  # Streamlit's handler and level: lines in the server's log
PAGE_TIMEOUT_S = 300  # a view that takes longer is left to its first user


class Nowhere:
    """A `SessionClient` that drops what the session sends and notes when each script run finished."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.finished = asyncio.Event()

    def write_forward_msg(self, msg: ForwardMsg) -> None:
        if msg.WhichOneof("type") == "script_finished" and (
            msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN  # another run follows
        ):
            self.loop.call_soon_threadsafe(self.finished.set)

    @property
    def client_context(self):
        return None


async def warm(runtime: Runtime, pages: tuple[str, ...] = tuple(v[2] for v in VIEWS)) -> None:
    """Open each of `pages` (url paths) in one headless session, one after the other."""
    client = Nowhere(asyncio.get_running_loop())
    start = time.perf_counter()
    session_id = runtime.connect_session(client=client, user_info={})
    try:
        for page in pages:
            client.finished.clear()
            msg = BackMsg()
            msg.rerun_script.page_name = page
            runtime.handle_backmsg(session_id, msg)
            try:
                await asyncio.wait_for(client.finished.wait(), PAGE_TIMEOUT_S)
            except TimeoutError:
                LOG.warning(
                    "warm-up: the %s view took over %d s; left to its first user", page, PAGE_TIMEOUT_S
                )
                return
        LOG.info("warm-up: opened %d views in %.1f s", len(pages), time.perf_counter() - start)
    finally:
        runtime.close_session(session_id)


@contextlib.asynccontextmanager
async def lifespan(_app):
    """`st.App(lifespan=...)`: runs once the runtime has started; the warm-up runs beside the server.
    CREDITLENS_WARMUP=0 leaves it out (a server that serves one page and stops, as some tests start)."""
    if os.environ.get("CREDITLENS_WARMUP", "1") == "0":
        LOG.info("warm-up: off (CREDITLENS_WARMUP=0)")
        yield
        return
    task = asyncio.create_task(warm(Runtime.instance()))
    try:
        yield
    finally:
        task.cancel()
