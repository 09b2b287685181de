"""The engine interface shared by the transformers and vLLM backends (`load_engine`: `factory`).

Conventions (both engines):
- token ids are plain `list[int]`; a prefix is the prompt ids followed by the response ids kept so far;
- reported logprobs and entropies are those of the model's raw next-token distribution (temperature 1,
  no top-p), so teacher-forced scoring and sampling report the same numbers for the same tokens;
- sample k of a call gets its own seed (`seed + k`, k counting prefix-major), stored with the suffix,
  so any suffix can be regenerated alone;
- the end-of-sequence token ends a suffix and is not part of its token ids.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from backend.core.errors import InputError
from backend.ingest.tokenize import token_labels
from backend.models.loading import EngineUnavailable

Progress = Callable[[int, int], None]
"""progress(done, total): called after each chunk."""
Cancel = Callable[[], bool]
"""cancel() -> True to stop after the current chunk; a `threading.Event`'s `is_set` fits."""

EngineName = Literal["auto", "transformers", "vllm"]


@dataclass
class Scored:
    """Teacher-forced scores of one response.

    logprobs: (L,) float32, log p(y_t | x, y_<t)
    entropies: (L,) float32, entropy of the distribution y_t was drawn from (nan where unknown)
    hidden: (L, H) float32 last-layer states that predict y_t, or None
    """

    logprobs: np.ndarray
    entropies: np.ndarray
    hidden: np.ndarray | None = None


@dataclass
class Sample:
    """One sampled suffix: `token_ids` (without the end token), their logprobs and entropies."""

    prefix_index: int
    sample_index: int
    seed: int
    token_ids: list[int]
    logprobs: list[float]
    entropies: list[float] = field(default_factory=list)
    finished: bool = False
    """True when the end token was drawn (False: cut at max_new_tokens)."""


def sample_seed(seed: int, prefix_index: int, n: int, sample_index: int) -> int:
    return int(seed) + prefix_index * n + sample_index


Job = tuple[int, int, int]
"""One sample to draw: (prefix_index, sample_index, seed)."""


def sampling_jobs(n_prefixes: int, n: int, seed: int, prefix_seeds: Sequence[int] | None = None) -> list[Job]:
    """Every sample of a `generate` call, prefix-major, each with its own seed: `seed + i * n + j`, or
    `prefix_seeds[i] + j` when given (so a prefix draws the same samples whatever shares its call)."""
    if prefix_seeds is not None:
        if len(prefix_seeds) != n_prefixes:
            raise InputError(f"prefix_seeds has {len(prefix_seeds)} seeds for {n_prefixes} prefixes")
        return [(i, j, int(prefix_seeds[i]) + j) for i in range(n_prefixes) for j in range(n)]
    return [(i, j, sample_seed(seed, i, n, j)) for i in range(n_prefixes) for j in range(n)]


def sample_in_chunks(
    jobs: Sequence[Job],
    max_batch: int,
    sample_chunk: Callable[[Sequence[Job]], list[Sample]],
    progress: Progress | None,
    cancel: Cancel | None,
) -> list[Sample]:
    """`sample_chunk` over `jobs`, `max_batch` at a time, checking `cancel()` before each chunk and
    calling `progress` after it. Returns the samples of every finished chunk, ordered by
    (prefix_index, sample_index)."""
    samples: list[Sample] = []
    for begin in range(0, len(jobs), max_batch):
        if cancel is not None and cancel():
            break
        samples.extend(sample_chunk(jobs[begin : begin + max_batch]))
        if progress is not None:
            progress(min(begin + max_batch, len(jobs)), len(jobs))
    samples.sort(key=lambda s: (s.prefix_index, s.sample_index))
    return samples


