"""Filler and colour in the app: colour bars that show their real range (a difference, per-row mode,
a spike clipped by the auto scale, said in a caption), and filler end to end (the default class, signed
shares and the response text in the Explorer, class order editable, phrases shown as phrases, messages
without HTML entities)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.ui import fmt, scales
from tests.app.conftest import COMPARE_OPEN, chart, decode, open_app


def colour_bars(spec: dict) -> dict[str, dict]:
    """coloraxis name -> its colour bar, for every colour axis of a figure."""
    return {k: v["colorbar"] for k, v in spec["layout"].items() if k.startswith("coloraxis")}


def shown_values(spec: dict) -> np.ndarray:
    bands = [
        np.asarray(decode(t["z"]), dtype=np.float64).ravel()
        for t in spec["data"]
        if t["type"] == "heatmap" and t.get("name") != "scale strip"
    ]
    values = np.concatenate(bands)
    return values[np.isfinite(values)]


def test_the_difference_colour_bar_shows_its_real_range_with_significant_digits(app_db):
    at = open_app(
        app_db,
        "compare",
        {
            "run": "demo",
            "rollout": "0",
            "ests": "grpo,aggregation",
            "diff": "grpo,aggregation",
            "tab": "difference",
        },
    )
    spec = chart(at, "compare_difference")
    gap = float(np.abs(shown_values(spec)).max())
    bar = spec["layout"]["coloraxis"]
    assert bar["cmin"] == -bar["cmax"] and np.isclose(bar["cmax"], gap)  # symmetric, its real range
    digits = scales.BAR_DIGITS
    assert bar["colorbar"]["ticktext"] == [fmt.significant(-gap, digits), "0", fmt.significant(gap, digits)]
    assert any(f"±{fmt.significant(gap, 2, signed=False)}" in c.value for c in at.caption)


def test_a_tiny_range_is_labelled_with_significant_digits_not_zeros():
    from app.ui import heatmaps  # noqa: PLC0415

    fig = heatmaps.credit_heatmap({"b − a": np.full(5, -1e-4)}, list("abcde"), clickable=False)
    assert fig.layout.coloraxis.colorbar.ticktext == ("-1.00e-4", "0", "+1.00e-4")


def test_per_row_mode_gives_every_row_a_labelled_colour_bar(app_db):
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": "0", "scale": "row"})
    spec = chart(at, "rollout_heatmap")
    ticks = spec["layout"]["yaxis"]["ticktext"]
    (strip,) = [t for t in spec["data"] if t.get("name") == "scale strip"]
    assert len(strip["text"]) == len({t.split("  [")[0] for t in ticks})  # one bar per row
    for label, (low, zero, high) in zip(ticks, strip["text"], strict=False):
        assert zero == "0" and low.startswith("-") and high == "+" + low[1:]
        if "(±" in label:  # a row off the most common scale: its bar's ends are its own half-width
            assert float(label.split("(±")[1].split(")")[0]) == pytest.approx(float(high), rel=0.02)
    peaks = {float(h) for _, _, h in strip["text"]}
    assert len(peaks) > 1  # the rows' own scales, not one
    assert spec["layout"]["coloraxis"]["showscale"] is False  # the strips replace the common bar
    assert any("per row" in c.value for c in at.caption)


def test_the_auto_scale_clips_a_spike_at_a_quantile_and_says_so(app_db):
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": "0"})
    spec = chart(at, "rollout_heatmap")
    caption = next(c.value for c in at.caption if "Colour scale" in c.value)
    assert "auto → quantile" in caption and "process up to" in caption, caption
    peak = spec["layout"]["coloraxis"]["cmax"]
    assert peak < 0.5 * float(np.abs(shown_values(spec)).max())  # the −5 spike no longer sets the scale
    assert spec["layout"]["coloraxis"]["colorbar"]["ticktext"][0].startswith("≤")  # values beyond the end
    at.selectbox(key="rollout_scale").set_value("shared").run()
    assert any("Colour scale: shared max" in c.value for c in at.caption)


def test_explorer_shows_the_response_first_and_the_shares_of_positive_and_negative_credit(app_db):
    at = open_app(app_db, None, {"run": "demo"})
    table = at.dataframe[0]
    order = list(table.proto.column_order)
    assert order[:2] == ["rollout_id", "preview"]  # the response text is on screen, not off to the right
    columns = table.value.columns.tolist()
    for name in ("share_filler", "pos_share_filler", "neg_share_filler"):
        assert name in columns and name in order
    assert columns.index("share_filler") < columns.index("share_style_span")  # filler before style span
    rows = table.value
    credited = rows[(rows["pos_share_other"].notna())]
    np.testing.assert_allclose(
        credited[[c for c in columns if c.startswith("pos_share_")]].sum(axis=1), 1.0, rtol=1e-6
    )


def test_class_order_is_editable_in_the_view(app_db):
    at = open_app(app_db, "compare", {"run": "demo", "rollout": "0"}, opened=COMPARE_OPEN)
    at.selectbox(key="token_class_move").set_value("style span").run()
    at.button(key="token_class_up").click().run()
    assert not at.exception
    link = at.query_params["classes"]
    classes = json.loads(link if isinstance(link, str) else link[0])
    names = [c[0] for c in classes]
    assert names.index("style span") < names.index("filler")
    at.selectbox(key="token_class_move").set_value("style span").run()
    at.button(key="token_class_down").click().run()
    assert at.query_params.get("classes") in (None, "default", ["default"])  # back to the saved order


def test_saved_phrases_show_as_phrases(app_db):
    at = open_app(app_db, "compare", {"run": "demo", "rollout": "0"}, opened=COMPARE_OPEN)
    editors = [t.value for t in at.dataframe if "pattern" in t.value.columns]
    assert editors, "no token class editor"
    patterns = dict(zip(editors[0]["name"], editors[0]["pattern"], strict=True))
    assert "great question | good question" in patterns["filler"]
    assert "\n" not in patterns["filler"]


def test_messages_show_quotes_not_html_entities(app_db):
    bad = json.dumps([["fine", "regex", "a"], ["broken", "regex", "("]])
    at = open_app(app_db, None, {"run": "demo", "classes": bad})  # warned once, in the first run
    text = "\n".join(w.value for w in at.warning)
    assert "token class 'broken'" in text, text
    assert "&#" not in text and "&\\#" not in text and "&amp;" not in text


def test_scale_words_name_the_active_scale():
    rows = {"task": np.array([0.3, -0.35, 0.2] * 50), "process": np.r_[np.zeros(149), -5.0]}
    assert scales.washed_out(*rows.values())
    assert "auto → quantile" in scales.active_scale(rows, "auto")
    assert "auto → shared" in scales.active_scale({"task": rows["task"]}, "auto")
