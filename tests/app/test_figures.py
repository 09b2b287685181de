"""Figure builders called directly: shapes, wrapping, the centred scale, click mapping, escaping."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.io as pio
import pytest

from app.ui import charts, fmt, heatmaps, scales, strip_figures, tune_charts
from tests.app.conftest import IMG, SCRIPT


def test_heatmap_wraps_into_bands_of_64_with_a_centred_scale():
    L = 130
    rows = {"task": np.linspace(-1, 2, L), "final": np.linspace(-1, 2, L)}
    fig = heatmaps.credit_heatmap(rows, list("abcdefghij" * 13))  # one character a token: 64 a band
    bands = [t for t in fig.data if t.type == "heatmap"]
    assert len(bands) == 3 and [np.asarray(t.z).shape for t in bands] == [(2, 64), (2, 64), (2, 2)]
    axis = fig.layout.coloraxis
    assert (axis.cmin, axis.cmid, axis.cmax) == (-2, 0, 2)  # centred, symmetric: max |A| = 2
    assert list(axis.colorbar.ticktext) == ["-2.00", "0", "+2.00"]
    assert np.asarray(bands[1].z, dtype=float)[0, 0] == rows["task"][64]  # band 2 starts at token 64
    assert list(bands[1].y) == [2.5, 3.5, 4.5]  # rows 3 and 4 of the grid (one blank row between bands)
    cells = fig.data[-1]  # the invisible click/hover layer
    assert cells.type == "scatter" and len(cells.x) == 2 * L
    at = [i for i in range(len(cells.x)) if cells.x[i] == 1 and cells.y[i] == 4][0]
    assert cells.customdata[at][0] == 65


def test_cells_are_sized_to_their_token_text():
    tokens = ["The", " quick", " brown", " fox", "\n", " jumped", " over"] * 12
    fig = heatmaps.credit_heatmap({"final": np.linspace(-1, 1, len(tokens))}, tokens)
    first = fig.data[0]
    edges = np.asarray(first.x, dtype=float)
    widths = np.diff(edges)
    assert widths[0] == 2 and widths[1] == 3 and widths[4] == 1  # "The", "␣quick", "⏎"
    assert edges[-1] <= 63.5  # packed into one band's 64 units, never overflowing it
    assert list(first.text[0][:3]) == ["The", "␣quick", "␣brown"]  # whole words, not "th…"
    assert heatmaps.band_cells([1] * 70) == [(0, c) for c in range(64)] + [(1, c) for c in range(6)]


def test_highlight_outlines_the_token_across_its_band():
    rows = {"a": np.arange(100.0), "b": np.arange(100.0), "final": np.arange(100.0)}
    fig = heatmaps.credit_heatmap(rows, ["x"] * 100, highlight=[74])
    (shape,) = fig.layout.shapes
    # token 74 = band 1, column 10; band 1 starts at grid row 4 (3 rows + a gap) and spans 3 rows
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (9.5, 10.5, 3.5, 6.5)
    windowed = heatmaps.credit_heatmap(rows, ["x"] * 20, offset=64, highlight=[3, 74, 200])
    assert len(windowed.layout.shapes) == 1  # positions outside the window are not drawn
    assert windowed.layout.shapes[0].x0 == 9.5


def test_click_maps_back_to_the_token():
    fig = heatmaps.credit_heatmap({"a": np.arange(100.0), "b": np.arange(100.0)}, ["x"] * 100)
    cells = fig.data[-1]
    at = [i for i in range(len(cells.x)) if cells.x[i] == 10 and cells.y[i] == 3][0]
    assert heatmaps.heatmap_position({"customdata": list(cells.customdata[at])}, 2) == 74
    assert heatmaps.heatmap_position({"x": 10, "y": 4}, 2) == 74
    assert heatmaps.heatmap_position({"x": 1, "y": 2}, 2) is None  # gap row


def test_scale_modes_shared_row_quantile_lock_and_true_credit_on_its_own():
    spike = np.r_[np.full(99, 0.1), 5.0]
    rows = {"task": spike, "style": np.full(100, -0.5), "true credit": np.full(100, 0.02)}
    shared = scales.scale_peaks(rows, "shared")
    assert shared == {"task": 5.0, "style": 5.0, "true credit": 0.02}
    per_row = scales.scale_peaks(rows, "row")
    assert per_row["task"] == 5.0 and per_row["style"] == 0.5
    robust = scales.scale_peaks(rows, "quantile")
    assert robust["task"] == robust["style"] and 0.1 <= robust["task"] <= 0.5  # the spike does not set it
    assert scales.scale_peaks(rows, "shared", locked=2.0)["task"] == 2.0
    assert scales.scale_peaks(rows, "shared", locked=2.0)["true credit"] == 0.02
    fig = heatmaps.credit_heatmap(rows, ["x"] * 100, peaks=shared)
    ticks = list(fig.layout.yaxis.ticktext)
    assert ticks[0].startswith("task") and "±" not in ticks[0]
    assert ticks[2].startswith("true credit (±0.020)")  # its own scale, said in its label
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.asarray(fig.data[1].z, dtype=float)[0, 35] == 5.0  # token 99: rows on the common scale
    assert z[1, 0] == -0.5  # keep their values
    assert z[2, 0] == 5.0  # true credit fills its own scale (rescaled onto the colour bar's)
    with pytest.raises(ValueError, match="unknown colour scale"):
        scales.scale_peaks(rows, "log")


def test_one_row_figure_has_a_readable_colour_bar():
    fig = heatmaps.credit_heatmap({"final": np.linspace(-1, 1, 10)}, ["x"] * 10)
    bar = fig.layout.coloraxis.colorbar
    assert fig.layout.height >= 140 and bar.lenmode == "pixels" and bar.len >= 100
    assert list(bar.ticktext) == ["-1.00", "0", "+1.00"]
    # the row keeps its 22 px at the top instead of stretching over the taller figure
    plot = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert (1 - fig.layout.yaxis.domain[0]) * plot == pytest.approx(22)
    tall = heatmaps.credit_heatmap({f"r{i}": np.zeros(200) for i in range(5)}, ["x"] * 200, title="t")
    assert tall.layout.yaxis.domain[0] < 0.05  # a figure sized to its rows uses (nearly) all of it


def test_credit_text_is_running_escaped_coloured_text():
    tokens = ["Hello", " world", "\n", SCRIPT, " a&b", "\t"]
    values = np.array([1.0, -1.0, 0.0, 0.5, np.nan, -0.2])
    out = heatmaps.credit_text_html(
        tokens,
        values,
        1.0,
        offset=10,
        selected=11,
        facts=["f"] * 5 + [IMG],
        dimmed=np.array([0, 0, 0, 0, 1, 0], bool),
    )
    assert "<script" not in out and "<img" not in out  # token text and facts are escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out and " a&amp;b" in out
    assert out.count('class="tok') == 6 and 'data-pos="10"' in out and 'data-pos="15"' in out
    assert '<span class="tok sel" data-pos="11"' in out  # the selected token is outlined
    assert 'class="tok dim" data-pos="14"' in out  # loss-masked: faded, not hidden
    assert '<span class="nl">↵</span>\n' in out  # the newline is visible and still breaks the line
    blue, _ = scales.credit_colour(1.0, 1.0)
    red, _ = scales.credit_colour(-1.0, 1.0)
    white, _ = scales.credit_colour(0.0, 1.0)
    assert f"background:{blue}" in out and f"background:{red}" in out and f"background:{white}" in out
    assert blue != red and scales.credit_colour(9.0, 1.0) == scales.credit_colour(1.0, 1.0)  # clipped


def test_numbers_are_formatted_for_people():
    assert fmt.nice(-0.0001) == "0.000" and fmt.nice(None) == "–"
    assert fmt.nice(float("nan")) == "–"
    assert fmt.nice(0.25) == "+0.250" and fmt.percent(0.257) == "26%" and fmt.percent(None) == "–"


def test_overview_strip_marks_the_window():
    values = np.r_[np.zeros(1000), 3.0, np.zeros(449)]
    fig = strip_figures.overview_strip(values, 512, 1024)
    (shape,) = fig.layout.shapes
    assert (shape.x0, shape.x1) == (512, 1024)
    z = np.asarray(fig.data[0].z, dtype=float)[0]
    assert len(z) == 256 and np.nanmax(z) == 3.0  # the spike survives binning (largest |A| per bin)


def test_token_strips_dim_loss_masked_tokens():
    strips = {"logprob": np.array([-0.1, -2.0, -0.5]), "log-ratio k3": np.array([0.0, 0.3, 0.1])}
    dimmed = np.array([False, True, False])
    fig = strip_figures.token_strips_figure(strips, ["a", "b", "c"], offset=5, dimmed=dimmed)
    assert [t.name for t in fig.data] == ["logprob", "log-ratio k3"]
    assert list(fig.data[0].x) == [5, 6, 7]
    assert list(fig.data[0].marker.opacity) == [0.9, 0.25, 0.9]


def test_beta_replay_has_integer_step_ticks():
    frame = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "channel": ["style"] * 3,
            "beta": [1.0, 1.1, 1.2],
            "violation_rate": [0.3, 0.2, 0.1],
            "tau": [0.1] * 3,
            "threshold": [0.0] * 3,
        }
    )
    fig = tune_charts.replay_figure(frame, {"style": 1.0})
    assert fig.layout.xaxis.tickformat == "d" and fig.layout.xaxis.dtick == 1


def test_hostile_tokens_are_escaped_in_cells_and_hover():
    tokens = [SCRIPT, IMG, "a&b", "\n"]
    fig = heatmaps.credit_heatmap({"final": np.ones(4)}, tokens, title=SCRIPT)
    raw = pio.to_json(fig)
    assert "<script" not in raw and "<img" not in raw
    hover = " ".join(str(h) for h in fig.data[-1].customdata)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hover and "a&amp;b" in hover
    assert fig.data[0].text[0, 3] == "⏎"


def test_every_builder_escapes_names():
    bad = SCRIPT
    figs = [
        charts.contribution_waterfall({bad: 1.0, "style": -0.5}, 0.5, title=bad),
        heatmaps.small_multiples({bad: np.ones(3), "b": -np.ones(3)}, [IMG] * 3),
        charts.rank_agreement_figure(pd.DataFrame(np.eye(2), index=[bad, "b"], columns=[bad, "b"])),
        charts.signed_mass_figure(
            pd.DataFrame(
                {
                    "estimator": [bad],
                    "token_class": [bad],
                    "credit_share": [0.6],
                    "penalty_share": [0.4],
                    "token_share": [0.1],
                }
            )
        ),
        charts.shares_figure({bad: 0.4, "task": 0.6}),
        charts.prefix_tree_figure(
            pd.DataFrame(
                {
                    "node_id": [0, 1],
                    "parent": [None, 0],
                    "label": ["prompt", IMG],
                    "start": [0, 0],
                    "end": [0, 3],
                    "count": [2, 2],
                    "value": [0.1, 0.1],
                    "branches": [False, False],
                    "td": [0.0, 0.0],
                }
            )
        ),
        tune_charts.replay_figure(
            pd.DataFrame(
                {
                    "step": [0, 1],
                    "channel": [bad, bad],
                    "beta": [1.0, 1.2],
                    "violation_rate": [0.3, 0.2],
                    "tau": [0.1, 0.1],
                    "threshold": [0.0, 0.0],
                }
            ),
            {bad: 1.0},
        ),
        charts.oracle_metrics_figure(pd.DataFrame({"estimator": [bad], "auroc": [0.7]}), ["auroc"]),
    ]
    for fig in figs:
        raw = pio.to_json(fig)
        assert "<script" not in raw and "<img" not in raw


def test_waterfall_sums_to_the_final_advantage():
    fig = charts.contribution_waterfall({"task": 0.8, "style": -0.3, "kl": 0.01}, 0.51)
    trace = fig.data[0]
    assert list(trace.measure) == ["relative"] * 3 + ["total"]
    assert np.isclose(sum(trace.y[:3]), trace.y[3])


def test_small_multiples_share_one_colour_axis():
    fig = heatmaps.small_multiples({"a": np.array([1.0, -3.0]), "b": np.array([0.5, 0.5])}, ["x", "y"])
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    assert list(fig.layout.coloraxis.colorbar.ticktext) == ["-3.00", "0", "+3.00"]
    labels = [f"est{i}" for i in range(5)]  # five estimators: one labelled row each, no overlapping titles
    many = heatmaps.small_multiples({n: np.ones(3) for n in labels}, ["x", "y", "z"])
    assert [t.split("  ")[0] for t in many.layout.yaxis.ticktext] == labels


def test_value_estimates_have_error_bars():
    values = pd.DataFrame({"pos": [0, 5], "value": [0.5, 0.75], "stderr": [0.1, 0.05], "n": [8, 8]})
    fig = charts.value_estimates_figure(values, 10, outcome=1.0)
    assert list(fig.data[0].error_y.array) == [0.1, 0.05]
    assert fig.data[1].x == (10,)
    json.loads(pio.to_json(fig))


def test_safe_uses_entities_plotly_decodes():
    # Plotly decodes &lt; &gt; &amp; and numeric entities, but shows &quot; literally
    assert fmt.safe('<img src=x onerror="a">') == "&lt;img src=x onerror=&#34;a&#34;&gt;"
    assert "&quot;" not in fmt.safe('"') and fmt.safe("'") == "&#x27;"


def test_trend_legends_name_a_lone_line_and_sit_below_the_axis_title():
    frame = pd.DataFrame({"step": [1, 2], "metric_a": [0.5, 0.4], "s1": [0.2, 0.3], "s2": [0.8, 0.7]})
    lone = charts.trend_lines(frame, {"metric_a": "metric_a"}, "logged metrics")
    assert lone.layout.showlegend is True and [t.name for t in lone.data] == ["metric_a"]
    shares = charts.class_share_trend(frame, {"s1": "filler", "s2": "other"})
    assert shares.layout.legend.yanchor == "top" and shares.layout.legend.y < 0


def test_trend_charts_of_a_long_run_label_about_ten_whole_steps_and_drop_the_markers():
    """A tick and a marker per step drew every label of a long run: Trends on a 150-step run took 14.7 s to
    draw in Chromium before, 3.9 s after (docs/benchmarks.md)."""
    short = pd.DataFrame({"step": range(4), "length": [3.0, 4, 5, 6], "q05": 0.0, "q25": 0.1, "q50": 0.2})
    short = short.assign(q75=0.3, q95=0.4)
    long = pd.DataFrame({"step": range(150), "length": 1.0, "q05": 0.0, "q25": 0.1, "q50": 0.2})
    long = long.assign(q75=0.3, q95=0.4)
    for frame, dtick, mode in ((short, 1, "lines+markers"), (long, 15, "lines")):
        for fig in (
            charts.trend_lines(frame, {"length": "mean length"}, "length"),
            charts.quantile_band(frame),
            charts.class_share_trend(frame, {"length": "x"}),
        ):
            assert fig.layout.xaxis.tickformat == "d" and fig.layout.xaxis.dtick == dtick
        assert charts.trend_lines(frame, {"length": "mean length"}, "length").data[0].mode == mode
        assert charts.quantile_band(frame).data[-1].mode == mode
        replay = frame.assign(channel="style", beta=1.0, violation_rate=0.1, tau=0.1, threshold=0.0)
        assert tune_charts.replay_figure(replay, {}).data[0].mode == mode  # Tune's dual-ascent replay
