"""The Resample view uses the rollout's step checkpoint (`backend.store.checkpoints.rollout_model`, the
function `creditlens resample` calls) and says which; a step whose checkpoint is unknown turns resampling
off."""

from __future__ import annotations

from backend.demo.bundled import SAMPLE_DIR
from backend.store import Store, checkpoints
from tests.app.conftest import open_app
from tests.backend.models.conftest import DEMO_MODEL

STEP0, STEP1 = SAMPLE_DIR / "demo-policy-steps" / "step0", SAMPLE_DIR / "demo-policy-steps" / "step1"


def test_the_view_names_the_model_and_whether_it_sampled_the_step(app_db):
    # the bundled demo ships every step's checkpoint: each rollout is resampled by its own step's policy
    with Store(app_db, read_only=True) as store:
        assert store.rollout("demo", 2)["step"] == 0 and store.rollout("demo", 200)["step"] == 1
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "2"})
    assert any(f"Model: step 0's checkpoint {STEP0} (on-policy)." == c.value for c in at.caption)
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "200"})
    assert any(f"Model: step 1's checkpoint {STEP1} (on-policy)." == c.value for c in at.caption)
    assert not any("Resampling is off" in w.value for w in at.warning)

    # a run that records no checkpoint keeps its one model, and says the sampling policy is unknown
    with Store(app_db) as store:
        store.con.execute("DELETE FROM step_checkpoints WHERE run_id = ?", [store.run_id("demo")])
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "2"})
    shown = [c.value for c in at.caption if c.value.startswith("Model:")]
    assert shown and f"the run's model {DEMO_MODEL}" in shown[0] and "(sampling policy unknown)" in shown[0]

    # checkpoints for some steps only: step 0's is known, step 1's is not
    with Store(app_db) as store:
        checkpoints.attach(store, "demo", assignments=[f"0={STEP0}"])
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "2"})
    assert any(f"Model: step 0's checkpoint {STEP0} (on-policy)." == c.value for c in at.caption)
    assert not any("Resampling is off" in w.value for w in at.warning)

    at = open_app(app_db, "resample", {"run": "demo", "rollout": "200"})
    warned = [w.value for w in at.warning if "Resampling is off" in w.value]
    assert warned and "sampled step 1 is unknown" in warned[0]
    assert at.button(key="resample_run").disabled
