"""The oracle environment: synthetic rollouts whose token-level credit is known.

Reproduces the setup of the reference write-up's "A Small Synthetic Check". Every response has
`length` = 48 tokens. Four of them are hidden **key** tokens: binary decisions (option a or b) whose
correctness alone sets the task score; the rest is filler. The keys are the model's high-entropy
decisions by construction (their entropy range lies strictly above the filler's). About 30% of the
responses contain one local **style violation** span of 3-6 low-entropy tokens (over-excitement,
repeated punctuation or repetitive filler), which costs a fixed style penalty.

What an estimator may look at (the observables):
    entropies: (B, T) per-token entropy
    logprobs: (B, T) log-probability of the sampled token (surprisal ~ entropy)
    decision_signal: (B, T) extra, a noisy reading of each token's true task credit
    style_flags: (B, T) extra, 1 on the tokens a local style rule flags
    scores: {"task": (B,), "style": (B,)}; token_rewards: {"style": -style_flags}

What only the metrics look at (the oracle):
    true_credit: (B, T) the task credit; on a key, (correct - p) / keys, where p is the prompt's
        probability of getting a decision right, so a response's credits sum to R_task - E[R_task]
    true_style_credit: (B, T) the style score spread evenly over the violation span
    key_mask, style_mask: (B, T) 0/1 floats

Generation is vectorized numpy, seeded per (seed, prompts, group); the same arguments always give
the same run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from backend.core.batch import RolloutBatch

FILLER_WORDS = (
    "the",
    "so",
    "we",
    "then",
    "and",
    "it",
    "is",
    "a",
    "of",
    "to",
    "that",
    "this",
    "now",
    "let",
    "us",
    "check",
    "value",
    "step",
    "term",
    "both",
    "sides",
    "gives",
    "next",
    "here",
    ",",
    ".",
    "\n",
)
# One style-violation vocabulary per kind; a span of length n uses the first n words of its kind.
STYLE_KINDS = ("over_excitement", "repeated_punctuation", "repetitive_filler")
STYLE_WORDS = (
    ("amazing", "!!!", "wow", "so", "awesome", "!!!"),
    ("!!!", "!!", "?!", "!!!", "!!", "!!!!"),
    ("basically", "really", "basically", "really", "basically", "really"),
)


def _vocabulary(keys: int) -> tuple[list[str], dict[str, int]]:
    words = list(FILLER_WORDS)
    for kind in STYLE_WORDS:
        words += [w for w in kind if w not in words]
    words += [f"key{k + 1}{opt}" for k in range(keys) for opt in "ab"]
    return words, {w: i for i, w in enumerate(words)}


@dataclass(frozen=True)
class OracleConfig:
    """The environment's knobs; the defaults are the reference setup."""

    prompts: int = 500
    """Prompts per seed (groups)."""
    group: int = 8
    """Responses per prompt, G."""
    length: int = 48
    """Tokens per response."""
    keys: int = 4
    """Hidden key decisions per response; the task score is the share decided correctly."""
    violation_rate: float = 0.3
    """Probability that a response carries one style-violation span."""
    span_min: int = 3
    span_max: int = 6
    """Violation span length range, inclusive."""
    style_penalty: float = 0.5
    """Style score of a violating response is -style_penalty (0 otherwise)."""
    signal_noise: float = 0.5
    """Standard deviation of the Gaussian noise on the decision signal (the key signal is ±0.5-ish)."""

    def __post_init__(self) -> None:
        if self.prompts < 1 or self.group < 1:
            raise ValueError(f"prompts and group must be >= 1, got {self.prompts}, {self.group}")
        if not 3 <= self.span_min <= self.span_max:
            raise ValueError(f"need 3 <= span_min <= span_max, got {self.span_min}, {self.span_max}")
        if self.keys < 1 or self.keys + self.span_max > self.length:
            raise ValueError(
                f"keys={self.keys} and span_max={self.span_max} do not fit in {self.length} tokens"
            )
        if not 0.0 <= self.violation_rate <= 1.0:
            raise ValueError(f"violation_rate must be in [0, 1], got {self.violation_rate}")


