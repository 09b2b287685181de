"""Where a run's independent pieces (an estimate's chunks, an import's blocks) are computed: in this process,
in worker processes of this machine, or as tasks on a Ray cluster. Results always come back in the order
of the pieces, so whatever runs them, the one consumer (a writer, a Parquet file) sees the same sequence.

`Workers` says how: `count` processes (1: in this process, nothing started) and `ray` (an address, or
`auto` / `local:N`; then `count` is the number of tasks kept in flight, default one per cluster CPU). A
command line sets it for the whole command with `using` (its `--workers` and `--ray`); functions that take
a `workers=` argument use it when given, else the command's (`current`), else one process.
"""

from __future__ import annotations

import contextvars
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from backend.core.errors import InputError


def machine_cores() -> int:
    """The cores this process may run on (a container's or `taskset`'s limit, not the host's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Workers:
    """How a whole-run job splits: `count` workers (None: the machine's cores but one, or the cluster's CPUs
    under Ray), on Ray at `ray` when given. The default leaves a core to the one writer, which reads back
    and commits every piece: on 2 cores, 2 workers were 0.84x of this process for a 100M-token estimate
    (docs/benchmarks.md), so a 2-core machine stays in this process. `min_tokens`: a smaller run stays in this
    process when `count` was not given: a worker's start (Python, pyarrow, DuckDB and for an estimate torch:
    2-3 CPU s each) and the writer's share made 2 workers slower than 1 on a 3M-token run here."""

    count: int | None = None
    ray: str | None = None
    min_tokens: int = 20_000_000

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 1:
            raise InputError(f"--workers: must be at least 1, got {self.count}")

    def for_job(self, pieces: int, tokens: int | None = None) -> int:
        """How many workers a job of `pieces` independent pieces (of about `tokens` tokens in all) gets: never
        more than its pieces; 1 (this process) for a small job when the count was left to the default."""
        if pieces <= 1:
            return 1
        if self.count is None and self.ray is None and (tokens is None or tokens < self.min_tokens):
            return 1
        count = self.count
        if count is None:  # the cluster's CPUs, or this machine's cores but the writer's
            count = _ray_cpus(self.ray) if self.ray else machine_cores() - 1
        return max(1, min(count, pieces))


IN_PROCESS = Workers(count=1)
_CURRENT: contextvars.ContextVar[Workers] = contextvars.ContextVar("credit_lens_workers", default=IN_PROCESS)


def current() -> Workers:
    """The workers of the command running now (`using`); one process outside one."""
    return _CURRENT.get()


@contextmanager
def using(workers: Workers) -> Iterator[None]:
    """Whole-run jobs inside the block split as `workers` says (a command's `--workers` / `--ray`)."""
    token = _CURRENT.set(workers)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def ordered_map(
    fn: Callable[[Any], Any], items: Iterable[Any], workers: Workers, count: int, in_flight: int = 2
) -> Iterator[Any]:
    """`fn(item)` for each item, yielded in the items' order. `count` 1 without Ray: in this process, one at
    a time. Otherwise `fn` runs in `count` spawned processes of this machine (or as Ray tasks), at most
    `in_flight` items per worker ahead of the consumer, so memory stays bounded by the workers, not the run.
    `fn` must be a module-level function and items and results picklable."""
    if workers.ray is not None:
        yield from _ray_map(fn, items, workers.ray, count, in_flight)
        return
    if count <= 1:
        yield from map(fn, items)
        return
    # spawn, never fork: the parent may hold torch's and DuckDB's threads, which a forked child would lack
    context = multiprocessing.get_context("spawn")
    pending: list[Future] = []
    source = iter(items)
    with ProcessPoolExecutor(max_workers=count, mp_context=context, initializer=_worker_start) as pool:
        try:
            for item in source:
                pending.append(pool.submit(fn, item))
                if len(pending) >= count * in_flight:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        except BaseException:  # an error or Ctrl-C: what has not started never starts
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _worker_start() -> None:
    """A local worker leaves Ctrl-C to the process that started it (which stops the pool and says so in one
    line; the terminal sends SIGINT to the whole process group), then computes on one thread."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _one_thread()


def _one_thread() -> None:
    """A worker computes one piece on one core: the split is the parallelism (torch's own intra-op threads in
    every worker would oversubscribe the cores). Set before torch loads (an import worker never loads it)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # a Ray worker that ran torch before
        sys.modules["torch"].set_num_threads(1)


def connect_ray(address: str):
    """Connect to a Ray cluster (`auto`, an address `host:port` or `ray://host:10001`), or start one in this
    process (`local:N`, N CPUs). The driver's checkout goes on the workers' PYTHONPATH, so a local cluster
    needs nothing installed (a remote one needs Credit Lens's requirements on its nodes)."""
    import ray  # noqa: PLC0415 - heavy, and only for --ray

    if ray.is_initialized():
        return ray
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    kind, _, arg = address.partition(":")
    if kind == "local":
        try:
            cpus = int(arg) if arg else None
        except ValueError:
            raise InputError(f"--ray {address!r}: expected local:N with an integer N") from None
        # A local cluster's processes inherit this one's environment: the checkout goes on their PYTHONPATH
        # there, not in a runtime_env (with one, Ray starts new workers for it: seconds per first call).
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = pythonpath
        try:
            # address="local": a new cluster even where `ray start` left a cluster's address file behind
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved
        return ray
    try:
        ray.init(address=address, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise InputError(
            f"--ray {address!r}: cannot connect to a Ray cluster ({str(exc).splitlines()[0]})"
        ) from None
    return ray


def _ray_cpus(address: str | None) -> int:
    ray = connect_ray(address or "auto")
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _ray_map(
    fn: Callable[[Any], Any], items: Iterable[Any], address: str, count: int, in_flight: int
) -> Iterator[Any]:
    """`ordered_map` on Ray: one task per item (one CPU each), at most `count * in_flight` in flight; the
    items travel to the workers and the results back through Ray's object store."""
    ray = connect_ray(address)
    remote = ray.remote(num_cpus=1)(_in_task)
    pending: list = []
    try:
        for item in items:
            pending.append(remote.remote(fn, item))
            if len(pending) >= count * in_flight:
                yield ray.get(pending.pop(0))
        while pending:
            yield ray.get(pending.pop(0))
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def _in_task(fn: Callable[[Any], Any], item: Any) -> Any:
    """A Ray task: one core, like a local worker (`_one_thread`), then `fn(item)`."""
    _one_thread()
    return fn(item)
