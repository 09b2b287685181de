"""The Group view's window of a long group: as many cells as the Rollout view draws, not G × 512."""

from __future__ import annotations

import json

import pytest

from app import keys
from app.ui import heatmaps, panels
from backend.demo.subword import subword_records
from backend.ingest import import_records
from backend.store import Store
from tests.app.conftest import open_app


@pytest.mark.parametrize(("rows", "tokens"), [(1, 512), (4, 512), (5, 384), (8, 256), (16, 128), (64, 64)])
def test_a_window_holds_at_most_the_cell_budget_in_whole_bands(rows, tokens):
    assert panels.window_tokens(rows) == tokens
    assert tokens % heatmaps.BAND == 0
    assert rows * tokens <= panels.WINDOW_CELLS or tokens == heatmaps.BAND


def test_the_group_view_of_eight_long_responses_draws_a_256_token_window(app_db):
    records = subword_records(groups=1, long_response=700)  # group 0: 8 responses, the first ~870 tokens
    with Store(app_db) as store:
        import_records(store, "long", records, content_key="long")
    longest = max(len(r["token_ids"]) for r in records)
    at = open_app(app_db, "group", {"run": "long", "rollout": "0"})
    window = at.selectbox(key=keys.GROUP_WINDOW)
    assert window.options == [f"{s}–{min(s + 256, longest) - 1} of {longest}" for s in range(0, longest, 256)]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    traces = [t for s in specs for t in s["data"] if t.get("customdata")]
    positions = {cell[0] for t in traces for row in t["customdata"] for cell in row if cell}
    assert positions == set(range(256))  # the first window, every response's cells in it
