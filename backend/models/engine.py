"""The engine interface shared by the transformers and vLLM backends, and `load_engine`.

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
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from backend.errors import InputError
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
        """Display text per token, such that their concatenation is the decoded text where possible."""
        return [self.decode([t]) for t in token_ids]

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


def check_sampling(n: int, max_new_tokens: int, temperature: float, top_p: float) -> None:
    if n < 1:
        raise InputError(f"samples must be >= 1, got {n}")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise InputError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise InputError(f"top_p must be in (0, 1], got {top_p}")


def vllm_usable() -> bool:
    """vLLM importable and a CUDA device visible (what `engine="auto"` asks)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def load_engine(
    model_dir: str | os.PathLike,
    engine: EngineName = "auto",
    device: str | None = None,
    allow_pickle: bool = False,
    **kwargs,
) -> Engine:
    """Open a local model folder with the asked engine (auto: vLLM when importable with a GPU).

    Raises `InputError` for a folder that breaks the loading rules (see `backend.models.loading`) and
    `EngineUnavailable` (an `InputError`) when vLLM or a GPU is missing for `engine="vllm"`.
    """
    if engine not in ("auto", "transformers", "vllm"):
        raise InputError(f"unknown engine {engine!r}; choose auto, transformers or vllm")
    if engine == "vllm" or (
        engine == "auto" and (device in (None, "cuda") or str(device).startswith("cuda")) and vllm_usable()
    ):
        from backend.models.vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, allow_pickle=allow_pickle, **kwargs)
    from backend.models.transformers_engine import TransformersEngine

    return TransformersEngine(model_dir, device=device, allow_pickle=allow_pickle, **kwargs)


__all__ = [
    "Engine",
    "EngineUnavailable",
    "Sample",
    "Scored",
    "load_engine",
    "sample_in_chunks",
    "sample_seed",
    "sampling_jobs",
    "vllm_usable",
]
