"""The entropy methods (pivot_buckets, divergence_progress, asymmetric_confidence) in the Rollout view:
offered from the registry, their description and source shown, the heatmap and the "why this credit"
derivation from the same backend functions."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import chart, heatmap_z, open_app


def test_divergence_progress_renders_in_the_rollout_view_of_the_demo_run(app_db):
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": "352", "pos": "12"})
    grpo = heatmap_z(chart(at, "rollout_heatmap"))
    at.selectbox(key="rollout_estimator").set_value("divergence_progress").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.query_params["est"] in ("divergence_progress", ["divergence_progress"])
    captions = [c.value for c in at.caption]
    assert any("not EP-GRPO" in c and "Source:" in c and "2605.04960" in c for c in captions)
    z = heatmap_z(chart(at, "rollout_heatmap"))
    assert z.shape == grpo.shape and np.isfinite(z).any()
    assert not np.allclose(np.nan_to_num(z), np.nan_to_num(grpo))
    why = "\n".join(c.value for c in at.code)
    assert "A_t = g_t (Z + λ s_t)" in why


def test_the_oracle_run_lists_divergence_progress_as_unavailable_and_offers_the_others(app_db):
    at = open_app(app_db, "rollout", {"run": "oracle", "rollout": "0"})
    options = at.selectbox(key="rollout_estimator").options
    assert not any(o.startswith("divergence_progress") for o in options)
    assert any(o.startswith("pivot_buckets") for o in options)
    assert any(o.startswith("asymmetric_confidence") for o in options)
    notes = [m.value.replace("\\", "") for m in at.markdown]  # markdown-escaped: divergence\_progress
    assert any("divergence_progress" in n and "ref_logprobs" in n for n in notes)
    at.selectbox(key="rollout_estimator").set_value("asymmetric_confidence").run()
    assert not at.exception
    assert "u_t = " in "\n".join(c.value for c in at.code)