@dataclass(frozen=True)
class OracleSample:
    """One seed of the environment as numpy arrays (B = prompts * group, T = length)."""

    seed: int
    config: OracleConfig
    token_ids: np.ndarray  # (B, T) int64
    group_ids: np.ndarray  # (B,) int64
    entropies: np.ndarray  # (B, T) float32
    logprobs: np.ndarray  # (B, T) float32
    decision_signal: np.ndarray  # (B, T) float32
    style_flags: np.ndarray  # (B, T) float32
    task: np.ndarray  # (B,) float32
    style: np.ndarray  # (B,) float32
    true_credit: np.ndarray  # (B, T) float32
    true_style_credit: np.ndarray  # (B, T) float32
    key_mask: np.ndarray  # (B, T) bool
    style_mask: np.ndarray  # (B, T) bool
    style_kind: np.ndarray  # (B,) int64, -1 without a violation
    difficulty: np.ndarray  # (B,) float32, p of the response's prompt

    @property
    def vocabulary(self) -> list[str]:
        return _vocabulary(self.config.keys)[0]

    def tokens(self) -> list[list[str]]:
        words = np.asarray(self.vocabulary, dtype=object)
        return words[self.token_ids].tolist()


def generate(seed: int, config: OracleConfig | None = None) -> OracleSample:
    """Draw one seed of the environment."""
    cfg = config or OracleConfig()
    rng = np.random.default_rng([int(seed), cfg.prompts, cfg.group, 0x0C4ED17])
    P, G, T, K = cfg.prompts, cfg.group, cfg.length, cfg.keys
    B = P * G
    words, index = _vocabulary(K)
    positions = np.arange(T)[None, :]  # (1, T)

    # Style-violation spans: one contiguous run of 3-6 tokens in ~30% of responses.
    violates = rng.random(B) < cfg.violation_rate  # (B,)
    span_len = np.where(violates, rng.integers(cfg.span_min, cfg.span_max + 1, B), 0)  # (B,)
    span_start = (rng.random(B) * (T - span_len + 1)).astype(np.int64)  # (B,)
    style_mask = (positions >= span_start[:, None]) & (positions < (span_start + span_len)[:, None])  # (B, T)
    style_kind = np.where(violates, rng.integers(0, len(STYLE_KINDS), B), -1)  # (B,)

    # Keys: K distinct positions outside the span, in reading order key1..keyK.
    draw = rng.random((B, T)) + 2.0 * style_mask  # span positions sort last
    key_pos = np.sort(np.argsort(draw, axis=1)[:, :K], axis=1)  # (B, K)
    key_mask = np.zeros((B, T), dtype=bool)
    np.put_along_axis(key_mask, key_pos, True, axis=1)

    # Decisions: prompt difficulty p, each key decided correctly with probability p; which option
    # (a/b) is correct is a property of the prompt, so a token id reveals correctness only in context.
    difficulty = np.repeat(rng.uniform(0.15, 0.85, P), G)  # (B,)
    correct = rng.random((B, K)) < difficulty[:, None]  # (B, K)
    right_option = np.repeat(rng.integers(0, 2, (P, K)), G, axis=0)  # (B, K)
    option = np.where(correct, right_option, 1 - right_option)  # (B, K)

    # Display tokens / ids: filler words, the span's words, keyNa / keyNb.
    filler_ids = np.array([index[w] for w in FILLER_WORDS])
    token_ids = filler_ids[rng.integers(0, len(filler_ids), (B, T))]  # (B, T)
    style_table = np.array([[index[w] for w in kind] for kind in STYLE_WORDS])  # (kinds, span_max)
    offset = np.clip(positions - span_start[:, None], 0, cfg.span_max - 1)  # (B, T)
    style_ids = style_table[np.clip(style_kind, 0, None)[:, None], offset]  # (B, T)
    token_ids = np.where(style_mask, style_ids, token_ids)
    key_table = np.array([[index[f"key{k + 1}{opt}"] for opt in "ab"] for k in range(K)])  # (K, 2)
    np.put_along_axis(token_ids, key_pos, key_table[np.arange(K)[None, :], option], axis=1)

    # Entropy: keys are uncertain decisions, filler is routine, a violation is confidently produced.
    entropies = np.clip(0.05 + rng.gamma(2.0, 0.12, (B, T)), 0.02, 1.0)  # (B, T)
    entropies = np.where(key_mask, rng.uniform(1.2, 2.4, (B, T)), entropies)
    entropies = np.where(style_mask, rng.uniform(0.01, 0.08, (B, T)), entropies)
    logprobs = -entropies * rng.exponential(1.0, (B, T))  # surprisal has mean H

    # Outcomes and the oracle credit.
    task = correct.mean(axis=1)  # (B,)
    key_credit = (correct - difficulty[:, None]) / K  # (B, K)
    true_credit = np.zeros((B, T))
    np.put_along_axis(true_credit, key_pos, key_credit, axis=1)
    style = np.where(violates, -cfg.style_penalty, 0.0)  # (B,)
    true_style_credit = np.where(style_mask, (style / np.maximum(span_len, 1))[:, None], 0.0)  # (B, T)
    decision_signal = K * true_credit + rng.normal(0.0, cfg.signal_noise, (B, T))  # (B, T)

    f32 = np.float32
    return OracleSample(
        seed=int(seed),
        config=cfg,
        token_ids=token_ids.astype(np.int64),
        group_ids=np.repeat(np.arange(P, dtype=np.int64), G),
        entropies=entropies.astype(f32),
        logprobs=logprobs.astype(f32),
        decision_signal=decision_signal.astype(f32),
        style_flags=style_mask.astype(f32),
        task=task.astype(f32),
        style=style.astype(f32),
        true_credit=true_credit.astype(f32),
        true_style_credit=true_style_credit.astype(f32),
        key_mask=key_mask,
        style_mask=style_mask,
        style_kind=style_kind.astype(np.int64),
        difficulty=difficulty.astype(f32),
    )


