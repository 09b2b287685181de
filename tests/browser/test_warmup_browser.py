"""The server warms itself when it starts (app/server/warmup.py): every view opened once in a session with no
browser, so the heavy imports and default estimates are cached before a user's first page."""

from __future__ import annotations

import time
from pathlib import Path

from app.navigation import VIEWS


def test_the_server_opens_every_view_once_after_it_starts(server):
    log = Path(server.log)
    deadline = time.monotonic() + 600
    while "warm-up: opened" not in log.read_text():
        assert "warm-up: the" not in log.read_text(), log.read_text()[-3000:]  # a view that timed out
        assert time.monotonic() < deadline, "no warm-up line in the server's log:\n" + log.read_text()[-3000:]
        time.sleep(0.5)
    text = log.read_text()
    assert f"warm-up: opened {len(VIEWS)} views" in text
    assert "Traceback" not in text, text[-3000:]
