"""The checkpoint route of "did the credit land": each step's rollouts scored with the checkpoint the run
names for the policy after that step's update (`step_after_checkpoints`, attached at import from the TRL
recorder's `meta.checkpoint_after`), cached in table `landed_logprobs` for `backend.credit.landed`.

Teacher forcing as `creditlens score` does it (`Engine.score`: the response given its prompt ids, positions
counting real tokens, as `generate` and the recorder count them). Logprobs at temperature 1: the recorder
scores at the trainer's temperature, so the two routes agree where that is 1 (the bundled runs). On a GPU
with vLLM installed, `engine="vllm"` reads them from vLLM's `prompt_logprobs` instead
(`VLLMEngine.prompt_logprobs`, checked by bench/gpu_check.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from backend.core.errors import InputError
from backend.models.engine import EngineName
from backend.models.factory import load_engine
from backend.store import StoreHandle
from backend.store.landed_queries import after_checkpoints, cache_after, cached_after


@dataclass
class Scoring:
    """What one `score_after` call did: rollouts scored per checkpoint, rollouts already cached, notes."""

    scored: dict[str, int] = field(default_factory=dict)
    cached: int = 0
    notes: list[str] = field(default_factory=list)


def score_after(
    handle: StoreHandle,
    run: str,
    steps: list[int] | None = None,
    *,
    engine: EngineName = "transformers",
    device: str | None = None,
    allow_pickle: bool = False,
    chunk_size: int = 16,
    refresh: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> Scoring:
    """Score the rollouts of `steps` (None: every step with an after-update checkpoint) under their step's
    after-update checkpoint and cache the logprobs; rollouts cached under that same folder are skipped
    unless `refresh`. InputError when the run names no such checkpoint for the asked steps."""
    with handle.read() as store:
        if not store.has_run(run):
            raise InputError(f"no run named {run!r} (see `creditlens runs`)")
        folders = after_checkpoints(store, run)
        cached = {} if refresh else cached_after(store, run)
        rows = store.con.execute(
            "SELECT rollout_id, step, prompt_ids, token_ids FROM rollouts WHERE run_id = ? "
            "ORDER BY rollout_id",
            [store.run_id(run)],
        ).fetchall()
    wanted = sorted(folders) if steps is None else sorted({int(s) for s in steps})
    missing = [s for s in wanted if s not in folders]
    if not folders or (steps is not None and missing):
        which = "any step" if not folders else f"step {missing[0]}"
        how = (
            "; nor has it the recorder's logprobs_after: a run recorded by "
            "creditlens.integrations.trl.record "
            "has both (docs/trl.md)"
            if not folders
            else ""
        )
        raise InputError(
            f"run {run!r} names no after-update checkpoint for {which} (the TRL recorder's "
            f"meta.checkpoint_after, attached at import when the folder exists){how}"
        )
    out = Scoring()
    for step in wanted:
        folder = folders[step]
        todo = [r for r in rows if int(r[1]) == step]
        fresh = [r for r in todo if not (int(r[0]) in cached and cached[int(r[0])][0] == folder)]
        out.cached += len(todo) - len(fresh)
        if not fresh:
            continue
        if any(r[2] is None for r in fresh):
            raise InputError(
                f"run {run!r}: rollout {next(int(r[0]) for r in fresh if r[2] is None)} has no prompt_ids; "
                "the checkpoint route scores the token ids the policy saw"
            )
        model = load_engine(folder, engine=engine, device=device, allow_pickle=allow_pickle)
        prompts = [list(map(int, r[2])) for r in fresh]
        responses = [list(map(int, r[3])) for r in fresh]
        if model.name == "vllm":
            logprobs = model.prompt_logprobs(prompts, responses)
        else:
            scored = model.score(
                prompts,
                responses,
                chunk_size=chunk_size,
                progress=None
                if progress is None
                else (lambda done, total, s=step: progress(f"step {s}", done, total)),
            )
            logprobs = [s.logprobs for s in scored]
        with handle.write() as store:
            cache_after(
                store,
                run,
                folder,
                {int(r[0]): np.asarray(v, np.float32) for r, v in zip(fresh, logprobs, strict=True)},
            )
        out.scored[folder] = len(fresh)
    return out
