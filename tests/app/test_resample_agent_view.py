"""The Resample view on the bundled agent run: it says that its suffixes go through the run's tool loop, and
the job its button starts continues each episode through it (the tool's answers are in the stored
suffixes), as `creditlens resample` does."""

from __future__ import annotations

from app import jobs, keys
from app.view_data import resample as resample_data
from backend.models import load_engine
from backend.models.environments import calculator
from backend.store import StoreHandle, checkpoints
from tests.app.conftest import open_app


def test_the_view_says_the_suffixes_go_through_the_tool_loop(app_db):
    at = open_app(app_db, "resample", {"run": "agent", "rollout": "31"})
    captions = " ".join(c.value for c in at.caption)
    assert "through the run's tool loop (calculator)" in captions
    assert "Positions inside a tool's output are refused" in captions


def test_the_views_job_runs_the_tool_in_each_sample(app_db):
    handle = StoreHandle(app_db)
    with handle.read() as store:
        info, record = store.run_info("agent"), store.rollout("agent", 31)
        model = checkpoints.rollout_model(store, "agent", 31).model_dir  # the step's own, as the view loads
    environment, problem = resample_data.environment(info)
    assert problem is None and environment.name == "calculator"
    engine = load_engine(model, engine="transformers")
    job = jobs.resample_job(handle, "agent", 31, engine, record, info["verifier"], [20], 3, None, environment)
    job.start().thread.join(300)
    assert job.error is None and not job.result.cancelled
    with handle.read() as store:
        stored = store.resample_samples("agent", 31)
    assert len(stored) == 3
    for text in stored["suffix_text"]:  # position 20 is inside the turn [14, 41) the tool answers at 41
        line, _, rest = text.partition("\n")
        kept = "".join(record["tokens"][14:20])
        assert rest.startswith(calculator(kept + line + "\n"))


def test_suggested_positions_leave_out_the_tools_output(app_db):
    """Step ends on an agent response fall on the tool's first token (the line before it ends in a newline):
    the suggestions keep only positions the tool loop can continue from."""
    at = open_app(app_db, "resample", {"run": "agent", "rollout": "31"})
    tool = [range(6, 14), range(41, 53)]
    assert at.session_state[keys.RESAMPLE_POSITIONS]
    assert not any(p in span for span in tool for p in at.session_state[keys.RESAMPLE_POSITIONS])
    at.button(key="resample_suggest_steps").click().run()
    steps = at.session_state[keys.RESAMPLE_POSITIONS]
    assert steps and not any(p in span for span in tool for p in steps)
    with StoreHandle(app_db).read() as store:
        tokens = list(store.rollout("agent", 31)["tokens"])
    assert {6, 41} <= set(resample_data.suggested_positions("steps", tokens, None))  # unfiltered
