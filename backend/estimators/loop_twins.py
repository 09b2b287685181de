"""The loop twins' registry: estimator name -> its slow plain-loop version, registered with `@twin("name")`
beside its family in backend/estimators/twins/. Tests compare every estimator with its twin; production code
never imports the twins (backend.estimators.reference is their one entry)."""

from __future__ import annotations

from collections.abc import Callable

from backend.estimators.registry import canonical, names

_TWINS: dict[str, Callable] = {}
"""Estimator name -> its slow loop twin `fn(batch, config) -> advantages (B, T)`, registered with `@twin`
beside its family in backend/estimators/twins/. Tests compare every estimator with its twin."""


class MissingTwin(LookupError):
    def __str__(self) -> str:
        return str(self.args[0])


def twin(name: str) -> Callable:
    """Decorator: `@twin("recency")` registers the loop twin of estimator `name` (current name, not an
    alias). The twin takes the CPU batch and the estimator's config and returns advantages (B, T)."""

    def wrap(fn: Callable) -> Callable:
        if name in _TWINS:
            raise ValueError(f"estimator {name!r} already has a twin ({_TWINS[name].__qualname__})")
        _TWINS[name] = fn
        return fn

    return wrap


def twin_names() -> list[str]:
    """Names with a registered loop twin. The twins register when backend.estimators.reference (their one
    entry) is imported; production code never imports them."""
    return list(_TWINS)


def get_twin(name: str) -> Callable:
    """The loop twin of estimator `name` (an alias resolves to its current name), or MissingTwin."""
    current = canonical(name)
    if current not in _TWINS:
        raise MissingTwin(
            f"no twin for {current!r}: write its loop version with @twin({current!r}) in "
            "backend/estimators/twins/ beside its family (see backend/estimators/__init__.py)"
        )
    return _TWINS[current]


def missing_twins() -> list[str]:
    """Registered estimators without a loop twin (empty when the registry is complete; import
    backend.estimators.reference first, which registers the twins)."""
    return [n for n in names() if n not in _TWINS]
