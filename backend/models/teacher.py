"""The Monte Carlo teacher job: V̂(s_t) ± stderr at chosen positions of many rollouts of a run.

Consecutive rollouts are grouped until their positions × M suffixes fill one batched engine call
(`TeacherSettings.chunk_rows`, docs/estimators.md section 5). Every suffix's seed depends only on the job's
seed, the rollout id, the position's index and the sample's index, so the same job gives the same
suffixes whether it runs in one process or on a Ray cluster, in any order and however it is grouped.

Storage is atomic per rollout: a rollout's suffixes are written in one transaction marked
`job = 'teacher'`, or not at all. A rerun plans only the rollouts without teacher rows, so a cancelled
or killed job continues where it stopped. On Ray (`ray_address`), one engine lives in each worker
actor (transformers on CPU workers, vLLM on GPU workers), rollouts are the tasks, and the driver
writes the results in rollout order. Chunks of rollouts are the Ray tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from backend.core.errors import InputError
from backend.core.workers import connect_ray
from backend.models.environments import META_KEY as ENVIRONMENT_KEY
from backend.models.environments import get_environment
from backend.models.factory import load_engine, vllm_usable
from backend.models.resample import (
    ResampleResult,
    SuffixSample,
    task_results,
)
from backend.models.teacher_agent import value_episodes
from backend.models.teacher_file import TEACHER_COLUMNS, read_teacher_file  # noqa: F401 - moved; old name
from backend.models.teacher_plan import (  # noqa: F401 - the plan's names, also read from here
    JOB,
    SEED_STRIDE,
    TeacherTask,
    pick_rollouts,
    plan_teacher,
    teacher_positions,
)
from backend.rewards import get_verifier, run_verifier
from backend.store.checkpoints import choices_for

WRITE_EVERY_SECONDS = 2.0

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TeacherSettings:
    """How every rollout is valued (the same on the driver and on each Ray worker)."""

    model_dir: str | None = None
    """A model named on purpose for every rollout; None: each rollout's step checkpoint
    (`backend.store.checkpoints.choose_model`)."""
    samples: int = 16
    verifier: str = "answer_match"
    engine: str = "auto"
    device: str | None = None
    allow_pickle: bool = False
    max_new_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    chunk_rows: int = 256
    """Suffixes per engine call: rollouts are grouped until their positions x M reach this."""
    environment: str | None = None
    """An agent run's environment (`backend.models.environments`): suffixes go through its tool loop."""


# ---- a chunk of rollouts ---------------------------------------------------------------------------------
def chunk_tasks(tasks: Sequence[TeacherTask], samples: int, rows: int) -> list[list[TeacherTask]]:
    """Consecutive rollouts grouped into engine calls of at most `rows` suffixes (a bigger rollout alone)."""
    chunks: list[list[TeacherTask]] = []
    size = 0
    for task in tasks:
        need = len(task.positions) * samples
        if chunks and size + need <= rows:
            chunks[-1].append(task)
            size += need
        else:
            chunks.append([task])
            size = need
    return chunks


def value_rollouts(
    engine, tasks: Sequence[TeacherTask], settings: TeacherSettings, cancel=None
) -> list[ResampleResult]:
    """Every position of every rollout in `tasks` in one batched engine call.

    Position k of a rollout samples with seeds `task.seed + k * M + j`, which is what
    `resample(..., seed=task.seed)` uses for that rollout alone, so grouping rollouts changes no seed.
    A result whose samples were not all drawn (cancelled) has `cancelled=True`. An agent run's rollouts
    with an environment go through its tool loop (`teacher_agent.value_episodes`).
    """
    if settings.environment and any(task.turns for task in tasks):
        return value_episodes(engine, tasks, settings, cancel)
    M = settings.samples
    prefixes, seeds, owner = [], [], []
    for i, task in enumerate(tasks):
        prompt = list(task.prompt_ids) if task.prompt_ids is not None else engine.encode(task.prompt)
        for k, pos in enumerate(task.positions):
            prefixes.append(prompt + list(task.token_ids[:pos]))
            seeds.append(task.seed + k * M)
            owner.append((i, pos))
    start = time.perf_counter()
    drawn = engine.generate(
        prefixes,
        n=M,
        max_new_tokens=settings.max_new_tokens or 64,
        temperature=settings.temperature,
        top_p=settings.top_p,
        prefix_seeds=seeds,
        cancel=cancel,
    )
    verify = get_verifier(settings.verifier)
    per_task: list[list[SuffixSample]] = [[] for _ in tasks]
    for s in drawn:
        i, pos = owner[s.prefix_index]
        task = tasks[i]
        text = engine.decode(list(task.token_ids[:pos]) + s.token_ids)
        reward = run_verifier(verify, text, task.ground_truth, settings.verifier)
        per_task[i].append(
            SuffixSample(pos, s.sample_index, s.seed, list(s.token_ids), engine.decode(s.token_ids), reward)
        )
    return task_results(tasks, per_task, start, engine, M)


