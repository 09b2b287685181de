"""Verifiers by name: `fn(response: str, ground_truth) -> float`, the task reward of one response.

A run records its verifier's name; resampling scores every suffix with it. Users can name their own
as `module:function` (a module importable from the current environment). Registering a name twice
raises; an unknown name raises `InputError` listing the known ones.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from backend.errors import InputError
from backend.rewards import answers, rules

Verifier = Callable[[str, object], float]


@dataclass(frozen=True)
class VerifierSpec:
    name: str
    fn: Verifier
    description: str


_REGISTRY: dict[str, VerifierSpec] = {}
_USER_SPEC = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*")


def register_verifier(name: str, description: str) -> Callable[[Verifier], Verifier]:
    def wrap(fn: Verifier) -> Verifier:
        if name in _REGISTRY:
            raise ValueError(f"verifier {name!r} is already registered")
        if ":" in name:
            raise ValueError(f"verifier name {name!r} may not contain ':' (reserved for module:function)")
        _REGISTRY[name] = VerifierSpec(name, fn, description)
        return fn

    return wrap


def verifier_names() -> list[str]:
    return list(_REGISTRY)


def describe() -> list[dict]:
    return [{"name": s.name, "description": s.description} for s in _REGISTRY.values()]


def get_verifier(name: str) -> Verifier:
    """A registered verifier, or `module:function` imported and checked to be callable."""
    if not isinstance(name, str) or not name:
        raise InputError(f"verifier must be a name, got {name!r}; known: {', '.join(_REGISTRY)}")
    if name in _REGISTRY:
        return _REGISTRY[name].fn
    if ":" not in name:
        raise InputError(
            f"unknown verifier {name!r}; known: {', '.join(_REGISTRY)}, or give your own as module:function"
        )
    if not _USER_SPEC.fullmatch(name):
        raise InputError(f"verifier {name!r} is not of the form module.path:function (identifiers only)")
    module_name, function_name = name.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"verifier {name!r}: cannot import module {module_name!r} ({exc})") from exc
    fn = getattr(module, function_name, None)
    if fn is None:
        raise InputError(f"verifier {name!r}: module {module_name!r} has no attribute {function_name!r}")
    if not callable(fn):
        raise InputError(f"verifier {name!r}: {function_name!r} is not callable")
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
