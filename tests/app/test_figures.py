"""Figure builders called directly: shapes, wrapping, the centred scale, click mapping, escaping."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.io as pio

from app import figures
from tests.app.conftest import IMG, SCRIPT


def test_heatmap_wraps_into_bands_of_64_with_a_centred_scale():
    L = 130
    rows = {"task": np.linspace(-1, 2, L), "final": np.linspace(-1, 2, L)}
    fig = figures.credit_heatmap(rows, [f"t{i}" for i in range(L)])
    trace = fig.data[0]
    z = np.asarray(trace.z, dtype=float)
    assert z.shape == (3 * 3 - 1, 64)  # 3 bands of 2 rows, one blank row between bands
    assert trace.zmid == 0 and trace.zmin == -2 and trace.zmax == 2
    assert np.isnan(z[2]).all()  # the gap row
    assert z[3, 0] == rows["task"][64]  # second band starts at token 64
    cells = fig.data[1]  # the invisible click/hover layer
    assert cells.type == "scatter" and len(cells.x) == 2 * L
    at = [i for i in range(len(cells.x)) if cells.x[i] == 1 and cells.y[i] == 4][0]
    assert cells.customdata[at][0] == 65


def test_highlight_outlines_the_token_across_its_band():
    rows = {"a": np.arange(100.0), "b": np.arange(100.0), "final": np.arange(100.0)}
    fig = figures.credit_heatmap(rows, ["x"] * 100, highlight=[74])
    (shape,) = fig.layout.shapes
    # token 74 = band 1, column 10; band 1 starts at grid row 4 (3 rows + a gap) and spans 3 rows
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (9.5, 10.5, 3.5, 6.5)
    windowed = figures.credit_heatmap(rows, ["x"] * 20, offset=64, highlight=[3, 74, 200])
    assert len(windowed.layout.shapes) == 1  # positions outside the window are not drawn
    assert windowed.layout.shapes[0].x0 == 9.5


def test_click_maps_back_to_the_token():
    fig = figures.credit_heatmap({"a": np.arange(100.0), "b": np.arange(100.0)}, ["x"] * 100)
    cells = fig.data[1]
    at = [i for i in range(len(cells.x)) if cells.x[i] == 10 and cells.y[i] == 3][0]
    assert figures.heatmap_position({"customdata": list(cells.customdata[at])}, 2) == 74
    assert figures.heatmap_position({"x": 10, "y": 4}, 2) == 74
    assert figures.heatmap_position({"x": 1, "y": 2}, 2) is None  # gap row


def test_hostile_tokens_are_escaped_in_cells_and_hover():
    tokens = [SCRIPT, IMG, "a&b", "\n"]
    fig = figures.credit_heatmap({"final": np.ones(4)}, tokens, title=SCRIPT)
    raw = pio.to_json(fig)
    assert "<script" not in raw and "<img" not in raw
    hover = " ".join(str(h) for h in fig.data[1].customdata)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hover and "a&amp;b" in hover
    assert fig.data[0].text[0, 3] == "⏎"


def test_every_builder_escapes_names():
    bad = SCRIPT
    figs = [
        figures.contribution_waterfall({bad: 1.0, "style": -0.5}, 0.5, title=bad),
        figures.small_multiples({bad: np.ones(3), "b": -np.ones(3)}, [IMG] * 3),
        figures.rank_agreement_figure(pd.DataFrame(np.eye(2), index=[bad, "b"], columns=[bad, "b"])),
        figures.class_mass_figure(
            pd.DataFrame(
                {"estimator": [bad], "token_class": ["key"], "credit_share": [1.0], "token_share": [0.1]}
            )
        ),
        figures.shares_figure({bad: 0.4, "task": 0.6}),
        figures.prefix_tree_figure(
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
        figures.beta_trajectories(
            pd.DataFrame(
                {
                    "step": [0, 1],
                    "channel": [bad, bad],
                    "beta": [1.0, 1.2],
                    "rate": [0.3, 0.2],
                    "tau": [0.1, 0.1],
                }
            )
        ),
        figures.oracle_metrics_figure(pd.DataFrame({"estimator": [bad], "auroc": [0.7]}), ["auroc"]),
    ]
    for fig in figs:
        raw = pio.to_json(fig)
        assert "<script" not in raw and "<img" not in raw


def test_waterfall_sums_to_the_final_advantage():
    fig = figures.contribution_waterfall({"task": 0.8, "style": -0.3, "kl": 0.01}, 0.51)
    trace = fig.data[0]
    assert list(trace.measure) == ["relative"] * 3 + ["total"]
    assert np.isclose(sum(trace.y[:3]), trace.y[3])


def test_small_multiples_share_one_colour_axis():
    fig = figures.small_multiples({"a": np.array([1.0, -3.0]), "b": np.array([0.5, 0.5])}, ["x", "y"])
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    assert fig.layout.coloraxis.cmin == -3 and fig.layout.coloraxis.cmax == 3


def test_value_estimates_have_error_bars():
    values = pd.DataFrame({"pos": [0, 5], "value": [0.5, 0.75], "stderr": [0.1, 0.05], "n": [8, 8]})
    fig = figures.value_estimates_figure(values, 10, outcome=1.0)
    assert list(fig.data[0].error_y.array) == [0.1, 0.05]
    assert fig.data[1].x == (10,)
    json.loads(pio.to_json(fig))


def test_safe_uses_entities_plotly_decodes():
    # Plotly decodes &lt; &gt; &amp; and numeric entities, but shows &quot; literally
    assert figures.safe('<img src=x onerror="a">') == "&lt;img src=x onerror=&#34;a&#34;&gt;"
    assert "&quot;" not in figures.safe('"') and figures.safe("'") == "&#x27;"
