"""A run knows which checkpoint sampled each step: `import --model` with a {step} template or a mapping file,
`creditlens checkpoints` to list and attach them, and the model jobs (teacher, resample, score, model-credit)
using the rollout's step checkpoint by default, with `on_policy` stored beside their numbers. Real demo
policy folders (copies of the bundled one under per-step names) and a real DuckDB store."""

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from backend.core.errors import InputError
from backend.evaluation.calibration import calibration
from backend.store import Store
from backend.store.checkpoints import choose_model, parse_model_spec, read_mapping
from tests.backend.models.conftest import DEMO_MODEL, DEMO_RUN
from tests.conftest import run_cli_here


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> Path:
    """ckpts/step_0, step_1 and step_3 (step 2 missing): copies of the demo policy."""
    root = tmp_path_factory.mktemp("ckpts")
    for step in (0, 1, 3):
        shutil.copytree(DEMO_MODEL, root / f"step_{step}")
    return root


@pytest.fixture
def imported(ckpts, tmp_path) -> Path:
    db = tmp_path / "runs.duckdb"
    done = run_cli_here(
        "import",
        DEMO_RUN,
        "--db",
        db,
        "--run",
        "demo",
        "--model",
        f"{ckpts}/step_{{step}}",
        "--verifier",
        "answer_match",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert "step checkpoints: 3 of 4 steps attached; no checkpoint for step(s) 2" in done.stdout
    return db


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_a_template_attaches_each_existing_step_absolute_and_the_command_lists_and_attaches(imported, ckpts):
    listed = json.loads(run_cli_here("checkpoints", "--db", imported, "--run", "demo", "--json").stdout)
    assert listed["model"] == str(ckpts / "step_0")  # the tokenizer of the run: the lowest step's folder
    assert [(s["step"], s["checkpoint"], s["rollouts"]) for s in listed["steps"]] == [
        (0, str(ckpts / "step_0"), 112),
        (1, str(ckpts / "step_1"), 112),
        (2, None, 112),
        (3, str(ckpts / "step_3"), 112),
    ]
    bad = run_cli_here("checkpoints", "--db", imported, "--run", "demo", "--set", f"2={ckpts}/step_2")
    assert bad.returncode == 2 and "no such model folder" in bad.stderr
    bad = run_cli_here("checkpoints", "--db", imported, "--run", "demo", "--set", f"7={ckpts}/step_3")
    assert bad.returncode == 2 and "has no step(s) 7" in bad.stderr
    done = run_cli_here("checkpoints", "--db", imported, "--run", "demo", "--set", f"2={ckpts}/step_3")
    assert done.returncode == 0 and f"     2       112  {ckpts}/step_3" in done.stdout


def test_mapping_files_json_and_toml_are_relative_to_the_file(ckpts, tmp_path):
    (ckpts / "map.json").write_text(json.dumps({"0": "step_0", "3": "step_3"}))
    (ckpts / "map.toml").write_text('[checkpoints]\n0 = "step_1"\n1 = "step_3"\n')
    assert read_mapping(ckpts / "map.json") == {0: str(ckpts / "step_0"), 3: str(ckpts / "step_3")}
    assert read_mapping(ckpts / "map.toml") == {0: str(ckpts / "step_1"), 1: str(ckpts / "step_3")}
    spec = parse_model_spec(str(ckpts / "map.toml"))
    assert spec.tokenizer_dir == str(ckpts / "step_1")
    (tmp_path / "bad.json").write_text(json.dumps({"zero": "step_0"}))
    with pytest.raises(InputError, match="a step must be an integer"):
        read_mapping(tmp_path / "bad.json")
    (tmp_path / "gone.json").write_text(json.dumps({"0": "nowhere"}))
    with pytest.raises(InputError, match="no such model folder"):
        parse_model_spec(str(tmp_path / "gone.json"))
    db = tmp_path / "runs.duckdb"
    assert (
        run_cli_here(
            "import", DEMO_RUN, "--db", db, "--run", "d", "--model", ckpts / "map.json", "--quiet"
        ).returncode
        == 0
    )
    assert rows(db, "SELECT step, model_dir FROM step_checkpoints ORDER BY step") == [
        (0, str(ckpts / "step_0")),
        (3, str(ckpts / "step_3")),
    ]


def test_choose_model_on_policy_named_off_policy_unknown_and_legacy():
    known = {0: "/c/step_0", 3: "/c/step_3"}
    assert choose_model(known, "/c/step_0", 3, None, "r").on_policy is True
    assert choose_model(known, "/c/step_0", 3, "/c/step_3", "r").on_policy is True  # naming the right one
    named = choose_model(known, "/c/step_0", 3, "/c/step_0", "r")
    assert named.on_policy is False and "step 3 was sampled by /c/step_3" in named.why
    with pytest.raises(InputError, match=r"step 2 is unknown .*`creditlens checkpoints --run r --set 2="):
        choose_model(known, "/c/step_0", 2, None, "r")
    assert choose_model(known, "/c/step_0", 2, "/c/step_0", "r").on_policy is False
    legacy = choose_model({}, "/c/final", 2, None, "r")  # a run that records no checkpoint keeps its model
    assert (legacy.model_dir, legacy.on_policy) == ("/c/final", None)
    with pytest.raises(InputError, match="no model recorded"):
        choose_model({}, None, 2, None, "r")


def test_teacher_uses_each_steps_checkpoint_refuses_an_unknown_one_and_marks_a_named_model(imported, ckpts):
    # rollouts 0 and 447: steps 0 and 3; rollout 224 (step 2) has no checkpoint yet
    refused = run_cli_here("teacher", "--db", imported, "--run", "demo", "--rollouts", "3", "--samples", "2")
    assert refused.returncode == 2 and "sampled step 2 is unknown" in refused.stderr
    assert rows(imported, "SELECT count(*) FROM resample_samples") == [(0,)]
    named = run_cli_here(
        "teacher",
        "--db",
        imported,
        "--run",
        "demo",
        "--rollouts",
        "3",
        "--samples",
        "2",
        "--model",
        ckpts / "step_3",
        "--json",
    )
    assert named.returncode == 0, named.stderr
    models = json.loads(named.stdout)["models"]
    assert {int(s): m["on_policy"] for s, m in models.items()} == {0: False, 2: False, 3: True}
    stored = rows(
        imported,
        "SELECT o.step, s.model, bool_and(s.on_policy), count(*) FROM resample_samples s "
        "JOIN rollouts o USING (run_id, rollout_id) GROUP BY ALL ORDER BY 1",
    )
    step_3 = str(ckpts / "step_3")
    assert [(s, m, p) for s, m, p, _ in stored] == [(0, step_3, False), (2, step_3, False), (3, step_3, True)]


def test_resample_and_model_credit_default_to_the_steps_checkpoint(imported, ckpts):
    done = run_cli_here(
        "resample",
        "--db",
        imported,
        "--run",
        "demo",
        "--rollout",
        "130",
        "--positions",
        "0,4",
        "--samples",
        "2",
    )
    assert done.returncode == 0, done.stderr
    assert f"model: step 1's checkpoint {ckpts}/step_1 [on-policy]" in done.stdout
    assert rows(imported, "SELECT DISTINCT model, on_policy FROM resample_samples") == [
        (str(ckpts / "step_1"), True)
    ]
    done = run_cli_here(
        "model-credit", "--db", imported, "--run", "demo", "--method", "gcpo", "--rollout", "0"
    )
    assert done.returncode == 0, done.stderr
    assert f"step 0: step 0's checkpoint {ckpts}/step_0" in done.stdout
    assert rows(imported, "SELECT DISTINCT model, on_policy FROM model_credit") == [
        (str(ckpts / "step_0"), True)
    ]


def test_score_uses_each_steps_checkpoint_and_reproduces_the_sampling_logprobs(imported, ckpts):
    """Step 3 was sampled by the bundled policy (its copy is step_3 here): rescoring with it gives the stored
    logprobs back; step 0's rows are scored with another folder and said so."""
    before = rows(imported, "SELECT rollout_id, logprobs FROM rollouts WHERE step = 3 ORDER BY rollout_id")
    done = run_cli_here("score", "--db", imported, "--run", "demo", "--all")
    assert done.returncode == 2 and "sampled step 2 is unknown" in done.stderr  # nothing written
    run_cli_here("checkpoints", "--db", imported, "--run", "demo", "--set", f"2={ckpts}/step_3")
    done = run_cli_here("score", "--db", imported, "--run", "demo", "--all")
    assert done.returncode == 0, done.stderr
    assert f"step 3: step 3's checkpoint {ckpts}/step_3 [on-policy]" in done.stdout
    after = rows(imported, "SELECT rollout_id, logprobs FROM rollouts WHERE step = 3 ORDER BY rollout_id")
    diff = max(np.abs(np.subtract(a[1], b[1])).max() for a, b in zip(before, after, strict=True))
    assert diff < 1e-4  # the file stores 4 decimals


def test_calibration_reads_the_stored_on_policy_flags(imported, ckpts):
    """Teacher rows from the final checkpoint named on purpose: on-policy only where it sampled the step."""
    assert (
        run_cli_here(
            "teacher",
            "--db",
            imported,
            "--run",
            "demo",
            "--rollouts",
            "3",
            "--samples",
            "2",
            "--model",
            ckpts / "step_3",
        ).returncode
        == 0
    )
    with Store(imported, read_only=True) as store:
        keys = store.rollout_index("demo")
        table = calibration(store, "demo", dict(zip(keys["rollout_id"], keys["task"], strict=True)))
    assert dict(zip(table["step"], table["on_policy"], strict=True)) == {0: 0.0, 2: 0.0, 3: 1.0}
