"""Running a model-credit method over rollouts of a stored run and caching the scores (the job behind
`creditlens model-credit` and the Resample view's on-demand button).

Whole groups are scored, since the estimators reshape the group-relative Z and need every rollout of the
group. The scores of one request are stored in one transaction at the end: a failed or cancelled run
writes nothing, and the store stays as it was.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from backend.core.batch import MODEL_SCORED
from backend.core.errors import InputError, StoreError
from backend.models import model_credit as mc
from backend.models.engine import Cancel, Engine, Progress
from backend.models.factory import load_engine
from backend.models.score_producers import producer
from backend.store.checkpoints import choices_for
from backend.store.model_credit_queries import rollout_tokens, save_model_credit


@dataclass(frozen=True)
class ModelCreditSettings:
    """What a request computes with: the method, the model and engine, and the method's own settings."""

    method: str
    model_dir: str | None = None
    """A model named on purpose for every rollout; None: each rollout's step checkpoint."""
    engine: str = "auto"
    device: str | None = None
    allow_pickle: bool = False
    answer_regex: str = mc.ANSWER_REGEX
    negative_template: str = mc.NEGATIVE_TEMPLATE
    noise_std: float = 1e-3
    seed: int = 0
    chunk_size: int = 64

    def __post_init__(self) -> None:
        if self.method not in MODEL_SCORED:
            raise InputError(f"--method {self.method!r}: expected one of {', '.join(MODEL_SCORED)}")
        if self.chunk_size < 1:
            raise InputError(f"--chunk-size {self.chunk_size}: expected at least 1")
        if self.noise_std < 0:
            raise InputError(f"--noise-std {self.noise_std}: expected a number >= 0")
        check = producer(self.method).check
        if check is not None:
            check(self)

    def recorded(self) -> dict:
        """The settings the cached scores depend on (stored with them)."""
        return producer(self.method).recorded(self)


@dataclass
class ModelCreditReport:
    method: str
    rollouts: list[int] = field(default_factory=list)
    no_answer: list[int] = field(default_factory=list)
    """OAR: rollouts whose response has no answer match (scored nowhere; their weights stay 1)."""
    model_rows: int = 0
    """Sequences the model ran on (OAR-P: one per perturbation; OAR-G: one forward+backward each)."""
    seconds: float = 0.0
    engine: str = ""
    cancelled: bool = False
    stored: int = 0
    models: dict[int, dict] = field(default_factory=dict)
    """Per step: {model, on_policy, why} (`backend.store.checkpoints.ModelChoice`)."""

    def to_json(self) -> dict:
        return asdict(self)


def select_rollouts(keys, rollout: int | None = None, rollouts: int | None = None) -> list[int]:
    """Rollout ids to score, whole groups: the group of `rollout`; or the first `rollouts` rollouts by id
    with the rest of their groups; or every rollout. `keys`: `Store.rollout_keys` (rollout_id, group_id)."""
    if rollout is not None:
        mine = keys[keys["rollout_id"] == int(rollout)]
        if mine.empty:
            raise StoreError(f"the run has no rollout {rollout}")
        groups = set(mine["group_id"].tolist())
    elif rollouts is not None:
        if rollouts < 1:
            raise InputError(f"--rollouts {rollouts}: expected at least 1 or 'all'")
        groups = set(keys.sort_values("rollout_id").head(int(rollouts))["group_id"].tolist())
    else:
        return sorted(int(r) for r in keys["rollout_id"])
    return sorted(int(r) for r in keys[keys["group_id"].isin(groups)]["rollout_id"])


def rollout_inputs(frame, engine: Engine) -> list[mc.RolloutTokens]:
    """`RolloutTokens` from `rollout_tokens` rows; prompts without ids are encoded, labels made when
    the run has none."""
    out = []
    for row in frame.itertuples():
        prompt_ids = row.prompt_ids
        prompt_ids = (
            engine.encode(row.prompt or "")
            if prompt_ids is None or not isinstance(prompt_ids, (list, np.ndarray))
            else [int(t) for t in prompt_ids]
        )
        token_ids = [int(t) for t in row.token_ids]
        tokens = row.tokens
        tokens = list(tokens) if isinstance(tokens, (list, np.ndarray)) else engine.token_texts(token_ids)
        out.append(mc.RolloutTokens(int(row.rollout_id), row.prompt or "", prompt_ids, token_ids, tokens))
    return out


def compute_scores(
    engine: Engine,
    rollouts: Sequence[mc.RolloutTokens],
    settings: ModelCreditSettings,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> dict | None:
    """The method's scores per rollout id (None when cancelled): its registered score producer."""
    return producer(settings.method).score(engine, rollouts, settings, progress, cancel)


def model_rows(rollouts: Sequence[mc.RolloutTokens], settings: ModelCreditSettings) -> tuple[int, list[int]]:
    """(sequences the model runs on, rollouts without an answer) for a request."""
    return producer(settings.method).model_rows(rollouts, settings)


def open_engine(settings: ModelCreditSettings, model_dir: str | None = None) -> Engine:
    engine = producer(settings.method).engine or settings.engine
    return load_engine(
        model_dir or settings.model_dir,
        engine=engine,
        device=settings.device,
        allow_pickle=settings.allow_pickle,
    )


def run_model_credit(
    handle,
    run: str,
    settings: ModelCreditSettings,
    rollout: int | None = None,
    rollouts: int | None = None,
    engine: Engine | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> ModelCreditReport:
    """Score the chosen rollouts (see `select_rollouts`) with `settings.method` and store the scores in
    one transaction; nothing is stored when cancelled or on any error."""
    with handle.read() as store:
        keys = store.rollout_keys(run)
        ids = select_rollouts(keys, rollout, rollouts)
        frame = rollout_tokens(store, run, ids)
        step_of = dict(zip(keys["rollout_id"].astype(int), keys["step"].astype(int), strict=True))
        named = str(engine.model_dir) if engine is not None else settings.model_dir
        choices = choices_for(store, run, {step_of[r] for r in ids}, named)
    report = ModelCreditReport(settings.method, ids)
    report.models = {step: choice.to_json() for step, choice in choices.items()}
    models = [choices[step_of[int(r)]].model_dir for r in frame["rollout_id"]]
    scores: dict = {}
    start = time.perf_counter()
    for folder in dict.fromkeys(models):  # one engine per model, groups never split (one step each)
        loaded = engine or open_engine(settings, folder)
        report.engine = loaded.name
        inputs = rollout_inputs(frame[[m == folder for m in models]], loaded)
        rows, missing = model_rows(inputs, settings)
        report.model_rows += rows
        report.no_answer += missing
        part = compute_scores(loaded, inputs, settings, progress, cancel)
        if part is None:
            report.cancelled = True
            report.seconds = round(time.perf_counter() - start, 3)
            return report
        scores.update(part)
    report.seconds = round(time.perf_counter() - start, 3)
    used = {int(r): choices[step_of[int(r)]] for r in scores}
    with handle.write() as store:
        report.stored = save_model_credit(
            store,
            run,
            settings.method,
            scores,
            settings.recorded(),
            {r: c.model_dir for r, c in used.items()},
            report.engine,
            on_policy={r: c.on_policy for r, c in used.items()},
        )
    return report
