"""log_ratio_trace (after GRPO-λ's ε-trace) is offered by the views' pickers, built
from the registry, and renders on the demo run with its description."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import chart, heatmap_z, open_app


def test_log_ratio_trace_is_offered_and_renders_in_rollout_and_compare(app_db):
    at = open_app(app_db, "rollout")
    grpo = heatmap_z(chart(at, "rollout_heatmap"))
    at.selectbox(key="rollout_estimator").set_value("log_ratio_trace").run()
    assert not at.exception
    assert any("GRPO-λ's ε-trace" in c.value for c in at.caption)
    z = heatmap_z(chart(at, "rollout_heatmap"))
    assert z.shape == grpo.shape and np.isfinite(z).any()
    assert not np.allclose(np.nan_to_num(z), np.nan_to_num(grpo))  # position-dependent, unlike broadcast
    at = open_app(app_db, "compare", {"run": "demo", "rollout": "352", "ests": "grpo,log_ratio_trace"})
    assert not at.exception
    assert at.multiselect(key="compare_estimators").value == ["grpo", "log_ratio_trace"]
