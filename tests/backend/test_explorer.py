"""The run explorer on a real DuckDB store: SQL summaries against the same numbers computed in pandas/numpy
from the stored rows, the table's sort/filter/search/pages, the trends, and the command line against the
functions the views call."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from backend.core.ranks import spearman
from backend.credit import credit_shares, credit_summary, estimates, token_classes
from backend.ingest import import_records
from backend.store import Store, StoreHandle
from backend.views import explorer
from backend.views.explorer import ExplorerQuery, Filter, parse_where
from tests.conftest import copy_store, run_cli_here

ROOT = Path(__file__).resolve().parents[2]


def explorer_records(seed: int = 0, steps: int = 3, groups: int = 3, size: int = 4) -> list[dict]:
    """A run with what every column needs: repeated 16-token windows, reference logprobs on some rollouts,
    truncation in meta (two spellings), a zero-variance group per step, digits/newlines/punctuation."""
    rng = random.Random(seed)
    vocab = ["1", "2", "+", "=", " the", " so", "\n", ".", " carry", "!", " 7", " answer"]
    records = []
    for step in range(steps):
        for g in range(groups):
            prompt = f"step {step} question {g}: add {g} and {step}"
            for k in range(size):
                n = rng.randint(5, 40)
                ids = [rng.randrange(len(vocab)) for _ in range(n)]
                if k == 0 and n >= 20:  # a looping response: its first 18 tokens again
                    ids = ids[:18] + ids[:18]
                    n = len(ids)
                tokens = [vocab[i] for i in ids]
                meta: dict = {"ground_truth": str(g + step)}
                if k == 1:
                    meta["truncated"] = bool(g % 2)
                elif k == 2:
                    meta["finish_reason"] = "length" if g == 0 else "stop"
                task = 1.0 if g == 0 else float(rng.random() < 0.5)  # group 0: zero variance
                rec = {
                    "prompt": prompt,
                    "response": "".join(tokens) + (" NEEDLE" if (step, g, k) == (1, 2, 3) else ""),
                    "step": step,
                    "token_ids": ids,
                    "tokens": tokens,
                    "logprobs": [-rng.random() for _ in ids],
                    "entropies": [rng.random() * 2 for _ in ids],
                    "rewards": {"task": task, "style": -float(rng.random() < 0.3)},
                    "token_rewards": {"style": [0.0] * (n - 1) + [-1.0]},
                    "meta": meta,
                }
                if step > 0:
                    rec["ref_logprobs"] = [-rng.random() for _ in ids]
                records.append(rec)
    return records


@pytest.fixture
def handle(tmp_path) -> StoreHandle:
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        import_records(store, "run", explorer_records(), content_key="explorer")
    return StoreHandle(db)


def everything(handle: StoreHandle, **kwargs) -> pd.DataFrame:
    return explorer.rollout_table(handle, "run", ExplorerQuery(limit=None, **kwargs)).rows


def expected_summary(store: Store) -> pd.DataFrame:
    """The per-rollout summary computed in pandas/numpy from the stored rows (the SQL's reference)."""
    rows = store.con.execute(
        "SELECT rollout_id, group_id, step, token_ids, entropies, logprobs, ref_logprobs, meta "
        "FROM rollouts WHERE run_id = ? ORDER BY rollout_id",
        [store.run_id("run")],
    ).fetchall()
    scores = store.rollout_index("run").set_index("rollout_id")
    out = []
    for rid, group, step, ids, ent, lp, ref, meta in rows:
        meta = json.loads(meta)
        windows = [tuple(ids[i : i + 16]) for i in range(len(ids) - 15)]
        seen, repeats = set(), 0
        for w in windows:
            repeats += w in seen
            seen.add(w)
        truncated = meta.get("truncated")
        if truncated is None and "finish_reason" in meta:
            truncated = meta["finish_reason"] == "length"
        out.append(
            {
                "rollout_id": rid,
                "group_id": group,
                "step": step,
                "length": len(ids),
                "reward": scores.loc[rid, "task"] + scores.loc[rid, "style"],
                "truncated": truncated,
                "repetition": repeats / len(windows) if windows else math.nan,
                "mean_entropy": float(np.mean(ent)),
                "kl": float(np.mean(np.subtract(lp, ref))) if ref is not None else math.nan,
                "task": scores.loc[rid, "task"],
            }
        )
    frame = pd.DataFrame(out)
    task = frame.groupby("group_id")["task"]
    frame["zero_variance"] = (task.transform("size") >= 2) & (task.transform("nunique") == 1)
    return frame


def test_summary_filled_at_import_matches_pandas(handle):
    with handle.read() as store:
        want = expected_summary(store)
        n = store.con.execute("SELECT count(*) FROM rollout_summary").fetchall()[0][0]
    assert n == len(want) == 36  # filled by the import itself
    got = everything(handle).set_index("rollout_id").loc[want["rollout_id"]]
    for column in ("group_id", "step", "length", "zero_variance"):
        assert got[column].tolist() == want[column].tolist(), column
    for column in ("reward", "repetition", "mean_entropy", "kl"):
        np.testing.assert_allclose(
            got[column].astype(float),
            want[column].astype(float),
            rtol=1e-5,
            atol=1e-6,
            equal_nan=True,
            err_msg=column,
        )
    assert [None if pd.isna(v) else bool(v) for v in got["truncated"]] == [
        None if v is None else bool(v) for v in want["truncated"]
    ]
    assert want["truncated"].notna().sum() == 18  # 9 from meta.truncated, 9 from meta.finish_reason
    assert (want["repetition"] > 0).sum() >= 1
    assert want["zero_variance"].any() and not want["zero_variance"].all()
    assert np.isfinite(want["kl"]).sum() == 24  # steps 1 and 2 carry reference logprobs
    np.testing.assert_allclose(got["score_task"], want["task"])


def shares_in_numpy(handle: StoreHandle, name: str) -> pd.DataFrame:
    """Share of each rollout's Σ|A| per token class, from estimate_rollouts and token_class_ids."""
    scoped = estimates.estimate_rollouts(handle, "run", name)
    with handle.read() as store:
        batch = store.load_batch("run")
    adv = scoped.padded(batch.rollout_ids.tolist(), batch.T).numpy().astype(np.float64)
    classes = token_classes.class_ids(batch)
    mask = batch.response_mask.numpy()
    rows = []
    for i, rid in enumerate(batch.rollout_ids.tolist()):
        magnitude = np.abs(adv[i]) * mask[i]
        total = magnitude.sum()
        row = {"rollout_id": rid, "max_abs": magnitude.max(), "mean_adv": adv[i][mask[i]].mean()}
        positive, negative = np.maximum(adv[i], 0) * mask[i], np.maximum(-adv[i], 0) * mask[i]
        for c, label in enumerate(credit_shares.CREDIT_CLASSES):
            share = magnitude[classes[i] == c].sum() / total if total else np.nan
            row[explorer.column_name("share", label)] = share
            for sign, part in (("pos", positive), ("neg", negative)):
                row[explorer.column_name(f"{sign}_share", label)] = (
                    part[classes[i] == c].sum() / part.sum() if part.sum() else np.nan
                )
        rows.append(row)
    return pd.DataFrame(rows).set_index("rollout_id")


@pytest.mark.parametrize("name", ["entropy", "high_entropy_mask"])  # group scope, step scope
def test_credit_shares_match_the_estimate(handle, name):
    got = everything(handle, estimator=name, credit="channel").set_index("rollout_id")
    want = shares_in_numpy(handle, name)
    share_columns = [explorer.column_name("share", c) for c in credit_shares.CREDIT_CLASSES]
    assert [c for c in got.columns if c.startswith("share_")] == share_columns
    signed = [
        explorer.column_name(f"{sign}_share", c)
        for sign in ("pos", "neg")
        for c in credit_shares.CREDIT_CLASSES
    ]
    assert [c for c in got.columns if c.startswith(("pos_share_", "neg_share_"))] == signed
    for column in [*share_columns, *signed, "max_abs"]:
        np.testing.assert_allclose(
            got.loc[want.index, column].astype(float),
            want[column],
            rtol=1e-5,
            atol=1e-7,
            equal_nan=True,
            err_msg=column,
        )
    shares = got[share_columns].astype(float)
    full = shares.sum(axis=1)[got["max_abs"] > 0]
    np.testing.assert_allclose(full, 1.0, rtol=1e-9)
    assert "logged_gap" not in got.columns  # this run has no logged advantage


@pytest.mark.slow
def test_creditlens_estimate_fills_the_credit_summary(handle, tmp_path):
    done = run_cli_here(
        "estimate",
        "--db",
        str(handle.path),
        "--run",
        "run",
        "--estimator",
        "entropy",
        "--out",
        str(tmp_path / "a.parquet"),
    )
    assert done.returncode == 0, done.stderr
    with handle.read() as store:
        rows = store.con.execute("SELECT count(*) FROM credit_summary WHERE estimator = 'entropy'").fetchall()
    assert rows[0][0] == 36


def test_spearman_column_matches_metrics_spearman(handle):
    got = everything(handle, estimator="entropy", compare="recency").set_index("rollout_id")
    a = estimates.estimate_rollouts(handle, "run", "entropy").advantages
    b = estimates.estimate_rollouts(handle, "run", "recency").advantages
    checked = 0
    for rid, value in got["spearman"].items():
        want = spearman(torch.from_numpy(a[rid]), torch.from_numpy(b[rid])) if len(a[rid]) > 1 else math.nan
        if math.isnan(want):
            assert pd.isna(value), rid
        else:
            assert value == pytest.approx(want, abs=1e-9), rid
            checked += 1
    assert checked >= 10


def test_sort_filter_search_and_pages(handle):
    full = everything(handle, estimator="entropy")
    ordered = everything(handle, estimator="entropy", sort="share_digits", descending=True)
    want = full.sort_values(["share_digits", "rollout_id"], ascending=[False, True], na_position="last")
    assert ordered["rollout_id"].tolist() == want["rollout_id"].tolist()

    long_ones = everything(handle, filters=(parse_where("length>=20"), Filter("zero_variance", "=", False)))
    assert sorted(long_ones["rollout_id"]) == sorted(
        full.loc[(full["length"] >= 20) & ~full["zero_variance"].astype(bool), "rollout_id"]
    )

    found = everything(handle, search="needle")
    assert found["step"].tolist() == [1] and found["group_id"].nunique() == 1
    assert everything(handle, search="question 2: add 2 and 1")["group_id"].nunique() == 1  # prompt text

    page = explorer.rollout_table(handle, "run", ExplorerQuery(sort="length", limit=10, offset=10))
    assert page.total == 36 and len(page.rows) == 10
    assert page.rows["rollout_id"].tolist() == everything(handle, sort="length")["rollout_id"].tolist()[10:20]


def test_bad_columns_and_filters_are_clear_errors(handle):
    with pytest.raises(ValueError, match="not a column"):
        explorer.rollout_table(handle, "run", ExplorerQuery(sort="length; DROP TABLE runs"))
    with pytest.raises(ValueError, match="COLUMN OP VALUE"):
        parse_where("length >> 3")
    with pytest.raises(ValueError, match="not a number"):
        parse_where("length>=abc")
    with pytest.raises(ValueError, match="unknown estimator|no estimator|known"):
        explorer.rollout_table(handle, "run", ExplorerQuery(estimator="nope"))


def test_trends_match_pandas(handle):
    trends = explorer.step_trends(handle, "run", "entropy", credit="channel")  # the estimator alone
    with handle.read() as store:
        want = expected_summary(store)
    table = everything(handle, estimator="entropy")
    assert trends["step"].tolist() == [0, 1, 2]
    by_step = want.groupby("step")
    np.testing.assert_allclose(trends["length"], by_step["length"].mean())
    np.testing.assert_allclose(trends["score_task"], by_step["task"].mean())
    weighted = want.assign(e=want["mean_entropy"] * want["length"]).groupby("step")
    np.testing.assert_allclose(
        trends["mean_entropy"], weighted["e"].sum() / by_step["length"].sum(), rtol=1e-6
    )
    zero = want.groupby(["step", "group_id"])["zero_variance"].first().groupby("step").mean()
    np.testing.assert_allclose(trends["zero_variance_share"], zero)
    assert math.isnan(trends["kl"].iloc[0]) and np.isfinite(trends["kl"].iloc[1:]).all()
    # credit share per step = Σ over the step's rollouts of |A| on the class / Σ |A|
    scoped = estimates.estimate_rollouts(handle, "run", "entropy").advantages
    with handle.read() as store:
        batch = store.load_batch("run", steps=[2])
    classes = token_classes.class_ids(batch)
    adv = np.abs(
        estimates.ScopedEstimate("entropy", None, "group", "task", scoped, "cache")
        .padded(batch.rollout_ids.tolist(), batch.T)
        .numpy()
        .astype(np.float64)
    )
    digits = credit_shares.CREDIT_CLASSES.index("digits")
    want_share = adv[classes == digits].sum() / adv.sum()
    assert trends["share_digits"].iloc[2] == pytest.approx(want_share, rel=1e-6)
    tokens = np.concatenate([scoped[r] for r in table.loc[table["step"] == 1, "rollout_id"]])
    median = np.quantile(tokens.astype(np.float64), 0.5)
    assert trends["q50"].iloc[1] == pytest.approx(median, rel=1e-5, abs=1e-7)


def test_logged_gap_only_when_the_run_logs_an_advantage(tmp_path):
    records = explorer_records(steps=1)
    for i, rec in enumerate(records):
        rec["logged_advantage"] = 0.25 * (i % 4) - 0.5
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        import_records(store, "run", records, content_key="logged")
    handle = StoreHandle(db)
    got = everything(handle, estimator="grpo").set_index("rollout_id")
    scoped = estimates.estimate_rollouts(handle, "run", "grpo")
    mean_a = {r: float(np.mean(a)) for r, a in scoped.advantages.items()}
    for rid, row in got.iterrows():
        assert row["logged_gap"] == pytest.approx(mean_a[rid] - (0.25 * (rid % 4) - 0.5), abs=1e-6)


def test_summaries_follow_the_store(handle):
    everything(handle, estimator="entropy", compare="recency")
    with handle.write() as store:  # a store from before migration 003 has no summary rows
        store.con.execute("DELETE FROM rollout_summary")
    assert len(everything(handle)) == 36  # rebuilt on demand
    with handle.write() as store:
        import_records(store, "run", explorer_records(seed=1, steps=1), content_key="more", append=True)
        counts = {  # the rows of the step the new rollouts join are dropped, the other steps' kept
            t: store.con.execute(
                f"SELECT count(*) FILTER (WHERE s.step = 0), count(*) FROM {t} JOIN rollouts s "
                "USING (run_id, rollout_id)"
            ).fetchall()[0]
            for t in ("rollout_summary", "credit_summary", "credit_agreement")
        }
    assert counts["rollout_summary"] == (24, 48)
    assert counts["credit_summary"][0] == counts["credit_agreement"][0] == 0
    assert counts["credit_summary"][1] > 0 and counts["credit_agreement"][1] > 0
    assert len(everything(handle, estimator="entropy")) == 48
    with handle.write() as store:
        store.delete_run("run")
        left = sum(
            store.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("rollout_summary", "credit_summary", "credit_agreement")
        )
    assert left == 0


def test_class_list_comes_from_one_function(handle):
    with handle.read() as store:
        assert credit_summary.credit_classes(store, "run") == tuple(credit_shares.CREDIT_CLASSES)
        batch = store.load_batch("run", steps=[0])
    reordered = tuple(reversed(credit_shares.CREDIT_CLASSES))
    ids = credit_summary.class_ids(batch, reordered)
    base = token_classes.class_ids(batch)
    real = base >= 0
    assert [reordered[i] for i in ids[real]] == [credit_shares.CREDIT_CLASSES[i] for i in base[real]]


# ---- the command line gives the view's numbers ----------------------------------------------------------


def same_frames(cli: pd.DataFrame, view: pd.DataFrame) -> None:
    assert list(cli.columns) == list(view.columns)
    for column in view.columns:
        a, b = cli[column], view[column]
        if pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(b):
            np.testing.assert_allclose(
                a.astype(float), b.astype(float), rtol=1e-12, equal_nan=True, err_msg=column
            )
        else:
            assert [None if pd.isna(x) else x for x in a] == [None if pd.isna(x) else x for x in b], column


@pytest.mark.slow
def test_cli_rollouts_json_and_parquet_equal_the_view_function(handle, tmp_path):
    args = [
        "--db",
        str(handle.path),
        "--run",
        "run",
        "--estimator",
        "entropy",
        "--compare",
        "recency",
        "--sort=-share_other",
        "--where",
        "length>=8",
        "--search",
        "1",
        "--limit",
        "7",
        "--offset",
        "2",
    ]
    done = run_cli_here("rollouts", *args, "--json")
    assert done.returncode == 0, done.stderr
    cli = pd.DataFrame(json.loads(done.stdout))
    view = explorer.rollout_table(
        handle,
        "run",
        ExplorerQuery(
            estimator="entropy",
            compare="recency",
            sort="share_other",
            descending=True,
            filters=(Filter("length", ">=", 8.0),),
            search="1",
            limit=7,
            offset=2,
        ),
    ).rows
    assert len(view) == 7
    same_frames(cli, view)
    out = tmp_path / "t.parquet"
    assert run_cli_here("rollouts", *args, "--out", str(out)).returncode == 0
    same_frames(pq.read_table(out).to_pandas(), view)


@pytest.mark.slow
def test_cli_trends_equal_the_view_function(handle):
    done = run_cli_here("trends", "--db", handle.path, "--run", "run", "--estimator", "entropy", "--json")
    assert done.returncode == 0, done.stderr
    same_frames(pd.DataFrame(json.loads(done.stdout)), explorer.step_trends(handle, "run", "entropy"))


@pytest.mark.slow
def test_cli_bad_input_is_one_line_exit_2(handle):
    for args in (["--sort", "nope"], ["--where", "length=>3"]):
        done = run_cli_here("rollouts", "--db", str(handle.path), "--run", "run", *args, "--json")
        assert done.returncode == 2, args
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    done = run_cli_here("trends", "--db", str(handle.path), "--run", "missing", "--json")
    assert done.returncode == 2 and "no run named 'missing'" in done.stderr


def test_final_credit_shares_and_excess_are_of_what_the_rollout_view_colours(bundled_template, tmp_path):
    """Issue 43: by default the shares are of A_final (every channel, as `explain` and the Rollout view give
    it), and `excess_<class>` = share of |A| − share of tokens sums to 0 per rollout. Demo rollout 354's
    filler tail carries the format and style penalties: its filler excess is clearly positive (under the
    task channel alone its filler share was just the filler share of tokens)."""
    from backend.views import explain  # noqa: PLC0415 - torch

    db = copy_store(bundled_template, tmp_path / "runs.duckdb")
    handle = StoreHandle(db)
    table = explorer.rollout_table(
        handle, "demo", ExplorerQuery(estimator="grpo", limit=None)
    ).rows.set_index("rollout_id")
    excess = [
        c
        for c in table.columns
        if c.startswith("excess_") and not c.startswith(("excess_pos_", "excess_neg_"))
    ]
    credited = table["max_abs"] > 0
    np.testing.assert_allclose(table.loc[credited, excess].astype(float).sum(axis=1), 0.0, atol=1e-9)
    for c in excess:  # its signed parts sum to it
        name = c.removeprefix("excess_")
        parts = table[f"excess_pos_{name}"].astype(float) + table[f"excess_neg_{name}"].astype(float)
        np.testing.assert_allclose(parts[credited], table.loc[credited, c].astype(float), atol=1e-9)
    assert table.loc[354, "excess_filler"] > 0.05
    # the same A_final as `explain` (the Rollout view's function) gives
    result = explain.explain_rollout(handle, "demo", 354, "grpo")
    labels = np.asarray(token_classes.labels(result.batch, result.row))
    magnitude = np.abs(np.asarray(result.final, dtype=np.float64))
    filler = magnitude[labels == "filler"].sum() / magnitude.sum()
    assert table.loc[354, "share_filler"] == pytest.approx(filler, abs=1e-5)
    assert table.loc[354, "excess_filler"] == pytest.approx(filler - (labels == "filler").mean(), abs=1e-5)
    channel = explorer.rollout_table(
        handle, "demo", ExplorerQuery(estimator="grpo", limit=None, credit="channel")
    )
    alone = channel.rows.set_index("rollout_id")
    assert abs(alone.loc[354, "excess_filler"]) < 1e-6  # grpo on task alone: the same A on every token
