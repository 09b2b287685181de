"""The score producer of each model-scored estimator (`creditlens model-credit --method NAME`), registered
by name as the estimators and their twins are: how the method runs the policy over rollouts, how many
sequences that is, and which settings its cached scores depend on.

`backend.models.model_credit_run` calls only what is registered here; adding a model-scored estimator is its
estimator in `backend.estimators.methods.model_based` (reading the extras `model_score_needs(NAME)`), its
batched scores and slow twin in `backend.models.model_credit`, and one `@produces(NAME, ...)` below. The
method names are also listed in `backend.core.batch_fields.MODEL_SCORED` (the command line's choices, read
without importing torch); tests/test_architecture.py checks that the two lists agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backend.core.errors import InputError
from backend.models import model_credit as mc


@dataclass(frozen=True)
class ScoreProducer:
    method: str
    score: Callable
    """(engine, rollouts, settings, progress, cancel) -> {rollout id: (L,) scores}, or None when cancelled."""
    model_rows: Callable[[Sequence[mc.RolloutTokens], object], tuple[int, list[int]]]
    """(rollouts, settings) -> (sequences the model runs on, rollouts without an answer)."""
    recorded: Callable[[object], dict]
    """settings -> the settings the cached scores depend on (stored with them)."""
    check: Callable[[object], None] | None = None
    """settings -> None, or an InputError naming the bad option."""
    engine: str | None = None
    """The engine the method needs whatever `--engine` says (None: any)."""


PRODUCERS: dict[str, ScoreProducer] = {}


def produces(method: str, **parts) -> Callable:
    """Decorator: `@produces("oar_p", model_rows=..., recorded=...)` registers the decorated function as the
    scores of model-scored estimator `method`."""

    def wrap(fn: Callable) -> Callable:
        if method in PRODUCERS:
            raise ValueError(f"model-scored method {method!r} already has a score producer")
        PRODUCERS[method] = ScoreProducer(method, fn, **parts)
        return fn

    return wrap


def producer(method: str) -> ScoreProducer:
    if method not in PRODUCERS:
        raise InputError(f"--method {method!r}: expected one of {', '.join(PRODUCERS)}")
    return PRODUCERS[method]


def _answers(rollouts: Sequence[mc.RolloutTokens], settings) -> tuple[dict, list[int]]:
    spans = {r.rollout_id: mc.answer_span(r.tokens, settings.answer_regex) for r in rollouts}
    return spans, sorted(rid for rid, s in spans.items() if s is None)


def _oar_p_rows(rollouts, settings) -> tuple[int, list[int]]:
    """One sequence per reasoning token perturbed, plus the unperturbed one, per rollout with an answer."""
    spans, missing = _answers(rollouts, settings)
    return sum(1 + s[0] for s in spans.values() if s is not None), missing


def _oar_g_rows(rollouts, settings) -> tuple[int, list[int]]:
    """One forward and backward pass per rollout with an answer."""
    _, missing = _answers(rollouts, settings)
    return len(rollouts) - len(missing), missing


def _answer_regex(settings) -> dict:
    return {"answer_regex": settings.answer_regex}


def _oar_g_recorded(settings) -> dict:
    return {"answer_regex": settings.answer_regex, "noise_std": settings.noise_std, "seed": settings.seed}


@produces("oar_p", model_rows=_oar_p_rows, recorded=_answer_regex)
def _oar_p(engine, rollouts, settings, progress=None, cancel=None):
    return mc.oar_p_scores(engine, rollouts, settings.answer_regex, settings.chunk_size, progress, cancel)


# OAR-G differentiates through the model: only the transformers engine has one to differentiate.
@produces("oar_g", model_rows=_oar_g_rows, recorded=_oar_g_recorded, engine="transformers")
def _oar_g(engine, rollouts, settings, progress=None, cancel=None):
    chunk = max(1, settings.chunk_size // 4)  # a backward pass holds activations: smaller chunks
    return mc.oar_g_scores(
        engine, rollouts, settings.answer_regex, settings.noise_std, settings.seed, chunk, progress, cancel
    )


def _gcpo_check(settings) -> None:
    if "{prompt}" not in settings.negative_template:
        raise InputError(f"--negative-prompt {settings.negative_template!r}: it must contain {{prompt}}")


@produces(
    "gcpo",
    model_rows=lambda rollouts, settings: (2 * len(rollouts), []),  # the prompt and the negative prompt
    recorded=lambda settings: {"negative_template": settings.negative_template},
    check=_gcpo_check,
)
def _gcpo(engine, rollouts, settings, progress=None, cancel=None):
    return mc.gcpo_deltas(engine, rollouts, settings.negative_template, settings.chunk_size, progress, cancel)
