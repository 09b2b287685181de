"""One truth: `creditlens explain`, the scoped estimates behind every view, and `creditlens estimate`
give the same advantages for every estimator that runs on the demo run; explain carries terms."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from backend.credit import estimates
from backend.estimators import registry
from backend.store import Store, StoreHandle
from backend.views import explain
from tests.conftest import copy_store, reads_share_one_instance, run_cli_here

ROOT = Path(__file__).resolve().parents[2]
ROLLOUT = 352  # a demo rollout in a group with mixed outcomes


@pytest.fixture(scope="module")
def demo_db(bundled_template, tmp_path_factory) -> Path:
    return copy_store(bundled_template, tmp_path_factory.mktemp("explain") / "runs.duckdb")


def _supported(db: Path) -> list[str]:
    with Store(db, read_only=True) as store:
        batch = store.load_batch("demo", rollout_ids=[ROLLOUT])
    return registry.supported(batch)


def _cli_estimate(db: Path, name: str, out: Path) -> np.ndarray:
    done = run_cli_here("estimate", "--db", str(db), "--run", "demo", "--estimator", name, "--out", str(out))
    assert done.returncode == 0
    frame = pq.read_table(out).to_pandas()
    return frame[frame["rollout_id"] == ROLLOUT].sort_values("pos")["advantage"].to_numpy()


@pytest.mark.slow
def test_every_supported_estimator_explains_what_estimate_writes(demo_db, tmp_path):
    names = _supported(demo_db)
    assert {"token_rm", "rudder", "ktae", "gae", "gtpo", "aggregation", "grpo"} <= set(names)
    handle = StoreHandle(demo_db)
    written = {name: _cli_estimate(demo_db, name, tmp_path / f"{name}.parquet") for name in names}
    with reads_share_one_instance(demo_db):  # explaining reads what the commands cached, and writes nothing
        for name, from_cli in written.items():
            _explains_what_estimate_wrote(handle, name, from_cli)


def _explains_what_estimate_wrote(handle: StoreHandle, name: str, from_cli: np.ndarray) -> None:
    result = explain.explain_rollout(handle, "demo", ROLLOUT, name)
    np.testing.assert_allclose(result.channels["task"]["advantage"], from_cli, atol=1e-6, err_msg=name)
    # The final advantage is the sum of the channel contributions; the task channel's is β·A.
    total = sum(part["contribution"] for part in result.channels.values())
    np.testing.assert_allclose(total, result.final, atol=1e-5, err_msg=name)
    assert result.terms["scope"] == registry.get(name).scope_for(registry.make_config(name))
    np.testing.assert_allclose(result.terms["tokens"]["advantage"], from_cli, atol=1e-6, err_msg=name)
    assert explain.derivation(result.terms, 0), name


@pytest.mark.parametrize("name", ["token_rm", "rudder", "gae", "high_entropy_mask", "aggregation"])
def test_wide_scope_estimators_differ_from_their_group_alone(demo_db, name):
    """The reason scope exists: on the rollout's group alone these give other numbers (the bug)."""
    handle = StoreHandle(demo_db)
    scoped = estimates.estimate_rollouts(handle, "demo", name, rollout_ids=[ROLLOUT])
    assert scoped.scope in ("step", "run")
    with handle.read() as store:
        group = int(store.rollout_index("demo").set_index("rollout_id").loc[ROLLOUT, "group_id"])
        batch = store.load_batch("demo", group_ids=[group])
    row = int((batch.rollout_ids == ROLLOUT).nonzero()[0, 0])
    alone = registry.estimate(name, batch).advantages[row, : int(batch.lengths[row])].numpy()
    assert np.abs(scoped.advantages[ROLLOUT] - alone).max() > 1e-3


def test_step_scope_is_computed_per_training_step(demo_db, tmp_path):
    """high_entropy_mask takes its entropy quantile over the training batch: a step's output equals the
    estimator run on that step alone."""
    db = tmp_path / "runs.duckdb"
    shutil.copy(demo_db, db)
    handle = StoreHandle(db)
    scoped = estimates.estimate_rollouts(handle, "demo", "high_entropy_mask")
    with handle.read() as store:
        step = store.load_batch("demo", steps=[1])
        key = registry.config_hash("high_entropy_mask", scoped.config)
        assert store.cached_estimate("demo", "high_entropy_mask", key, "task")
    adv = registry.estimate("high_entropy_mask", step).advantages
    for i, rid in enumerate(step.rollout_ids.tolist()):
        np.testing.assert_allclose(scoped.advantages[rid], adv[i, : int(step.lengths[i])].numpy(), atol=1e-6)


def test_views_read_what_the_command_line_cached(bundled_db):
    """A run-scope estimate computed for one rollout is saved for the whole run and read back."""
    db = bundled_db
    handle = StoreHandle(db)
    first = estimates.estimate_rollouts(handle, "demo", "token_rm", rollout_ids=[ROLLOUT])
    again = estimates.estimate_rollouts(handle, "demo", "token_rm", rollout_ids=[ROLLOUT, 0])
    assert (first.how, again.how) == ("computed", "cache")
    np.testing.assert_array_equal(first.advantages[ROLLOUT], again.advantages[ROLLOUT])


