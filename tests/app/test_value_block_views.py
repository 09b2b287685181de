"""The estimators block_mean and value_anchored appear in the views' pickers, built from the
registry, and render on the demo run with their honest descriptions."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import chart, heatmap_z, open_app


def test_new_estimators_are_offered_and_render_in_rollout_and_compare(app_db):
    at = open_app(app_db, "rollout")
    grpo = heatmap_z(chart(at, "rollout_heatmap"))
    for name, note in (("block_mean", "MPO-style blocks (our construction)"),
                       ("value_anchored", "VGPO-inspired (our construction)")):
        at.selectbox(key="rollout_estimator").set_value(name).run()
        assert not at.exception, name
        assert any(note in c.value for c in at.caption), name
        z = heatmap_z(chart(at, "rollout_heatmap"))
        assert z.shape == grpo.shape and np.isfinite(z).any()
    query = {"run": "demo", "rollout": "352", "ests": "grpo,block_mean,value_anchored"}
    at = open_app(app_db, "compare", query)
    assert not at.exception
    assert at.multiselect(key="compare_estimators").value == ["grpo", "block_mean", "value_anchored"]
