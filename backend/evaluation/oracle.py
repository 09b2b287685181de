"""Estimators judged against a known truth: the synthetic oracle (`oracle_bench`, the table of
`creditlens oracle-bench`; `oracle_table`, the Oracle view's table of a stored synthetic run) and, on real
runs, the Monte Carlo teacher (`teacher_agreement`). The task/single/split pipelines are defined once
(`pipelines`) and shared by both oracle tables; the metrics themselves are `backend.evaluation.metrics`.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np
import pandas as pd
import torch

from backend.core.batch import RolloutBatch
from backend.credit import channels
from backend.estimators import registry
from backend.estimators.registry import estimate
from backend.evaluation.metrics import METRICS, average_ranks, batch_metrics, spearman, summarize
from backend.evaluation.synthetic import OracleConfig, generate, oracle_batch, to_batch
from backend.models.resample import segment_advantages


def bench_estimators() -> list[str]:
    """Registered estimators that need no model and no Monte Carlo resampling, and whose needs an
    oracle run meets (e.g. `entropy_drop_mask` wants old entropies, which it lacks)."""
    probe = oracle_batch(seed=0, prompts=2, group=2)
    return [n for n in registry.supported(probe) if registry.get(n).model_free]


def model_bound_estimators() -> list[str]:
    """Registered estimators that need the policy model (cached model scores or Monte Carlo resampling):
    the oracle bench and the Oracle view say "needs a model" for them instead of a row."""
    return [n for n in registry.names() if not registry.get(n).model_free]


def bench_spec(label: str) -> tuple[str, dict[str, str]]:
    """A bench row label, "name" or "name:key=value,key=value" (a variant with options), as (name,
    overrides); a pair without "=" raises ValueError quoting the label."""
    name, _, rest = label.partition(":")
    overrides = {}
    for pair in filter(None, rest.split(",")):
        key, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"{label!r}: expected name:key=value,key=value")
        overrides[key.strip()] = value.strip()
    return name, overrides


def pipelines(label: str, styled: bool = True):
    """The three ways of computing A for estimator `label` (a name or a variant, see `bench_spec`):
    `task(batch) -> A`, `single(batch) -> A`, `split(batch) -> (A, style contribution or None)`.

    task: the estimator on the task score. single (mixed): scores summed first, one estimator; its
    task-only counterpart is exactly the `task` pipeline (a sum of one score), so ΔA = single - task.
    split (mixed): estimator on task and, when `styled`, `span` on style, each group-normalized, then
    summed; `combine` is additive, so A(task+style) - A(task only) is the style contribution it returns.
    """
    name, overrides = bench_spec(label)
    pairs = tuple(overrides.items())

    def task(batch):
        return estimate(name, batch, **overrides).advantages

    def single(batch):
        return channels.mixed_baseline(
            batch, {c: 1.0 for c in batch.scores}, estimator=name, estimator_config=pairs
        )

    def split(batch):
        specs = {
            "task": channels.ChannelSpec(
                "task", "estimator", estimator=name, estimator_config=pairs, normalization="group"
            )
        }
        if styled:
            specs["style"] = channels.ChannelSpec("style", "span", normalization="group")
        result = channels.combine(batch, specs)
        return result.final, result.contributions.get("style")

    return task, single, split


def _bench_seed(seed: int, prompts: int, group: int, names: list[str], threads: int | None = None) -> dict:
    """One seed of the bench: {"metrics": {key: {metric: v}}, "seconds": {key: s}, "failed": {name: msg}}."""
    if threads is not None:
        torch.set_num_threads(threads)
    sample = generate(seed, OracleConfig(prompts=prompts, group=group))
    mixed = to_batch(sample)
    task_only = to_batch(sample, channels=("task",))
    credit_ranks = average_ranks(mixed.extras["true_credit"][mixed.response_mask])
    out: dict = {"seed": seed, "metrics": {}, "seconds": {}, "failed": {}}
    for name in names:
        run_task, run_single, run_split = pipelines(name)
        rows = []
        try:
            clock = time.perf_counter()
            a_task = run_task(task_only)
            rows.append((("task", "single", name), a_task, None, time.perf_counter() - clock))
            clock = time.perf_counter()
            a_single = run_single(mixed)
            rows.append((("mixed", "single", name), a_single, a_single - a_task, time.perf_counter() - clock))
            clock = time.perf_counter()
            a_split, style_part = run_split(mixed)
            rows.append((("mixed", "split", name), a_split, style_part, time.perf_counter() - clock))
        except Exception as exc:  # noqa: BLE001 - one estimator that cannot run must not sink the table
            out["failed"][name] = f"{type(exc).__name__}: {exc}"
            continue
        for key, adv, delta, elapsed in rows:
            out["metrics"][key] = batch_metrics(adv, mixed, delta, credit_ranks)
            out["seconds"][key] = elapsed
    return out


def oracle_bench(
    seeds: int = 20,
    prompts: int = 500,
    group: int = 8,
    estimators: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
) -> list[dict]:
    """Run every model-free estimator on `seeds` oracle seeds in the `task` and `mixed` settings.

    Rows: setting `task` (task reward only, pipeline `single`) and setting `mixed` (task + style) in
    pipelines `single` (scores summed, one estimator) and `split` (estimator on task, style span
    projected locally, channels group-normalized separately, summed with beta = 1). style_recall uses
    the counterfactual ΔA = A(task+style) - A(task only) of the same pipeline. Each row has the
    metric means over seeds, `<metric>_std`, `seeds`, and `seconds` (estimator time of that row,
    summed over seeds). An estimator that raises on any seed (e.g. it needs fields the oracle does
    not have) is reported through `progress` and left out.

    workers > 1 runs seeds in that many spawned processes with one torch thread each (coarse
    parallelism beats intra-op threads on a small, shared machine); workers = 1 stays in-process.
    """
    names = list(estimators) if estimators is not None else bench_estimators()
    say = progress or (lambda message: None)
    if estimators is None:
        say(
            "oracle-bench: not run (need a model or resampling; the synthetic oracle has no policy): "
            + ", ".join(model_bound_estimators())
        )
    results: list[dict] = []
    if workers <= 1 or seeds == 1:
        for seed in range(seeds):
            results.append(_bench_seed(seed, prompts, group, names))
            say(f"oracle-bench: seed {seed + 1}/{seeds} done")
    else:
        context = multiprocessing.get_context("spawn")  # never fork a process that may hold torch threads
        with ProcessPoolExecutor(max_workers=min(workers, seeds), mp_context=context) as pool:
            futures = [pool.submit(_bench_seed, seed, prompts, group, names, 1) for seed in range(seeds)]
            for done, future in enumerate(as_completed(futures), start=1):
                results.append(future.result())
                say(f"oracle-bench: {done}/{seeds} seeds done")
        results.sort(key=lambda r: r["seed"])  # same sums in the same order as in-process
    failed: dict[str, str] = {}
    for result in results:
        for name, message in result["failed"].items():
            failed.setdefault(name, message)
    for name, message in failed.items():
        say(f"oracle-bench: skipped {name}: {message}")
    out = []
    for name in names:
        if name in failed:
            continue
        for key in (("task", "single", name), ("mixed", "single", name), ("mixed", "split", name)):
            per_seed = [r["metrics"][key] for r in results]
            out.append(
                {
                    "setting": key[0],
                    "pipeline": key[1],
                    "estimator": name,
                    **summarize(per_seed),
                    "seeds": len(per_seed),
                    "seconds": round(sum(r["seconds"][key] for r in results), 3),
                }
            )
    return out


def format_table(rows: list[dict]) -> str:
    """A fixed-width text table: one line per (setting, pipeline, estimator), `mean ± std` cells."""
    short = {
        "key_recall": "key_rec",
        "key_precision": "key_prec",
        "auroc": "auroc",
        "filler_mass": "filler",
        "style_recall": "style_rec",
        "sign_accuracy": "sign_acc",
        "spearman": "spearman",
    }
    header = f"{'setting':<7} {'pipeline':<8} {'estimator':<18} "
    header += " ".join(f"{short[m]:>13}" for m in METRICS)
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = []
        for m in METRICS:
            mean, std = row[m], row.get(f"{m}_std", math.nan)
            cells.append(f"{'-':>13}" if math.isnan(mean) else f"{mean:>6.3f}±{std:<6.3f}")
        lines.append(f"{row['setting']:<7} {row['pipeline']:<8} {row['estimator']:<18} " + " ".join(cells))
    return "\n".join(lines)


def default_workers() -> int:
    """Processes for `oracle_bench` seeds by default: the CPUs, at most two."""
    return max(1, min(2, os.cpu_count() or 1))


def jsonable_rows(rows: list[dict]) -> list[dict]:
    """Metric rows with NaN as None (JSON has no NaN)."""

    def clean(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    return [{k: clean(v) for k, v in row.items()} for row in rows]


def has_oracle(batch: RolloutBatch) -> bool:
    return all(k in batch.extras and batch.extras[k].dim() == 2 for k in ("key_mask", "true_credit"))


def oracle_table(batch: RolloutBatch, estimators: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Section-9 credit metrics per estimator on a synthetic run, in the mixed/single (scores summed,
    one estimator) and mixed/split (channels projected and normalized separately) pipelines.

    Returns (rows: pipeline, estimator, one column per metric; errors: one line per estimator that failed).
    """
    styled = "style" in batch.scores and "style" in batch.token_rewards
    rows, errors = [], []
    for name in estimators:
        run_task, run_single, run_split = pipelines(name, styled)
        try:
            task_only = run_task(batch)  # the estimator on the task score alone
            single = run_single(batch)
            rows.append(
                {
                    "pipeline": "single",
                    "estimator": name,
                    **batch_metrics(single, batch, single - task_only if styled else None),
                }
            )
            final, style_part = run_split(batch)
            rows.append({"pipeline": "split", "estimator": name, **batch_metrics(final, batch, style_part)})
        except Exception as exc:  # noqa: BLE001 - one estimator's failure must not hide the others
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    return pd.DataFrame(rows, columns=["pipeline", "estimator", *METRICS]), errors


