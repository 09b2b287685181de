"""Incremental work on a growing run (issue 46 item 3): after a step is appended, the trends and the
Explorer's summaries compute only what the store lacks — the new step's rollouts for step- and group-scoped
estimators (and A_final's summaries), the whole run again for a run-scoped one, which says so — and every
number equals the same run imported at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from backend.core import chunks
from backend.credit import estimates
from backend.estimators import registry
from backend.ingest import import_records
from backend.store import Store, StoreHandle
from backend.views import explorer
from tests.conftest import make_records

STEPS = 6


def _store(path, records, parts) -> StoreHandle:
    """A store whose run `r` was imported in `parts` (lists of steps), one import each."""
    with Store(path) as store:
        for i, steps in enumerate(parts):
            import_records(
                store, "r", [x for x in records if x["step"] in steps], content_key=f"p{i}", append=i > 0
            )
    return StoreHandle(path)


@pytest.fixture(scope="module")
def records():
    return make_records(n_groups=3, group_size=4, seed=7, steps=STEPS)


def _computed_ids(progress_lines: list[str]) -> list[str]:
    return [line for line in progress_lines if "ids" in line or "whole run" in line]


@pytest.mark.parametrize("name", ["grpo", "stare", "gae"])
def test_a_new_step_costs_its_own_rollouts_and_the_numbers_equal_the_whole_runs(tmp_path, records, name):
    grown = _store(tmp_path / "grown.duckdb", records, [range(STEPS - 1)])
    config = (("channel", "task"),)
    explorer.step_trends(grown, "r", name, config)  # steps 0..4, cached
    with grown.write() as store:
        import_records(
            store, "r", [x for x in records if x["step"] == STEPS - 1], content_key="new", append=True
        )
    said: list[str] = []
    explorer.prepare(grown, "r", name, config, progress=lambda i, n, what: said.append(what))
    after = explorer.step_trends(grown, "r", name, config, prepare_missing=False)

    whole = _store(tmp_path / "whole.duckdb", records, [range(STEPS)])
    expected = explorer.step_trends(whole, "r", name, config)
    pd.testing.assert_frame_equal(after, expected, check_exact=False, rtol=1e-5, atol=1e-6)
    built = registry.make_config(name, channel="task")
    with grown.read() as a, whole.read() as b:
        key = registry.config_hash(name, built)
        mine, theirs = a.cached_estimate("r", name, key, "task"), b.cached_estimate("r", name, key, "task")
        new_ids = set(a.rollout_keys("r").query(f"step == {STEPS - 1}")["rollout_id"])
    assert set(mine) == set(theirs)
    for rollout, values in theirs.items():
        np.testing.assert_allclose(mine[rollout], values, rtol=1e-5, atol=1e-6)

    computed = [w for w in said if "rollouts (" in w or "whole run" in w]
    scope = registry.get(name).scope_for(built)
    if scope == "run":
        assert any("whole run" in w or f"{len(mine)} rollouts" in w for w in computed), said
    else:  # only the new step's rollouts were computed, estimator and A_final alike
        first, last = min(new_ids), max(new_ids)
        assert computed and all(f"ids {first}..{last}" in w for w in computed), said


def test_an_append_drops_only_the_outputs_it_makes_stale(tmp_path, records):
    """Kept: a step- or group-scoped output of a step the new rollouts do not join. Dropped: the outputs of
    a step they join (new members change its batch) and every output of a run-scoped estimator."""
    grown = _store(tmp_path / "g.duckdb", records, [range(STEPS - 1)])
    for name in ("grpo", "stare", "gae"):
        estimates.estimate_rollouts(grown, "r", name, registry.make_config(name, channel="task"))

    def kept() -> dict[str, set[int]]:
        with grown.read() as store:
            rows = store.con.execute(
                "SELECT estimator, step FROM estimates JOIN rollouts USING (run_id, rollout_id)"
            ).fetchall()
        found: dict[str, set[int]] = {}
        for name, step in rows:
            found.setdefault(name, set()).add(int(step))
        return found

    assert kept() == {name: set(range(STEPS - 1)) for name in ("grpo", "stare", "gae")}
    late = [dict(x, response=x["response"] + " late") for x in records if x["step"] == 2][:2]
    with grown.write() as store:  # two more responses of step 2, and step 5
        import_records(
            store, "r", late + [x for x in records if x["step"] == STEPS - 1], content_key="more", append=True
        )
    assert kept() == {name: set(range(STEPS - 1)) - {2} for name in ("grpo", "stare")}
    said: list[str] = []
    estimates.estimate_rollouts(
        grown,
        "r",
        "grpo",
        registry.make_config("grpo", channel="task"),
        progress=lambda i, n, w: said.append(w),
    )
    with grown.read() as store:
        ids = store.rollout_keys("r").query(f"step in (2, {STEPS - 1})")["rollout_id"]
    assert sum(int(w.split()[0]) for w in said if "rollouts (" in w) == len(ids)  # steps 2 and 5 only


def test_a_plan_over_some_steps_or_groups_names_them_when_others_fall_inside():
    index = pd.DataFrame(
        {"rollout_id": range(8), "group_id": [0, 1, 0, 1, 2, 2, 3, 3], "step": [0, 0, 0, 0, 1, 1, 1, 1]}
    )
    (only_step,) = chunks.plan(index, "step", only={1})
    assert (only_step.first, only_step.last, only_step.rollouts, only_step.steps) == (4, 7, 4, None)
    (group_one,) = chunks.plan(index, "group", only={1})
    assert (group_one.first, group_one.last, group_one.rollouts, group_one.group_ids) == (1, 3, 2, (1,))
    (in_memory,) = chunks.plan(index, "group", chunk_rollouts=None, only={2, 3})
    assert (in_memory.first, in_memory.last, in_memory.rollouts) == (4, 7, 4)
    assert chunks.plan(index, "step", only=set()) == []


def test_the_rollout_summary_of_a_grown_run_is_the_whole_runs(tmp_path):
    """The repetition of the rollouts already summarized is kept across the rebuild an append makes (only
    the new ones are computed); every summary column equals the run imported at once."""
    records = make_records(n_groups=3, group_size=4, seed=9, steps=STEPS)
    for i, record in enumerate(records):  # long responses with repeats: repetition defined and non-zero
        record["token_ids"] = (record["token_ids"] * 8)[:40] if i % 2 else record["token_ids"] * 5
        for name in ("tokens", "logprobs", "entropies"):
            record[name] = (record[name] * 8)[: len(record["token_ids"])]
        record["token_rewards"] = {"style": [0.0] * len(record["token_ids"])}
    grown = _store(tmp_path / "g.duckdb", records, [range(3), range(3, 5)])
    with grown.write() as store:  # a mark on a summarized rollout: kept, not computed again, by the append
        store.con.execute("UPDATE rollout_summary SET repetition = 0.123 WHERE rollout_id = 0")
        import_records(store, "r", [x for x in records if x["step"] == 5], content_key="p2", append=True)
        assert store.con.execute(
            "SELECT repetition FROM rollout_summary WHERE rollout_id = 0"
        ).fetchall() == [(0.123,)]
        store.con.execute("UPDATE rollout_summary SET repetition = NULL WHERE rollout_id = 0")
        store.con.execute("DELETE FROM rollout_summary WHERE rollout_id = 0")  # rebuilt whole below
    explorer.prepare(grown, "r")  # a missing row: the summary is rebuilt, rollout 0's computed again
    whole = _store(tmp_path / "w.duckdb", records, [range(STEPS)])
    query = "SELECT * EXCLUDE (run_id) FROM rollout_summary ORDER BY rollout_id"
    with grown.read() as a, whole.read() as b:
        mine, theirs = a.con.execute(query).df(), b.con.execute(query).df()
    assert mine["repetition"].notna().sum() > 0 and (mine["repetition"] > 0).any()
    pd.testing.assert_frame_equal(mine, theirs)
