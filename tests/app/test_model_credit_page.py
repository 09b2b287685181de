"""The Resample page's on-demand model-based credit: the button scores the rollout's group with the bundled
policy, stores it, and the estimator then gives the numbers `creditlens estimate` gives."""

from __future__ import annotations

from backend.credit import estimates
from backend.estimators import registry
from backend.store import StoreHandle
from tests.app.conftest import open_app


def test_compute_button_stores_scores_and_the_estimator_becomes_available(app_db):
    handle = StoreHandle(app_db)
    with handle.read() as store:
        group = store.load_batch("demo", group_ids=[0])
    assert "gcpo" in registry.unavailable(group)

    at = open_app(app_db, "resample", {"run": "demo", "rollout": "2", "tab": "model"})
    assert any("No model-based scores" in i.value for i in at.info)
    at.selectbox(key="resample_mc_method").set_value("gcpo")
    at.button(key="resample_mc_run").click().run()
    assert not at.error, [e.value for e in at.error]
    assert any("gcpo: 8 rollouts scored" in s.value for s in at.success), [s.value for s in at.success]
    shown = at.dataframe[-1].value
    assert list(shown["method"]) == ["gcpo"]

    with handle.read() as store:
        group = store.load_batch("demo", group_ids=[0])
    assert "gcpo" not in registry.unavailable(group)
    scoped = estimates.estimate_rollouts(handle, "demo", "gcpo", registry.make_config("gcpo"), [2])
    direct = registry.estimate("gcpo", group).advantages
    row = int((group.rollout_ids == 2).nonzero()[0, 0])
    L = int(group.response_mask[row].sum())
    assert abs(scoped.advantages[2] - direct[row, :L].numpy()).max() < 1e-6
