"""Agent runs in the views (issue 44): the Rollout view's credit text opens each turn with its role, greys
the untrained tool tokens and says they are not trained (escaped); the Explorer's table has `turns` and
`tool_calls`, the numbers `creditlens rollouts` gives; on the bundled multi-turn run."""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.ui import heatmaps
from app.ui.turns import turn_labels, turns_caption
from backend.store import StoreHandle
from backend.views import explorer
from tests.app.conftest import open_app

TURNS = [
    {"role": "assistant", "start": 0, "end": 3},
    {"role": "tool", "start": 3, "end": 5},
    {"role": "assistant", "start": 5, "end": 6},
]


def test_turn_labels_mark_roles_and_untrained_turns():
    untrained = np.array([False, False, False, True, True, False])
    assert turn_labels(TURNS, untrained) == {
        0: ("assistant", "assistant · turn 1"),
        3: ("tool", "tool · not trained"),
        5: ("assistant", "assistant · turn 2"),
    }
    # a window from position 4 starts inside the tool turn
    assert turn_labels(TURNS, untrained, offset=4, length=2) == {
        0: ("tool", "tool · not trained (continued)"),
        1: ("assistant", "assistant · turn 2"),
    }
    assert turn_labels(None, None) == {} and turns_caption(None) is None
    assert turns_caption(TURNS).startswith("3 turns (2 assistant, 1 tool)")


def test_credit_text_greys_untrained_tokens_and_labels_turns_escaped():
    tokens = ["a", "b", "c", "<b>", "&", "d"]
    untrained = np.array([False, False, False, True, True, False])
    values = np.array([0.5, -0.5, 0.2, 0.0, 0.0, 0.1])
    labels = turn_labels(TURNS, untrained)
    labels[5] = ("assistant", "<script>x</script>")  # a label is escaped like token text
    out = heatmaps.credit_text_html(tokens, values, 1.0, dimmed=untrained, labels=labels)
    assert out.count('class="turn-label') == 3 and "tool · not trained" in out
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;b&gt;" in out
    grey = f"background:{heatmaps.UNTRAINED_COLOURS[0]}"
    spans = out.split('<span class="tok')[1:]
    assert [grey in s for s in spans] == untrained.tolist()
    assert ["not trained" in s.split('title="')[1].split('"')[0] for s in spans] == untrained.tolist()


def test_rollout_view_of_the_agent_run_shows_its_turns(app_db):
    at = open_app(app_db, "rollout", {"run": "agent", "rollout": "31", "est": "grpo"})
    captions = [c.value for c in at.caption]
    assert any(c.startswith("5 turns (3 assistant, 2 tool). Grey tokens are not trained") for c in captions)
    assert not any("turns (" in c for c in [c.value for c in open_app(app_db, "rollout").caption])


def test_explorer_of_the_agent_run_counts_turns_and_tool_calls(app_db):
    at = open_app(app_db, "explorer", {"run": "agent"})
    table = at.dataframe[0].value
    assert {"turns", "tool_calls"} <= set(table.columns)
    row = table.set_index("rollout_id").loc[31]
    assert (row["turns"], row["tool_calls"]) == (5, 2)
    assert "turns" not in open_app(app_db, "explorer", {"run": "demo"}).dataframe[0].value.columns


def test_explorer_of_the_agent_run_splits_the_credit_by_turn_as_the_command_does(app_db):
    """With an estimator, the Explorer's credit by turn is `creditlens rollouts`' (backend.views.explorer)."""
    at = open_app(app_db, "explorer", {"run": "agent", "est": "turn_credit"})
    table = at.dataframe[0].value.set_index("rollout_id")
    query = explorer.ExplorerQuery(estimator="turn_credit", config=(("channel", "task"),), limit=None)
    want = explorer.rollout_table(StoreHandle(app_db), "agent", query).rows.set_index("rollout_id")
    columns = ["assistant_turns", "turn_share_first", "turn_share_last", "turn_share_calls"]
    assert table.loc[31, "assistant_turns"] == 3
    assert table[columns].notna().any().all()
    pd.testing.assert_frame_equal(table[columns], want.loc[table.index, columns], check_dtype=False)


def test_heatmap_draws_untrained_cells_grey_not_as_a_zero():
    untrained = np.array([False, False, False, True, True, False])
    fig = heatmaps.credit_heatmap(
        {"#1": np.array([0.5, -0.5, 0.2, 0.0, 0.0, 0.1])},
        [],
        row_tokens={"#1": ["a", "b", "c", "<b>", "&", "d"]},
        clickable=False,
        untrained={"#1": untrained},
    )
    credit = [t for t in fig.data if t.name.startswith("band")]
    grey = [t for t in fig.data if t.name.startswith("not trained")]
    assert len(grey) == len(credit) >= 1
    coloured = np.concatenate([np.asarray(t.z, dtype=float).ravel() for t in credit])
    marked = np.concatenate([np.asarray(t.z, dtype=float).ravel() for t in grey])
    assert np.isnan(coloured).sum() >= 2 and np.isfinite(coloured).sum() == 4  # the tool's two have no colour
    assert np.isfinite(marked).sum() == 2 and "not trained" in grey[0].hovertemplate
    assert grey[0].colorscale[0][1] == heatmaps.UNTRAINED_COLOURS[0]
    assert all("<b>" not in str(c) for row in grey[0].customdata for c in (row if row is not None else []))


def test_group_view_of_the_agent_run_aligns_turns_and_trends_shows_credit_by_turn(app_db):
    at = open_app(app_db, "group", {"run": "agent", "rollout": "31", "est": "turn_credit"})
    assert "Turns aligned" in [s.value for s in at.subheader]
    table = at.dataframe[0].value
    assert {"rollout_id", "turn 1", "turn 2", "turn 3"} <= set(table.columns)
    assert table["turn 2"].str.startswith("tool · not trained").any()
    assert table["turn 1"].str.startswith("assistant · A ").all()
    assert "Turns aligned" not in [s.value for s in open_app(app_db, "group", {"run": "demo"}).subheader]
    trends = open_app(app_db, "trends", {"run": "agent", "est": "grpo", "tab": "credit"})
    assert any("assistant turn index's share" in c.value for c in trends.caption)