def to_batch(
    sample: OracleSample,
    channels: tuple[str, ...] = ("task", "style"),
    tokens: bool = True,
    device: str | torch.device = "cpu",
) -> RolloutBatch:
    """The sample as a `RolloutBatch`; `channels=("task",)` drops the style reward (the `task` setting)."""
    B, T = sample.token_ids.shape

    def t(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x))

    scores = {"task": t(sample.task), "style": t(sample.style)}
    token_rewards = {"style": t(-sample.style_flags)}
    return RolloutBatch(
        response_mask=torch.ones((B, T), dtype=torch.bool),
        token_ids=t(sample.token_ids),
        group_ids=t(sample.group_ids),
        rollout_ids=torch.arange(B, dtype=torch.long),
        steps=torch.zeros(B, dtype=torch.long),
        scores={c: scores[c] for c in channels},
        token_rewards={c: token_rewards[c] for c in channels if c in token_rewards},
        logprobs=t(sample.logprobs),
        entropies=t(sample.entropies),
        tokens=sample.tokens() if tokens else None,
        extras={
            "true_credit": t(sample.true_credit),
            "true_style_credit": t(sample.true_style_credit),
            "key_mask": t(sample.key_mask.astype(np.float32)),
            "style_mask": t(sample.style_mask.astype(np.float32)),
            "decision_signal": t(sample.decision_signal),
            "style_flags": t(sample.style_flags),
        },
    ).to(device)


def oracle_batch(
    seed: int = 0,
    prompts: int = 500,
    group: int = 8,
    channels: tuple[str, ...] = ("task", "style"),
    tokens: bool = True,
    **overrides,
) -> RolloutBatch:
    """Shortcut: `to_batch(generate(seed, OracleConfig(prompts=..., group=..., **overrides)))`."""
    sample = generate(seed, OracleConfig(prompts=prompts, group=group, **overrides))
    return to_batch(sample, channels=channels, tokens=tokens)


def native_records(
    seeds: int | list[int] = 1, prompts: int = 500, group: int = 8, **overrides
) -> Iterator[dict]:
    """Native-format records (docs/importing.md) for seeds `range(seeds)` (or the listed seeds), one per
    response.

    Each seed is stored as its own training step, so groups never mix seeds. Per-token oracle fields
    travel in `extras` ({name: list[float]}) so the app can draw them as heatmap rows.
    """
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    cfg = OracleConfig(prompts=prompts, group=group, **overrides)
    for seed in seed_list:
        sample = generate(seed, cfg)
        tokens = sample.tokens()
        per_token = {
            "entropies": sample.entropies.tolist(),
            "logprobs": sample.logprobs.tolist(),
            "token_ids": sample.token_ids.tolist(),
        }
        extras = {
            "true_credit": sample.true_credit.tolist(),
            "true_style_credit": sample.true_style_credit.tolist(),
            "key_mask": sample.key_mask.astype(np.float32).tolist(),
            "style_mask": sample.style_mask.astype(np.float32).tolist(),
            "decision_signal": sample.decision_signal.tolist(),
            "style_flags": sample.style_flags.tolist(),
        }
        task, style = sample.task.tolist(), sample.style.tolist()
        kinds = sample.style_kind.tolist()
        difficulty = sample.difficulty.tolist()
        for i, group_id in enumerate(sample.group_ids.tolist()):
            yield {
                "prompt": f"oracle seed {seed} prompt {group_id}: make {cfg.keys} decisions",
                "response": " ".join(tokens[i]),
                "group": f"{seed}-{group_id}",
                "step": seed,
                "token_ids": per_token["token_ids"][i],
                "tokens": tokens[i],
                "entropies": per_token["entropies"][i],
                "logprobs": per_token["logprobs"][i],
                "rewards": {"task": task[i], "style": style[i]},
                "token_rewards": {"style": [0.0 - f for f in extras["style_flags"][i]]},
                "extras": {name: rows[i] for name, rows in extras.items()},
                "meta": {
                    "seed": seed,
                    "prompt_difficulty": difficulty[i],
                    "style_kind": STYLE_KINDS[kinds[i]] if kinds[i] >= 0 else None,
                },
            }


