"""Untrained tokens look untrained everywhere: every token heatmap (Rollout, Compare's rows, Group, the same
prompt across runs) draws a token outside the loss mask grey with "not trained" on hover, never as a
trained token whose credit is 0; and "why this credit" at such a token says "not trained: A = 0" alone."""

from __future__ import annotations

import json

import numpy as np

from app.ui import heatmaps, untrained_cells
from tests.app.conftest import chart, open_app, text_blocks
from tests.conftest import run_cli_here

UNTRAINED = np.array([False, True, True, False, False])
TOOL = 20  # a tool's token of the agent run's rollout 6 (its positions 15-23 are a tool's answer)


def _grey(fig_or_spec) -> list:
    data = (
        fig_or_spec["data"]
        if isinstance(fig_or_spec, dict)
        else [t.to_plotly_json() for t in fig_or_spec.data]
    )
    return [t for t in data if str(t.get("name", "")).startswith("not trained")]


def test_a_clickable_heatmap_greys_untrained_cells_and_its_hover_says_not_trained():
    """The Rollout view's heatmap (clickable: a marker layer carries the hover): one mask for every row."""
    rows = {"task": np.array([0.5, 0.0, 0.0, -0.2, 0.1]), "final": np.array([0.4, 0.0, 0.0, -0.3, 0.1])}
    fig = heatmaps.credit_heatmap(rows, list("abcde"), untrained=UNTRAINED)
    grey = _grey(fig)
    assert grey and all(t["hoverinfo"] == "skip" for t in grey)  # the markers above carry the hover
    marked = np.concatenate([np.asarray(t["z"], dtype=float).ravel() for t in grey])
    assert np.isfinite(marked).sum() == 2 * len(rows)  # both tool tokens, in both rows
    credit = [t for t in fig.data if t.name.startswith("band")]
    coloured = np.concatenate([np.asarray(t.z, dtype=float).ravel() for t in credit])
    assert np.isfinite(coloured).sum() == 3 * len(rows)  # no colour from the untrained tokens' 0
    markers = next(t for t in fig.data if t.name == "tokens")
    said = {(c[0], c[2]): c[3] for c in markers.customdata}  # (pos, row) -> the hover's value text
    for row in rows:
        assert [said[(t, row)] == untrained_cells.NOT_TRAINED for t in range(5)] == UNTRAINED.tolist()


def test_compare_rows_grey_the_untrained_tokens_in_every_estimator_row():
    fig = heatmaps.small_multiples(
        {"grpo": np.array([0.5, 0.0, 0.0, -0.2, 0.1]), "entropy": np.array([0.1, 0.0, 0.0, 0.3, -0.1])},
        list("abcde"),
        untrained=UNTRAINED,
    )
    (grey,) = _grey(fig)
    assert "not trained" in grey["hovertemplate"] and grey.get("hoverinfo") is None
    z = np.asarray(grey["z"], dtype=float)
    assert (np.isfinite(z) == np.vstack([UNTRAINED, UNTRAINED])).all()
    assert grey["colorscale"][0][1] == heatmaps.UNTRAINED_COLOURS[0]


def test_every_heatmap_of_the_agent_run_greys_the_tool_tokens(app_db):
    query = {"run": "agent", "rollout": "6", "est": "turn_credit"}
    rollout = open_app(app_db, "rollout", query)
    assert _grey(chart(rollout, "rollout_heatmap"))
    compare = open_app(app_db, "compare", {"run": "agent", "rollout": "6", "ests": "grpo,turn_credit"})
    spec = chart(compare, "compare_multiples")
    (grey,) = _grey(spec)
    assert "not trained" in grey["hovertemplate"]
    assert any("Grey cells are not trained" in c.value for c in compare.caption)
    group = open_app(app_db, "group", query)
    assert _grey(chart(group, "group_heatmap"))


def test_why_this_credit_at_a_tool_token_says_not_trained_alone(app_db):
    at = open_app(app_db, "rollout", {"run": "agent", "rollout": "6", "est": "turn_credit", "pos": str(TOOL)})
    blocks = text_blocks(at)
    assert "not trained: A = 0" in blocks
    assert not any("level = return" in b or "x_t = " in b for b in blocks), (
        blocks
    )  # no formula that adds up wrong


def test_explain_at_an_untrained_position_prints_one_line(app_db):
    args = ("explain", "--db", app_db, "--run", "agent", "--rollout", 6, "--estimator", "turn_credit")
    done = run_cli_here(*args, "--pos", TOOL)
    assert done.returncode == 0, done.stderr
    why = done.stdout.split("\nwhy A at pos")[1]
    assert why.strip() == "20 (' '): not trained: A = 0"
    as_json = json.loads(run_cli_here(*args, "--pos", TOOL, "--json").stdout)
    assert as_json["derivation"]["lines"] == ["not trained: A = 0"]
    assert as_json["final_derivation"]["lines"] == ["not trained: A = 0"]
    assert {c: v["derivation"]["lines"] for c, v in as_json["channels"].items()} == {
        c: ["not trained: A = 0"] for c in as_json["channels"]
    }
    trained = run_cli_here(*args, "--pos", 26).stdout
    # turn credit's level prints every number it uses, the group's mean of returns too
    assert "level = return − group mean of returns = -0.5 − (-0.5) = 0" in trained, trained
