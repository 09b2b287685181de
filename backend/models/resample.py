"""Suffix resampling (docs/estimators.md section 5): Monte Carlo values V̂(s_t) at chosen positions.

Position t of a response keeps the prompt and the response tokens y_<t and samples M suffixes from
the model; each completed text is scored with the run's verifier and

    V̂(s_t) = mean_m R(x, y_<t, ỹ^(m)),   stderr = std_m(R) / sqrt(M)   (sample std, ddof=1).

All positions × M samples go to the engine in one `generate` call (the engine batches them), so the
cost is a few batched decoding passes rather than positions × M sequential ones. A progress callback
and a cancel check are passed through; a cancelled run keeps every finished sample and reports the
positions it reached with their smaller n.

A stored rollout, and an agent run's episodes through its tool loop: `backend.models.agent_resample`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from backend.core.errors import InputError
from backend.estimators import functional as F
from backend.models.engine import Cancel, Engine, Progress
from backend.rewards import get_verifier, run_verifier


@dataclass
class PositionValue:
    pos: int
    value: float
    stderr: float
    """nan when n < 2."""
    n: int

    def to_json(self) -> dict:
        return {
            "pos": self.pos,
            "value": self.value,
            "stderr": None if math.isnan(self.stderr) else self.stderr,
            "n": self.n,
        }


@dataclass
class SuffixSample:
    pos: int
    sample_idx: int
    seed: int
    suffix_ids: list[int]
    suffix_text: str
    reward: float
    turns: list[dict] = field(default_factory=list)
    """The suffix's transcript through a tool loop: {role, text} per turn (the tool's answers included);
    empty for a policy-only suffix."""

    def to_json(self) -> dict:
        out = {"pos": self.pos, "sample_idx": self.sample_idx, "seed": self.seed, "reward": self.reward}
        return {**out, "suffix_text": self.suffix_text, "turns": self.turns}


@dataclass
class ResampleResult:
    positions: list[PositionValue]
    samples: list[SuffixSample]
    tokens: int
    """Suffix tokens generated."""
    seconds: float
    engine: str
    model: str
    cancelled: bool = False
    requested: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "positions": [p.to_json() for p in self.positions],
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "cancelled": self.cancelled,
        }

    def table(self):
        """The samples as a pandas DataFrame with the columns `Store.save_resample` takes."""
        return pd.DataFrame(
            {
                "pos": [s.pos for s in self.samples],
                "sample_idx": [s.sample_idx for s in self.samples],
                "seed": [s.seed for s in self.samples],
                "suffix_ids": [list(s.suffix_ids) for s in self.samples],
                "suffix_text": [s.suffix_text for s in self.samples],
                "reward": [s.reward for s in self.samples],
                "engine": [self.engine] * len(self.samples),
                "model": [self.model] * len(self.samples),
            }
        )


def task_results(
    tasks, per_task: list[list[SuffixSample]], started: float, engine, M: int
) -> list[ResampleResult]:
    """One result per teacher task (its `positions`) from the samples drawn for it, with the batch's seconds
    shared out; a task with fewer than positions × M samples was cancelled."""
    seconds = (time.perf_counter() - started) / max(len(tasks), 1)
    return [
        ResampleResult(
            position_values(samples),
            samples,
            sum(len(x.suffix_ids) for x in samples),
            seconds,
            engine.name,
            str(engine.model_dir),
            cancelled=len(samples) < len(task.positions) * M,
            requested=list(task.positions),
        )
        for task, samples in zip(tasks, per_task, strict=True)
    ]


def position_values(samples: Sequence[SuffixSample]) -> list[PositionValue]:
    """V̂ and its standard error per position from the suffix rewards."""
    by_pos: dict[int, list[float]] = {}
    for s in samples:
        by_pos.setdefault(s.pos, []).append(s.reward)
    out = []
    for pos in sorted(by_pos):
        rewards = np.asarray(by_pos[pos], dtype=np.float64)
        stderr = float(rewards.std(ddof=1) / math.sqrt(len(rewards))) if len(rewards) > 1 else math.nan
        out.append(PositionValue(pos, float(rewards.mean()), stderr, len(rewards)))
    return out


def check_positions(positions: Sequence[int], length: int) -> list[int]:
    out = sorted({int(p) for p in positions})
    bad = [p for p in out if p < 0 or p > length]
    if bad:
        raise InputError(f"positions {bad} are outside the response (0..{length})")
    if not out:
        raise InputError("no positions to resample; give --positions or --suggest")
    return out


def resample(
    engine: Engine,
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    positions: Sequence[int],
    *,
    samples: int = 8,
    verifier: str | Callable = "answer_match",
    ground_truth=None,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> ResampleResult:
    """Sample `samples` suffixes at every position and value each position with the verifier.

    positions: indices t into the response, 0 <= t <= L (t keeps y_<t).
    max_new_tokens: default twice the response length plus 16 (enough to finish a similar answer).
    cancel: a callable or a `threading.Event`; checked between engine chunks.
    """
    token_ids = list(token_ids)
    positions = check_positions(positions, len(token_ids))
    if samples < 1:
        raise InputError(f"samples must be >= 1, got {samples}")
    verify = get_verifier(verifier) if isinstance(verifier, str) else verifier
    verifier_name = verifier if isinstance(verifier, str) else getattr(verifier, "__name__", "verifier")
    if max_new_tokens is None:
        max_new_tokens = 2 * len(token_ids) + 16
    should_stop = cancel.is_set if hasattr(cancel, "is_set") else cancel
    prefixes = [list(prompt_ids) + token_ids[:pos] for pos in positions]
    start = time.perf_counter()
    drawn = engine.generate(
        prefixes,
        n=samples,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        progress=progress,
        cancel=should_stop,
    )
    suffixes = []
    for s in drawn:
        pos = positions[s.prefix_index]
        text = engine.decode(token_ids[:pos] + s.token_ids)
        reward = run_verifier(verify, text, ground_truth, verifier_name)
        suffixes.append(
            SuffixSample(pos, s.sample_index, s.seed, list(s.token_ids), engine.decode(s.token_ids), reward)
        )
    seconds = time.perf_counter() - start
    return ResampleResult(
        positions=position_values(suffixes),
        samples=suffixes,
        tokens=sum(len(s.suffix_ids) for s in suffixes),
        seconds=seconds,
        engine=engine.name,
        model=str(engine.model_dir),
        cancelled=len(drawn) < len(positions) * samples,
        requested=positions,
    )


# position suggestions --------------------------------------------------------------------------------
def suggest_entropy(entropies: Sequence[float], k: int = 5) -> list[int]:
    """The k positions whose token was drawn from the highest-entropy distribution (ascending order)."""
    values = np.asarray(entropies, dtype=np.float64)
    values = np.where(np.isfinite(values), values, -np.inf)
    k = max(0, min(int(k), len(values)))
    top = np.argsort(-values, kind="stable")[:k]
    return sorted(int(t) for t in top)


def suggest_steps(tokens: Sequence[str], include_start: bool = True) -> list[int]:
    """Step boundaries: position 0 (with `include_start`) and the state right after each line's end.

    Tokenizers put a newline in different places: alone or ending a token ("\n", ".\n": the next line
    starts at the next token, t + 1), or leading the next line's first word (the simple tokenization's
    "\n8", some subword merges): then the line ended just before that token, at t."""
    positions = [0] if include_start else []
    for t, tok in enumerate(tokens or []):
        if "\n" not in tok:
            continue
        if tok.rsplit("\n", 1)[1].strip():  # the next line's text starts inside this token
            positions.append(t)
        elif t + 1 < len(tokens):
            positions.append(t + 1)
    return sorted(set(p for p in positions if include_start or p > 0))


def parse_suggestion(spec: str, tokens: Sequence[str], entropies: Sequence[float] | None) -> list[int]:
    """`entropy:K` or `steps` (the CLI's --suggest): the same positions as the Resample view's
    suggestion buttons (`suggested_positions`)."""
    if spec == "steps":
        return suggested_positions("steps", tokens, entropies)
    if spec.startswith("entropy"):
        _, _, k = spec.partition(":")
        try:
            count = int(k or 5)
        except ValueError as exc:
            raise InputError(f"--suggest {spec!r}: expected entropy:K with an integer K") from exc
        if entropies is None or not len(entropies):
            raise InputError(
                "--suggest entropy needs entropies; fill them with `creditlens score --model DIR`"
            )
        return suggest_entropy(entropies, count)
    raise InputError(f"--suggest {spec!r}: choose entropy:K or steps")


def suggested_positions(kind: str, tokens: list[str], entropies, k: int = 5) -> list[int]:
    """Positions to resample: `entropy` (top-k entropy) or `steps` (the states right after each line
    that ends a reasoning step; position 0, the start, is not a step end)."""
    if kind == "entropy":
        if entropies is None:
            return []
        return suggest_entropy(list(entropies), k)
    return [p for p in suggest_steps(list(tokens), include_start=False) if p < len(tokens)]


# MC teacher ------------------------------------------------------------------------------------------
def segment_advantages(values: dict[int, float], length: int, outcome: float) -> np.ndarray:
    """Per-token advantages from valued positions: tokens in [t_k, t_{k+1}) get V̂(t_{k+1}) − V̂(t_k).

    The last segment ends at the observed outcome; tokens before the first valued position get 0.
    Returns (L,) float32.
    """
    if length <= 0:
        return np.zeros(max(length, 0), dtype=np.float32)
    points = [(int(p), float(value)) for p, value in values.items() if 0 <= p < length]
    where = torch.tensor([p for p, _ in points], dtype=torch.long)
    valued = torch.zeros((1, length), dtype=torch.bool)
    valued[0, where] = True
    v = torch.zeros((1, length), dtype=torch.float64)  # float64: the same sums as plain Python floats
    v[0, where] = torch.tensor([value for _, value in points], dtype=torch.float64)
    v_start, v_end = F.segment_values(v, valued, None, torch.tensor([float(outcome)], dtype=torch.float64))
    return (v_end - v_start)[0].numpy().astype(np.float32)


@dataclass
class TeacherResult:
    values: dict[int, PositionValue]
    advantages: np.ndarray
    """(L,) float32 segment advantages (see `segment_advantages`)."""
    result: ResampleResult


def mc_teacher(
    engine: Engine,
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    tokens: Sequence[str],
    *,
    outcome: float,
    samples: int = 8,
    verifier: str | Callable = "answer_match",
    ground_truth=None,
    every_position: bool = False,
    **kwargs,
) -> TeacherResult:
    """V̂ at every step end (or every position) of one rollout, and the advantages they imply."""
    L = len(token_ids)
    positions = list(range(L)) if every_position else [p for p in suggest_steps(tokens) if p < L]
    result = resample(
        engine,
        prompt_ids,
        token_ids,
        positions or [0],
        samples=samples,
        verifier=verifier,
        ground_truth=ground_truth,
        **kwargs,
    )
    values = {p.pos: p for p in result.positions}
    advantages = segment_advantages({p: v.value for p, v in values.items()}, L, outcome)
    return TeacherResult(values, advantages, result)
