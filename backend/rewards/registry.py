"""Verifiers by name: `fn(response: str, ground_truth) -> float`, the task reward of one response;
and step verifiers: `fn(prompt, response, ground_truth) -> list[Step]`, a score per step (line), the
process channel's evidence (`backend.rewards.steps`).

A run records its verifier's name; resampling scores every suffix with it. Users can name their own
of either kind as `module:function` (a module importable from the current environment). Registering
a name twice raises; an unknown name raises `InputError` listing the known ones.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from backend.core.errors import InputError
from backend.rewards import answers, rules, steps

Verifier = Callable[[str, object], float]


@dataclass(frozen=True)
class VerifierSpec:
    name: str
    fn: Verifier
    description: str


_REGISTRY: dict[str, VerifierSpec] = {}
_STEP_REGISTRY: dict[str, VerifierSpec] = {}
_USER_SPEC = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*")


def register_verifier(name: str, description: str, registry: dict | None = None) -> Callable:
    """Register `fn` under `name` (in the step verifiers' table when `registry` is `_STEP_REGISTRY`)."""
    table = _REGISTRY if registry is None else registry

    def wrap(fn):
        if name in table:
            raise ValueError(f"verifier {name!r} is already registered")
        if ":" in name:
            raise ValueError(f"verifier name {name!r} may not contain ':' (reserved for module:function)")
        table[name] = VerifierSpec(name, fn, description)
        return fn

    return wrap


def register_step_verifier(name: str, description: str) -> Callable[[steps.StepVerifier], steps.StepVerifier]:
    return register_verifier(name, description, _STEP_REGISTRY)


def verifier_names() -> list[str]:
    return list(_REGISTRY)


def describe() -> list[dict]:
    return [{"name": s.name, "description": s.description} for s in _REGISTRY.values()]


def step_verifier_names() -> list[str]:
    return list(_STEP_REGISTRY)


def describe_step_verifiers() -> list[dict]:
    return [{"name": s.name, "description": s.description} for s in _STEP_REGISTRY.values()]


def get_step_verifier(name: str) -> steps.StepVerifier:
    """A registered step verifier, or `module:function` imported and checked to be callable."""
    return get_verifier(name, _STEP_REGISTRY, "step verifier")


def get_verifier(name: str, registry: dict | None = None, kind: str = "verifier") -> Verifier:
    """A registered verifier, or `module:function` imported and checked to be callable."""
    table = _REGISTRY if registry is None else registry
    if not isinstance(name, str) or not name:
        raise InputError(f"{kind} must be a name, got {name!r}; known: {', '.join(table)}")
    if name in table:
        return table[name].fn
    if ":" not in name:
        raise InputError(
            f"unknown {kind} {name!r}; known: {', '.join(table)}, or give your own as module:function"
        )
    if not _USER_SPEC.fullmatch(name):
        raise InputError(f"{kind} {name!r} is not of the form module.path:function (identifiers only)")
    module_name, function_name = name.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"{kind} {name!r}: cannot import module {module_name!r} ({exc})") from exc
    fn = getattr(module, function_name, None)
    if fn is None:
        raise InputError(f"{kind} {name!r}: module {module_name!r} has no attribute {function_name!r}")
    if not callable(fn):
        raise InputError(f"{kind} {name!r}: {function_name!r} is not callable")
    return fn


def run_verifier(verifier: Verifier, response: str, ground_truth, name: str = "verifier") -> float:
    """Call a verifier and check it returned a finite number (user code gets a clear error)."""
    value = verifier(response, ground_truth)
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"verifier {name!r} returned {value!r}, expected a number") from exc
    if number != number or number in (float("inf"), float("-inf")):
        raise InputError(f"verifier {name!r} returned {number}, expected a finite number")
    return number


@register_verifier(
    "answer_match",
    "1 when the integer after `####` (else `\\boxed{}`, else the last integer) equals the ground truth",
)
def answer_match(response: str, ground_truth) -> float:
    return answers.answer_match(response, ground_truth)


@register_verifier(
    "answer_match_strict",
    "1 when the answer line `#### n` or `\\boxed{n}` holds the ground truth; no last-integer fallback",
)
def answer_match_strict(response: str, ground_truth) -> float:
    return answers.answer_match(response, ground_truth, fallback_last_integer=False)


@register_verifier(
    "answer_and_format", "1 when the answer matches and the response ends with one `#### n` line"
)
def answer_and_format(response: str, ground_truth) -> float:
    ok = answers.answer_match(response, ground_truth) and not rules.format_spans(response)
    return 1.0 if ok else 0.0


@register_step_verifier(
    "arithmetic_steps",
    "column addition, line by line: each line's sum, its carry in and out, its column's digits (from a "
    "prompt `a+b=?`), and the answer line; 0 per step that checks out, -1 per wrong step",
)
def arithmetic_steps(prompt: str, response: str, ground_truth) -> list[steps.Step]:
    return steps.arithmetic_steps(prompt, response, ground_truth)


def run_step_verifier(
    verifier: steps.StepVerifier, prompt: str, response: str, ground_truth, name: str = "step verifier"
) -> list[steps.Step]:
    """Call a step verifier and check its steps: `Step`s in order, inside the response, finite scores."""
    found = verifier(prompt, response, ground_truth)
    if not isinstance(found, (list, tuple)):
        raise InputError(f"step verifier {name!r} returned {type(found).__name__}, expected a list of Step")
    end = 0
    for i, step in enumerate(found):
        if not isinstance(step, steps.Step):
            raise InputError(f"step verifier {name!r}: step {i} is {step!r}, expected a Step")
        if not end <= step.start <= step.end <= len(response):
            raise InputError(
                f"step verifier {name!r}: step {i} spans characters [{step.start}, {step.end}), "
                f"not in order inside the {len(response)}-character response"
            )
        if step.score != step.score or step.score in (float("inf"), float("-inf")):
            raise InputError(
                f"step verifier {name!r}: step {i} has score {step.score}, expected a finite number"
            )
        end = step.end
    return list(found)