def with_environment(store, run: str, settings: TeacherSettings) -> TeacherSettings:
    """`settings` with the run's environment when they name none (its meta's), checked to load."""
    if settings.environment is None:
        spec = store.run_info(run)["meta"].get(ENVIRONMENT_KEY)
        settings = TeacherSettings(**{**asdict(settings), "environment": spec})
    if settings.environment:
        get_environment(settings.environment)  # one that does not load fails before any model
    return settings


def load_settings_engine(settings: TeacherSettings, cpu_threads: int | str | None = "auto"):
    # cpu_threads is a transformers setting; "auto" on a GPU machine with vLLM loads vLLM instead.
    transformers = settings.engine == "transformers" or (
        settings.engine == "auto" and not (settings.device in (None, "cuda") and vllm_usable())
    )
    extra = {"cpu_threads": cpu_threads} if transformers else {}
    return load_engine(
        settings.model_dir,
        engine=settings.engine,
        device=settings.device,
        allow_pickle=settings.allow_pickle,
        **extra,
    )


@dataclass
class TeacherReport:
    chosen: int
    """Rollouts the job covers."""
    already: int
    """Of those, valued by an earlier run of the job."""
    valued: int
    """Valued and stored by this run."""
    positions: int
    suffixes: int
    tokens: int
    seconds: float
    workers: int
    engine: str
    cancelled: bool = False
    models: dict[int, dict] = field(default_factory=dict)
    """Per step of the rollouts valued now: {model, on_policy, why}
    (`backend.store.checkpoints.ModelChoice`)."""
    environment: str | None = None
    """The agent environment whose tool loop the suffixes went through (None: the policy alone)."""

    def to_json(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


# ---- the job --------------------------------------------------------------------------------------------
def run_teacher(
    handle,
    run: str,
    settings: TeacherSettings,
    *,
    rollouts: int | None = None,
    positions: str = "steps",
    seed: int = 0,
    engine=None,
    ray_address: str | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    cancel=None,
) -> TeacherReport:
    """Value the chosen rollouts of `run` that are not valued yet and store each one atomically.

    handle: a `StoreHandle` (the store is opened only to plan and to write, never while sampling).
    engine: a loaded engine for the single-process path, used for every rollout (default: one engine per
        model: each rollout's step checkpoint, or `settings.model_dir` when it names one on purpose; each
        suffix row records whether its model sampled the rollout's step, `on_policy`).
    ray_address: None (this process), "auto", "local:N" (start a local cluster with N CPUs) or a Ray
        address; `workers` actors (default: one per CPU of the cluster).
    cancel: a callable or `threading.Event`; checked between rollouts (and inside the engine): rollouts
        finished before it was set are stored, the one in progress is dropped.
    """
    should_stop = cancel.is_set if hasattr(cancel, "is_set") else (cancel or (lambda: False))
    get_verifier(settings.verifier)  # an unknown verifier fails before any model is loaded
    if settings.samples < 1:
        raise InputError(f"--samples must be >= 1, got {settings.samples}")
    with handle.read() as store:
        settings = with_environment(store, run, settings)
        tasks, chosen = plan_teacher(
            store,
            run,
            rollouts=rollouts,
            positions=positions,
            seed=seed,
            verifier=settings.verifier,
            tool_loop=bool(settings.environment),
        )
        if settings.max_new_tokens is None:
            # One budget for the whole run (twice its longest response, plus 16), whatever --rollouts
            # picks, so a suffix never depends on which rollouts share its job.
            longest = int(store.rollout_index(run)["length"].max())
            settings = TeacherSettings(**{**asdict(settings), "max_new_tokens": 2 * longest + 16})
        named = str(engine.model_dir) if engine is not None else settings.model_dir
        choices = choices_for(store, run, {t.step for t in tasks}, named)
    report = TeacherReport(chosen, chosen - len(tasks), 0, 0, 0, 0, 0.0, 1, settings.engine)
    report.models = {step: choice.to_json() for step, choice in choices.items()}
    report.environment = settings.environment
    if not tasks:
        return report
    start = time.perf_counter()
    results = _results_by_model(tasks, choices, settings, engine, ray_address, workers, should_stop, report)
    pending: dict[int, Any] = {}
    last_write = time.monotonic()

    def flush() -> None:
        if pending:
            with handle.write() as store:
                store.save_resamples(run, pending, job=JOB)
            pending.clear()

    try:
        for task, result in results:
            if result.cancelled:
                report.cancelled = True
                break
            pending[task.rollout_id] = result.table().assign(on_policy=choices[task.step].on_policy)
            report.valued += 1
            report.positions += len(result.positions)
            report.suffixes += len(result.samples)
            report.tokens += result.tokens
            if progress is not None:
                progress(report.valued, len(tasks))
            if time.monotonic() - last_write >= WRITE_EVERY_SECONDS:
                flush()
                last_write = time.monotonic()
            if should_stop():
                report.cancelled = report.valued < len(tasks)
                break
    finally:
        results.close()  # stops Ray workers still busy after a cancel
        flush()  # what finished is kept, also on Ctrl-C
        report.seconds = time.perf_counter() - start
    return report


def _results_by_model(
    tasks: list[TeacherTask],
    choices: dict,
    settings: TeacherSettings,
    engine,
    ray_address: str | None,
    workers: int | None,
    should_stop,
    report: TeacherReport,
) -> Iterator[tuple[TeacherTask, ResampleResult]]:
    """The results of every task, one model at a time (each rollout's choice in `choices`, by step), in
    rollout order within a model; one engine (or one Ray pool) per model."""
    by_model: dict[str, list[TeacherTask]] = {}
    for task in tasks:
        by_model.setdefault(choices[task.step].model_dir, []).append(task)
    for folder, mine in by_model.items():
        these = TeacherSettings(**{**asdict(settings), "model_dir": folder})
        if ray_address is None:
            loaded = engine or load_settings_engine(these)
            report.engine = loaded.name
            results = _local_results(loaded, mine, these, should_stop)
        else:
            results, report.workers = _ray_results(ray_address, mine, these, workers, should_stop)
            report.engine = f"{settings.engine} on ray"
        try:
            yield from results
        finally:
            results.close()
        if should_stop():
            return


def _local_results(
    engine, tasks: list[TeacherTask], settings: TeacherSettings, should_stop
) -> Iterator[tuple[TeacherTask, ResampleResult]]:
    for chunk in chunk_tasks(tasks, settings.samples, settings.chunk_rows):
        if should_stop():
            return
        yield from zip(chunk, value_rollouts(engine, chunk, settings, cancel=should_stop), strict=True)


# ---- Ray --------------------------------------------------------------------------------------------------
class TeacherWorker:
    """A Ray actor: one engine, loaded once, values rollouts sent to it (one CPU or one GPU each)."""

    def __init__(self, settings: TeacherSettings):
        # One thread per worker: the cluster gives each actor one CPU.
        self.settings = settings
        threads = 1 if settings.device in (None, "cpu") else None
        self.engine = load_settings_engine(settings, cpu_threads=threads)

    def value(self, chunk: list[TeacherTask]) -> list[ResampleResult]:
        return value_rollouts(self.engine, chunk, self.settings)

    def engine_name(self) -> str:
        return self.engine.name


def _ray_results(
    address: str, tasks: list[TeacherTask], settings: TeacherSettings, workers: int | None, should_stop
) -> tuple[Iterator[tuple[TeacherTask, ResampleResult]], int]:
    ray = connect_ray(address)
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    use_gpu = gpus > 0 and settings.engine in ("auto", "vllm") and settings.device in (None, "cuda")
    count = workers or (gpus if use_gpu else max(1, int(resources.get("CPU", 1))))
    options = {"num_gpus": 1, "num_cpus": 1} if use_gpu else {"num_cpus": 1}
    worker_settings = (
        settings
        if use_gpu
        else TeacherSettings(**{**asdict(settings), "engine": "transformers", "device": "cpu"})
    )
    actor = ray.remote(**options)(TeacherWorker)
    actors = [actor.remote(worker_settings) for _ in range(count)]

    chunks = chunk_tasks(tasks, settings.samples, settings.chunk_rows)

    def ordered() -> Iterator[tuple[TeacherTask, ResampleResult]]:
        # Each actor keeps two chunks in flight; results are yielded in task order.
        in_flight: dict[Any, tuple[int, Any]] = {}
        done: dict[int, list[ResampleResult]] = {}
        next_chunk, next_out = 0, 0
        free = [a for a in actors for _ in range(2)]
        try:
            while next_out < len(chunks):
                while free and next_chunk < len(chunks) and not should_stop():
                    a = free.pop(0)
                    in_flight[a.value.remote(chunks[next_chunk])] = (next_chunk, a)
                    next_chunk += 1
                while next_out in done:
                    yield from zip(chunks[next_out], done.pop(next_out), strict=True)
                    next_out += 1
                if next_out >= len(chunks) or not in_flight:
                    return  # finished, or cancelled with nothing left in flight
                ready, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in ready:
                    index, a = in_flight.pop(ref)
                    done[index] = ray.get(ref)
                    free.append(a)
        finally:
            for a in actors:
                ray.kill(a)

    return ordered(), count
