"""One chunk of a whole-run estimate, computed the same way wherever it runs: in the process that streams the
run, in a worker process of this machine, or in a Ray task (`backend.core.workers`).

A chunk's work is: read its rollouts (only the fields the estimate needs), compute the estimator on them,
and, when the outputs are saved, the Explorer's credit summaries of those rollouts. A worker reads the store
itself (read-only; DuckDB lets several processes read one file) and hands back the batch, the advantages,
the estimator's notes and the summaries; the streaming process stays the one writer (`chunk_results`
yields the chunks in order, from the workers or computed here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch

from backend.core import workers as work
from backend.core.batch import ALL_CHANNELS, RolloutBatch
from backend.core.chunks import Chunk
from backend.credit import credit_summary
from backend.estimators import fitting, registry
from backend.store import StoreHandle

NOTE_DIAGNOSTICS = ("fallback", "fit_sample", "value_fit_sample")
"""The estimator diagnostics that are notes for the user (text), kept once each in chunk order."""


def with_channel(batch: RolloutBatch, channel: str) -> RolloutBatch:
    """The batch an estimator on `channel` reads: for 'all' (when the run has no channel of that name)
    the per-rollout sum of the channel scores is added as channel 'all' (missing scores skipped)."""
    if channel == ALL_CHANNELS and ALL_CHANNELS not in batch.scores:
        return batch.with_channel_sum(ALL_CHANNELS)
    return batch


@dataclass(frozen=True)
class ChunkJob:
    """What every chunk of one estimate shares: the store file, the run, the estimator and its config, the
    fields to load, and the run's token classes when the credit summaries are made (`classes` not None)."""

    db: str
    run: str
    name: str
    config: Any
    channel: str
    fields: frozenset[str] | None
    memory_limit: str
    classes: tuple[str, ...] | None = None
    definitions: tuple = ()


@dataclass
class ChunkResult:
    """A computed chunk: its batch, advantages (B, T) float32 on the batch's padding, the estimator's notes,
    and its credit summary rows (None when not saving)."""

    batch: RolloutBatch
    advantages: torch.Tensor
    notes: list[str]
    credit: pa.Table | None


def compute(job: ChunkJob, batch: RolloutBatch) -> ChunkResult:
    """The estimator on one loaded chunk, and what is saved of it."""
    result = registry.estimate(job.name, batch, job.config)
    notes = [n for n in (result.diagnostics.get(d) for d in NOTE_DIAGNOSTICS) if isinstance(n, str)]
    advantages = result.advantages
    del result  # the diagnostics ((B, T) tensors for the views) are not kept meanwhile
    credit = None
    if job.classes is not None:
        credit = credit_summary.credit_rows(batch, advantages, job.classes, job.definitions)
    return ChunkResult(batch, advantages, notes, credit)


def load(store, job: ChunkJob, chunk: Chunk, run_fit=None) -> RolloutBatch:
    """The chunk's rollouts with the job's fields (and the run's fitted models, for a second pass)."""
    batch = with_channel(store.load_batch(job.run, fields=job.fields, **chunk.load_args()), job.channel)
    return batch if run_fit is None else dataclasses.replace(batch, run_fit=run_fit)


def run_chunk(work: tuple[ChunkJob, Chunk]) -> ChunkResult:
    """A worker's whole chunk: read from the store file (read-only), then `compute`. Module level, so that
    worker processes and Ray tasks can find it by name."""
    job, chunk = work
    handle = StoreHandle(Path(job.db))
    with handle.read() as store, store.memory_limit(job.memory_limit):
        batch = load(store, job, chunk)
    return compute(job, batch)


def chunk_results(
    handle: StoreHandle,
    job: ChunkJob,
    chunks: list[Chunk],
    split: tuple[work.Workers, int],
    run_fit: fitting.RunFit | None,
    describe: Callable[[int, Chunk, bool], None],
    total: int,
) -> Iterator[ChunkResult]:
    """Each chunk computed (`compute`), in chunk order: by the split's workers, or here with the next
    chunk read by one thread while this one computes."""
    workers, count = split
    second = total - len(chunks)
    if count > 1 or workers.ray is not None:
        results = work.ordered_map(run_chunk, ((job, c) for c in chunks), workers, count)
        for i, (chunk, result) in enumerate(zip(chunks, results, strict=True)):
            describe(second + i, chunk, False)
            yield result
        return
    with (
        handle.read() as store,
        store.memory_limit(job.memory_limit),
        ThreadPoolExecutor(1, thread_name_prefix="credit-lens-read") as reader,
    ):
        if run_fit is not None:
            first_pass(
                run_fit,
                job.name,
                job.config,
                _read_ahead(
                    reader,
                    lambda c: load(store, job, c, run_fit),
                    chunks,
                    lambda i, c: describe(i, c, True),
                ),
            )
        ahead = _read_ahead(
            reader,
            lambda c: load(store, job, c, run_fit),
            chunks,
            lambda i, c: describe(second + i, c, False),
        )
        for batch in ahead:
            yield compute(job, batch)


def _read_ahead(
    reader: ThreadPoolExecutor,
    load: Callable[[Chunk], RolloutBatch],
    chunks: list[Chunk],
    describe: Callable[[int, Chunk], None],
) -> Iterator[RolloutBatch]:
    """The batch of each chunk, the next chunk read by `reader` (one thread) while the caller computes on
    this one: DuckDB and Arrow release the GIL, so reading and computing share the machine's cores. Only
    the reader thread touches the store while the caller holds a batch. `describe` (progress) runs on the
    caller's thread."""
    future = reader.submit(load, chunks[0]) if chunks else None
    for i, chunk in enumerate(chunks):
        describe(i, chunk)
        batch = future.result()
        future = reader.submit(load, chunks[i + 1]) if i + 1 < len(chunks) else None
        yield batch


def first_pass(run_fit: fitting.RunFit, name: str, config: Any, batches: Iterator[RolloutBatch]) -> None:
    """Collect the fits' statistics from every chunk (outputs thrown away) and solve them."""
    for batch in batches:
        registry.estimate(name, batch, config)
    run_fit.solve()