def test_explain_command_json_and_table(demo_db):
    run = [
        "explain",
        "--db",
        str(demo_db),
        "--run",
        "demo",
        "--rollout",
        str(ROLLOUT),
        "--estimator",
        "recency",
        "--pos",
        "3",
    ]
    out = run_cli_here(*run, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) >= {"tokens", "channels", "final", "terms", "derivation"}
    L = len(doc["tokens"])
    for part in doc["channels"].values():
        assert len(part["advantage"]) == L and len(part["contribution"]) == L
    terms = doc["terms"]
    assert terms["estimator"] == "recency" and terms["scope"] == "group"
    assert {"Z", "R", "group_mean", "group_std"} <= set(terms["sequence"])
    assert {"weights", "r", "advantage"} <= set(terms["tokens"])
    line = doc["derivation"]["lines"][-1]
    w = terms["tokens"]["weights"]
    assert line.startswith("A_t = Z · w_t / mean w") and f"{w[3]:.4g}" in line
    table = run_cli_here(*run)
    assert table.returncode == 0 and "why A at pos 3" in table.stdout


def test_explain_bad_input_is_one_line_exit_2(demo_db):
    for extra, needle in (
        (["--rollout", "99999", "--estimator", "grpo"], "no rollout 99999"),
        (["--rollout", "0", "--estimator", "nope"], "unknown estimator"),
        (["--rollout", "0", "--estimator", "grpo", "--pos", "5000"], "--pos 5000"),
    ):
        out = run_cli_here("explain", "--db", demo_db, "--run", "demo", *extra)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_suffix_mc_explains_with_the_monte_carlo_values_that_fed_it(bundled_db):
    db = bundled_db
    assert (
        run_cli_here(
            "resample",
            "--db",
            str(db),
            "--run",
            "demo",
            "--rollout",
            str(ROLLOUT),
            "--positions",
            "3,17",
            "--samples",
            "4",
        ).returncode
        == 0
    )
    result = explain.explain_rollout(StoreHandle(db), "demo", ROLLOUT, "suffix_mc")
    assert [(m["pos"], m["n"]) for m in result.terms["mc"]] == [(3, 4), (17, 4)]
    lines = explain.derivation(result.terms, 5)
    assert lines[-3].startswith("V̂(s_3) = ") and "4 sampled suffixes" in lines[-3]
    assert lines[-2].startswith("V̂(s_17) = ")
    assert lines[-1].startswith("A_t = scale")
    gae = explain.explain_rollout(StoreHandle(db), "demo", ROLLOUT, "gae", (("value_source", "mc"),))
    assert gae.terms["notes"]["value_source"] == "mc" and "mc" in gae.terms
    assert "V(s_t) from mc" in explain.derivation(gae.terms, 5)[1]


def test_explain_json_carries_the_strips_and_a_channel_normalization(demo_db):
    args = [
        "explain",
        "--db",
        str(demo_db),
        "--run",
        "demo",
        "--rollout",
        str(ROLLOUT),
        "--estimator",
        "grpo",
        "--json",
    ]
    done = run_cli_here(*args)
    assert done.returncode == 0
    plain = json.loads(done.stdout)
    L = len(plain["tokens"])
    assert {"logprob", "ref logprob", "log-ratio k1", "log-ratio k3", "entropy"} <= set(plain["strips"])
    k1, k3 = np.array(plain["strips"]["log-ratio k1"]), np.array(plain["strips"]["log-ratio k3"])
    assert len(k1) == L and np.allclose(k3, np.expm1(-k1) + k1, atol=1e-6) and (k3 >= -1e-9).all()
    done = run_cli_here(*args, "--norm", "task=group")
    assert done.returncode == 0
    normed = json.loads(done.stdout)
    task = [doc["channels"]["task"]["contribution"] for doc in (plain, normed)]
    assert not np.allclose(*task)  # the task channel z-scored over the group's tokens: a different A
    done = run_cli_here(*args, "--norm", "task=sideways")
    assert done.returncode == 2
    assert "group, batch or none" in done.stderr and "usage:" not in done.stderr  # the command's error


def test_the_final_is_every_channels_term_whichever_channel_is_looked_at(demo_db):
    """Issue 43: demo rollout 354's filler token (pos 20) under grpo has A_final = task Z + format and style
    penalties + KL, and picking format (or `all`) no longer recomputes format with the estimator: the final
    stays −4.475 (it was −4.682 on format). Every non-zero term carries its derivation."""
    finals = {}
    for channel in ("task", "format", "style", "all"):
        done = run_cli_here(
            "explain", "--db", str(demo_db), "--run", "demo", "--rollout", "354", "--estimator", "grpo",
            "--pos", "20", "--channel", channel, "--json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        finals[channel] = out["final"][20]
        terms = {c: p["contribution"][20] for c, p in out["channels"].items()}
        assert sum(terms.values()) == pytest.approx(out["final"][20], abs=1e-5)
        for c, part in out["channels"].items():
            lines = part["derivation"]["lines"]
            assert part["derivation"]["pos"] == 20 and lines, c
            if abs(terms[c]) > 1e-9:
                assert f"{terms[c]:.4g}" in lines[-1], (c, lines)
        assert "Z = (R − mean_G)" in out["channels"]["task"]["derivation"]["lines"][0]
        assert "token_rewards[format]" in out["channels"]["format"]["derivation"]["lines"][0]
        assert out["final_derivation"]["lines"][0].startswith("A_final = Σ_c β_c·Ã_c")
        assert ("what_if" in out) == (channel == "all")
    assert finals["task"] == pytest.approx(-4.4748, abs=1e-3)
    assert len({round(v, 6) for v in finals.values()}) == 1, finals