class Engine:
    """Base class: `score` and `generate`; subclasses set `name`, `model_dir`, `tokenizer`, `device`."""

    name: str = "engine"
    reports_entropies: bool = True
    """False for an engine whose samples carry NaN entropies (vLLM)."""
    model_dir: str = ""
    device: str = "cpu"
    tokenizer = None

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        responses: Sequence[Sequence[int]],
        *,
        chunk_size: int = 16,
        return_hidden: bool = False,
        progress: Progress | None = None,
        cancel: Cancel | None = None,
    ) -> list[Scored]:
        raise NotImplementedError

    def generate(
        self,
        prefixes: Sequence[Sequence[int]],
        n: int = 1,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        *,
        progress: Progress | None = None,
        cancel: Cancel | None = None,
        prefix_seeds: Sequence[int] | None = None,
    ) -> list[Sample]:
        raise NotImplementedError

    # helpers shared by engines -------------------------------------------------------------------
    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(
            list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False
        )

    def token_texts(self, token_ids: Sequence[int]) -> list[str]:
        """Display text per token (readable for byte-level BPE; the rule: `backend.ingest.tokenize`)."""
        return token_labels(self.tokenizer, token_ids, skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @property
    def eos_ids(self) -> set[int]:
        ids = set()
        for source in (
            getattr(self, "generation_config", None),
            getattr(self, "config", None),
            self.tokenizer,
        ):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids


TEMPERATURE_MIN = 0.01
"""Smallest non-zero temperature: vLLM silently raises 0 < T < 0.01 to 0.01
(vllm/sampling_params.py `_MAX_TEMP`), so both engines refuse it instead."""
TEMPERATURE_MAX = 2.0
"""Largest temperature: vLLM's `SamplingParams` refuses T > 2."""
SEED_LIMIT = 2**63
"""Seeds are non-negative and below 2**63 (a torch generator seed; vLLM reads -1 as "random")."""


def check_sampling(
    n: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int = 0,
    n_prefixes: int = 1,
) -> None:
    """The sampling parameters both engines accept, so a run means the same on either of them.

    temperature: 0 (greedy) or in [0.01, 2]; top_p: (0, 1]; seed: an integer with every derived
    per-sample seed (`seed + k`, k < n_prefixes * n) in [0, 2**63). Raises `InputError` naming the
    parameter.
    """
    if not _is_integer(n) or n < 1:
        raise InputError(f"samples must be an integer >= 1, got {n!r}")
    if not _is_integer(max_new_tokens) or max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not _is_real(temperature) or not math.isfinite(temperature):
        raise InputError(f"temperature must be a finite number, got {temperature!r}")
    if temperature != 0 and not TEMPERATURE_MIN <= temperature <= TEMPERATURE_MAX:
        raise InputError(
            f"temperature must be 0 (greedy) or in [{TEMPERATURE_MIN}, {TEMPERATURE_MAX:g}], "
            f"got {temperature}"
        )
    if not _is_real(top_p) or not 0 < top_p <= 1:
        raise InputError(f"top_p must be in (0, 1], got {top_p!r}")
    if not _is_integer(seed):
        raise InputError(f"seed must be an integer, got {seed!r}")
    if seed < 0 or int(seed) + max(int(n_prefixes), 1) * int(n) - 1 >= SEED_LIMIT:
        raise InputError(
            f"seed must be >= 0 with every per-sample seed (seed + k) below 2**63 "
            f"(vLLM reads -1 as a random seed), got {seed}"
        )


def _is_integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def start_token_id(bos_token_id, eos_ids: set[int]) -> int:
    """The token an empty prefix is replaced by: the model's BOS, else its smallest EOS id, else 0."""
    if isinstance(bos_token_id, int):
        return int(bos_token_id)
    return int(min(eos_ids)) if eos_ids else 0


def build_context(prefix: Sequence[int], start_id: int, max_positions: int | None, index: int) -> list[int]:
    """What the model is given for `prefix` (prefix number `index`), by the same rule in both engines.

    An empty prefix becomes `[start_id]` (a token must precede the first drawn one; vLLM also refuses
    an empty prompt). A context with no room left for one new token (`len >= max_positions`) raises
    `InputError`.
    """
    context = list(prefix) if len(prefix) else [int(start_id)]
    if max_positions and len(context) >= max_positions:
        raise InputError(
            f"generate: prefix {index} has {len(context)} tokens, the model takes {max_positions} "
            f"(one position must stay free for a new token)"
        )
    return context


__all__ = [
    "Engine",
    "EngineUnavailable",
    "Sample",
    "Scored",
    "build_context",
    "check_sampling",
    "sample_in_chunks",
    "sample_seed",
    "sampling_jobs",
    "start_token_id",
]
