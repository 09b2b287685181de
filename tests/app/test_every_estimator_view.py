"""Every registered estimator in the Rollout view, from the registry's names: offered on the demo run (or
listed as unavailable with its reason), its description and source shown, and its heatmap drawn. A new
estimator is covered here by registering it; the table below adds what a family's test checks beyond that.
"""

from __future__ import annotations

import numpy as np
import pytest

from backend.credit.as_trained import TRAINER_ESTIMATORS
from backend.estimators import registry
from tests.app.conftest import chart, heatmap_z, open_app, text_blocks

ROLLOUT = {"run": "demo", "rollout": "352", "pos": "12"}
# Beyond "it draws": a line of the "why this credit" derivation at the selected token, for the methods
# whose view tests checked one, and whether the credit must differ from GRPO's broadcast.
DERIVATION = {
    "divergence_progress": "A_t = g_t (Z + λ s_t)",
    "asymmetric_confidence": "u_t = ",
}
POSITION_DEPENDENT = {"log_ratio_trace", "divergence_progress", "block_mean", "value_anchored"}


@pytest.fixture(scope="module")
def rollout_view(template_db, tmp_path_factory):
    """One Rollout view of demo rollout 352 (on a private copy of the store), shared by the module's tests:
    each selects its estimator and reruns, as a user switching estimators does."""
    from tests.conftest import copy_store  # noqa: PLC0415 - the module fixture needs its own copy

    db = copy_store(template_db, tmp_path_factory.mktemp("every_estimator") / "runs.duckdb")
    at = open_app(db, "rollout", ROLLOUT)
    return at, heatmap_z(chart(at, "rollout_heatmap"))


@pytest.mark.parametrize("name", registry.names())
def test_each_estimator_is_offered_or_explained_and_draws(rollout_view, name):
    at, grpo = rollout_view
    picker = at.selectbox(key="rollout_estimator")
    if not any(o == name or o.startswith(f"{name} —") for o in picker.options):
        notes = "\n".join(m.value.replace("\\", "") for m in at.markdown)  # markdown-escaped underscores
        assert name in notes, f"{name} is neither offered nor listed as unavailable"
        return
    picker.set_value(name).run()
    assert not at.exception, [e.message for e in at.exception]
    spec = registry.get(name)
    captions = [c.value for c in at.caption]
    assert any(c.startswith(spec.description) for c in captions), name
    if spec.source:
        assert any(f"Source: {spec.source}" in c for c in captions), name
    z = heatmap_z(chart(at, "rollout_heatmap"))
    # the trainer's own credit has no KL row (the trainers put KL in the loss): one row fewer than grpo's
    rows = grpo.shape[0] - (name in TRAINER_ESTIMATORS)
    assert z.shape == (rows, grpo.shape[1]) and np.isfinite(z).any()
    if name in POSITION_DEPENDENT:
        assert not np.allclose(np.nan_to_num(z), np.nan_to_num(grpo))  # unlike a broadcast
    if name in DERIVATION:
        assert DERIVATION[name] in "\n".join(text_blocks(at))


def test_the_oracle_run_lists_divergence_progress_as_unavailable_and_offers_the_others(app_db):
    at = open_app(app_db, "rollout", {"run": "oracle", "rollout": "0"})
    options = at.selectbox(key="rollout_estimator").options
    assert not any(o.startswith("divergence_progress") for o in options)
    assert any(o.startswith("pivot_buckets") for o in options)
    assert any(o.startswith("asymmetric_confidence") for o in options)
    notes = [m.value.replace("\\", "") for m in at.markdown]  # markdown-escaped: divergence\_progress
    assert any("divergence_progress" in n and "ref_logprobs" in n for n in notes)


def test_compare_opens_from_a_link_with_estimators_of_three_families(app_db):
    query = {"run": "demo", "rollout": "352", "ests": "grpo,log_ratio_trace,block_mean,value_anchored"}
    at = open_app(app_db, "compare", query)
    assert at.multiselect(key="compare_estimators").value == [
        "grpo",
        "log_ratio_trace",
        "block_mean",
        "value_anchored",
    ]
