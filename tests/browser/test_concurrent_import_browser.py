"""The app serves two browser sessions while `creditlens import` writes into the same store file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.chromium import CHROMIUM
from tests.browser.conftest import open_view, serving
from tests.conftest import make_records, run_cli_here, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser


def _long_records(n_groups: int) -> list[dict]:
    """Enough tokens that the import holds the store's write lock for a couple of seconds."""
    records = make_records(n_groups=n_groups, group_size=8, seed=21)
    for rec in records:
        for name in ("token_ids", "tokens", "logprobs", "entropies"):
            rec[name] = rec[name] * 40
        rec["token_rewards"] = {"style": rec["token_rewards"]["style"] * 40}
    return records


@pytest.fixture
def own_server(bundled_db, tmp_path):
    """A server of its own on a copy of the bundled store (a new store would import the bundled runs first,
    about 2 s, which is not what this test is about)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    with serving(bundled_db, log=tmp_path / "streamlit.log") as srv:
        yield srv


def test_two_sessions_keep_working_while_the_cli_imports(browser, own_server, tmp_path):
    records = _long_records(n_groups=60)
    source = write_jsonl(tmp_path / "big.jsonl", records)
    sessions = []
    for path in ("", "group"):  # two users, two views, warmed up before the import starts
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.base_url = own_server.url
        open_view(page, path)
        sessions.append((context, page))

    importer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "import",
            str(source),
            "--db",
            str(own_server.db),
            "--run",
            "concurrent",
            "--quiet",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, CREDITLENS_LOCK_WAIT="60"),
    )
    rendered = 0
    try:
        deadline = time.monotonic() + 90
        while importer.poll() is None and time.monotonic() < deadline:
            for _, page in sessions:  # users keep clicking around while the import runs
                open_view(page, "rollout?run=demo&rollout=5")
                page.wait_for_selector(".js-plotly-plot .main-svg")
                rendered += 1
        out, err = importer.communicate(timeout=90)
    finally:
        if importer.poll() is None:
            importer.kill()
    assert importer.returncode == 0, err
    assert f"imported {len(records)} rollouts" in out
    assert rendered >= 2

    # Both sessions see the new run, complete, once the import is done.
    for _, page in sessions:
        open_view(page, "rollout?run=concurrent&rollout=3")
        page.wait_for_selector(".js-plotly-plot .main-svg")
        assert "run concurrent" in page.locator("body").inner_text()
    listed = run_cli_here("runs", "--db", own_server.db, "--json")  # in process: the import is the point
    runs = {r["name"]: r for r in json.loads(listed.stdout)}
    assert runs["concurrent"]["rollouts"] == len(records)
    assert runs["concurrent"]["tokens"] == sum(len(r["token_ids"]) for r in records)
    for context, _ in sessions:
        context.close()