def _lists(values: np.ndarray, arrow_type=None) -> pa.ListArray:
    """(B, T) rows as an Arrow list column, without python lists."""
    B, T = values.shape
    offsets = pa.array(np.arange(0, (B + 1) * T, T, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), arrow_type))


def native_batches(
    seeds: int | list[int] = 1, prompts: int = 500, group: int = 8, **overrides
) -> Iterator[pa.RecordBatch]:
    """The records of `native_records`, one Arrow record batch per seed, built from the arrays (what
    `creditlens synth` imports: the same rows without a python object per token)."""
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    cfg = OracleConfig(prompts=prompts, group=group, **overrides)
    vocabulary = pa.array(_vocabulary(cfg.keys)[0], pa.string())
    for seed in seed_list:
        sample = generate(seed, cfg)
        B = sample.token_ids.shape[0]
        token_ids = _lists(sample.token_ids)
        tokens = pa.ListArray.from_arrays(token_ids.offsets, pc.take(vocabulary, token_ids.flatten()))
        group_ids = sample.group_ids.tolist()
        extras = {
            "true_credit": sample.true_credit,
            "true_style_credit": sample.true_style_credit,
            "key_mask": sample.key_mask.astype(np.float32),
            "style_mask": sample.style_mask.astype(np.float32),
            "decision_signal": sample.decision_signal,
            "style_flags": sample.style_flags,
        }
        kinds, difficulty = sample.style_kind.tolist(), sample.difficulty.tolist()
        meta = [
            json.dumps(
                {
                    "seed": seed,
                    "prompt_difficulty": difficulty[i],
                    "style_kind": STYLE_KINDS[kinds[i]] if kinds[i] >= 0 else None,
                }
            )
            for i in range(B)
        ]
        yield pa.RecordBatch.from_pydict(
            {
                "prompt": [f"oracle seed {seed} prompt {g}: make {cfg.keys} decisions" for g in group_ids],
                "response": pc.binary_join(tokens, " "),
                "group": [f"{seed}-{g}" for g in group_ids],
                "step": pa.array(np.full(B, seed, dtype=np.int64)),
                "token_ids": token_ids,
                "tokens": tokens,
                "entropies": _lists(sample.entropies),
                "logprobs": _lists(sample.logprobs),
                "rewards": pa.StructArray.from_arrays(
                    [pa.array(sample.task.astype(np.float64)), pa.array(sample.style.astype(np.float64))],
                    names=["task", "style"],
                ),
                "token_rewards": pa.StructArray.from_arrays(
                    [_lists(0.0 - sample.style_flags)], names=["style"]
                ),
                "extras": pa.StructArray.from_arrays(
                    [_lists(v) for v in extras.values()], names=list(extras)
                ),
                "meta": pa.array(meta, pa.string()),
            }
        )


SAMPLE_RUN = {
    "run": "oracle",
    "file": "oracle_run.jsonl",
    "source": "synthetic oracle",
    "model": None,
    "verifier": None,
}
"""Manifest of the bundled oracle run (`sample_runs/oracle_run.json`)."""
SAMPLE_SIZE = {"seeds": 1, "prompts": 24, "group": 8}


def _rounded(value, decimals: int):
    if isinstance(value, float):
        return round(value, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    if isinstance(value, list):
        return [_rounded(v, decimals) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v, decimals) for k, v in value.items()}
    return value


def sample_run_lines(decimals: int = 4) -> Iterator[str]:
    """JSONL lines of the bundled oracle run (1 seed x 24 prompts x 8), floats rounded to `decimals`."""
    for record in native_records(**SAMPLE_SIZE):
        yield json.dumps(_rounded(record, decimals), separators=(",", ":")) + "\n"


def write_sample_run(directory: str) -> None:
    """(Re)write `oracle_run.jsonl` and its manifest `oracle_run.json` in `directory` (sample_runs/)."""
    folder = Path(directory)
    with open(folder / SAMPLE_RUN["file"], "w") as fh:
        fh.writelines(sample_run_lines())
    (folder / "oracle_run.json").write_text(json.dumps(SAMPLE_RUN, indent=1) + "\n")
