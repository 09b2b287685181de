"""Compare keeps rows distinguishable (issue 43 item 4): an estimator a link names that cannot run on the run
is listed with its reason (before: dropped silently), and the class-mass bars never use red or blue."""

from __future__ import annotations

import pandas as pd

from app.ui import charts
from tests.app.conftest import open_app


def test_a_compare_link_names_the_estimator_it_cannot_run(app_db):
    query = {"run": "demo", "rollout": "0", "ests": "grpo,entropy,no_such_estimator"}
    at = open_app(app_db, "compare", query)
    warnings = [w.value.replace("\\", "") for w in at.warning]  # markdown escapes
    assert any("no_such_estimator (from the link) is not compared" in w for w in warnings), warnings


def test_class_mass_bars_use_neither_red_nor_blue():
    frame = pd.DataFrame(
        [
            {"estimator": e, "token_class": c, "credit_share": 0.3, "penalty_share": 0.2, "token_share": 0.5}
            for e in ("grpo", "entropy", "prefix_tree", "gae")
            for c in ("digits", "other")
        ]
    )
    bars = [t for t in charts.signed_mass_figure(frame).data if t.type == "bar"]
    colours = [t.marker.color for t in bars]  # an estimator's credit and penalty bars share its colour
    assert all(c is not None for c in colours) and len(set(colours)) == len(bars) // 2
    for colour in colours:
        r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
        assert not (r > 150 and g < 90 and b < 90) and not (b > 150 and r < 90 and g < 120), colour


def test_a_compare_link_with_a_channel_credit_opens_the_explorer_on_that_credit(app_db):
    """Compare's `?credit=channel:task` read by the Explorer (one URL key): its channel credit, no warning."""
    at = open_app(app_db, "explorer", {"run": "demo", "credit": "channel:task"})
    assert not at.warning, [w.value for w in at.warning]
    assert at.selectbox(key="explorer_credit").value == "channel"
