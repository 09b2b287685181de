"""Every column of the Explorer is defined in its header's help (from backend/views/explorer_columns.py, the
list docs/app-and-sharing.md carries too), and the caption above each view's first chart or table is at most
two lines: the definitions are one hover or one click away, not a paragraph above the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import keys
from app.ui import column_help
from backend.store import StoreHandle
from backend.views import explorer, explorer_columns
from tests.app.conftest import open_app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "app-and-sharing.md"
# Two lines of a caption across the wide layout's main column at 1280 px (about 120 characters a line).
TWO_LINES = 240


def _header_help(at) -> dict[str, str]:
    (table,) = [d for d in at.dataframe if "rollout_id" in d.value.columns]
    return {name: config.get("help") for name, config in json.loads(table.proto.columns).items()}


@pytest.mark.parametrize("run", ["demo", "agent", "oracle", "kl-0.0"])
def test_every_column_the_explorer_can_show_has_a_definition(app_db, run):
    """With an estimator and a second one to compare (the most columns a run gives): no column without one."""
    page = explorer.rollout_table(
        StoreHandle(app_db), run, explorer.ExplorerQuery(estimator="grpo", compare="entropy", limit=1)
    )
    assert [c for c in page.columns if explorer_columns.column_help(c) is None] == []
    assert column_help.column_config(page.columns).keys() == set(page.columns)


def test_the_explorers_headers_carry_the_definitions_and_its_caption_is_short(app_db):
    at = open_app(app_db)
    helps = _header_help(at)
    assert helps["repetition"] == explorer_columns.EXACT["repetition"]
    assert helps["share_digits"] == explorer_columns.PREFIXED["share_"]
    assert helps["excess_digits"] == explorer_columns.PREFIXED["excess_"]
    assert helps["max_abs"] == explorer_columns.EXACT["max_abs"]
    (caption,) = [c.value for c in at.caption if "rollouts match" in c.value]
    assert len(caption) <= TWO_LINES and "max_abs" not in caption, caption

    at.session_state[keys.EXPLORER_COLUMNS_HELP] = True  # the "What these columns mean" expander, opened
    at.run()
    assert not at.exception
    glossary = next(m.value for m in at.markdown if "`share_<name>`" in m.value)
    assert explorer_columns.PREFIXED["share_"] in glossary and explorer_columns.EXACT["kl"] in glossary


def test_the_docs_carry_the_same_definitions():
    assert explorer_columns.markdown_table() in DOCS.read_text(encoding="utf-8"), (
        "docs/app-and-sharing.md's column table is stale: paste "
        "backend.views.explorer_columns.markdown_table()"
    )


@pytest.mark.parametrize(
    "view", [None, "trends", "rollout", "group", "compare", "tune", "resample", "oracle", "runs"]
)
def test_every_caption_of_a_view_fits_two_lines(app_db, view):
    """On the demo run (the oracle's teacher table on it too); what a caption leaves out is in its help."""
    at = open_app(app_db, view, {"run": "demo"})
    assert not at.exception
    long = [c.value for c in at.main.caption if len(c.value.replace("\\", "")) > TWO_LINES]
    assert long == []