def teacher_agreement(
    batch: RolloutBatch,
    advantages: dict[str, torch.Tensor],
    mc_values: pd.DataFrame,
    outcome_channel: str = "task",
) -> pd.DataFrame:
    """On real runs: agreement of each estimator with the Monte Carlo teacher where resampled values exist.

    mc_values: rows (rollout_id, pos, value) from `Store.resample_values`. The teacher's per-token
    advantages are the segment differences of V̂ (docs/estimators.md section 5); compared tokens are those of
    rollouts with at least one valued position. Returns rows (estimator, spearman, sign_accuracy, tokens).
    """
    teacher = np.zeros(tuple(batch.response_mask.shape), dtype=np.float32)
    judged = np.zeros_like(teacher, dtype=bool)
    rows_of = {int(r): i for i, r in enumerate(batch.rollout_ids.tolist())}
    scores = batch.scores.get(outcome_channel)
    for rid, part in mc_values.groupby("rollout_id"):
        i = rows_of.get(int(rid))
        if i is None:
            continue
        L = int(batch.lengths[i])
        outcome = float(scores[i]) if scores is not None else 0.0
        teacher[i, :L] = segment_advantages(dict(zip(part["pos"], part["value"], strict=True)), L, outcome)
        judged[i, int(part["pos"].min()) : L] = True
    out = []
    target = torch.from_numpy(teacher[judged])
    for name, adv in advantages.items():
        a = adv.detach().cpu()[torch.from_numpy(judged)]
        nonzero = target != 0
        out.append(
            {
                "estimator": name,
                "spearman": spearman(a, target) if a.numel() > 1 else math.nan,
                "sign_accuracy": float(
                    (torch.sign(a[nonzero]) == torch.sign(target[nonzero])).double().mean()
                )
                if bool(nonzero.any())
                else math.nan,
                "tokens": int(judged.sum()),
            }
        )
    return pd.DataFrame(out, columns=["estimator", "spearman", "sign_accuracy", "tokens"])
