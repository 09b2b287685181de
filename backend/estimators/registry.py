"""The estimator registry: the only list of estimator names; it owns the call signature.

Every estimator is `fn(batch: RolloutBatch, config: <frozen dataclass>) -> EstimatorResult`.
Config fields are declared with `param(...)`, which records the default, the range and a one-line
help text; `config_schema` turns them into the JSON the CLI prints and the app renders as widgets.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from backend.batch import RolloutBatch


@dataclass(frozen=True)
class EstimatorResult:
    """advantages: (B, T) float32, exactly 0 on padding; diagnostics: name -> tensor or plain data."""

    advantages: torch.Tensor
    diagnostics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    fn: Callable[[RolloutBatch, Any], EstimatorResult]
    config_cls: type
    description: str
    needs: tuple[str, ...] = ()
    """Batch fields or resources the estimator requires, e.g. ("entropies",) or ("model",)."""
    family: str = "credit"
    """UI grouping: outcome, credit, value, tree, learned, modifier, aggregation."""


class UnknownEstimator(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


_REGISTRY: dict[str, EstimatorSpec] = {}


def param(default: Any, *, help: str, low: float | None = None, high: float | None = None,
          choices: tuple | None = None) -> Any:
    """A config field with its default, range (inclusive) or choices, and one line of help."""
    meta = {"help": help, "low": low, "high": high, "choices": choices}
    return field(default=default, metadata=meta)


def register(name: str, config_cls: type, description: str, needs: tuple[str, ...] = (),
             family: str = "credit") -> Callable:
    """Decorator: `@register("grpo", GRPOConfig, "one line")`. Registering a name twice raises."""

    def wrap(fn: Callable) -> Callable:
        if name in _REGISTRY:
            raise ValueError(f"estimator {name!r} is already registered")
        if not (dataclasses.is_dataclass(config_cls) and config_cls.__dataclass_params__.frozen):
            raise TypeError(f"config of {name!r} must be a frozen dataclass")
        _REGISTRY[name] = EstimatorSpec(name, fn, config_cls, description, tuple(needs), family)
        return fn

    return wrap


def _load_all() -> None:
    # Importing the package registers every estimator module exactly once.
    import backend.estimators  # noqa: F401


def names() -> list[str]:
    _load_all()
    return list(_REGISTRY)


def get(name: str) -> EstimatorSpec:
    _load_all()
    if name not in _REGISTRY:
        raise UnknownEstimator(f"unknown estimator {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def make_config(name: str, **overrides: Any) -> Any:
    """Build the frozen config of `name`, coercing string values (from `--set k=v` or URLs)."""
    spec = get(name)
    hints = typing.get_type_hints(spec.config_cls)
    known = {f.name for f in dataclasses.fields(spec.config_cls)}
    kwargs = {}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(
                f"estimator {name!r} has no parameter {key!r}; it has: {', '.join(sorted(known))}"
            )
        kwargs[key] = _coerce(value, hints[key], key)
    return spec.config_cls(**kwargs)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    if not isinstance(value, str):
        return value
    base = typing.get_origin(hint)
    args = typing.get_args(hint)
    try:
        if hint is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if hint is int:
            return int(value)
        if hint is float:
            return float(value)
        if base is typing.Literal:
            return value
        if float in args and value.lower() != "none":
            return float(value)
        if value.lower() == "none" and type(None) in args:
            return None
    except ValueError:
        raise ValueError(f"parameter {key!r}: cannot read {value!r} as {hint}") from None
    return value


def estimate(name: str, batch: RolloutBatch, config: Any = None, **overrides: Any) -> EstimatorResult:
    """Run estimator `name` on `batch`; checks the output contract (shape, finite, 0 on padding)."""
    spec = get(name)
    if config is None:
        config = make_config(name, **overrides)
    batch.validate()
    if batch.T == 0:  # every response is empty: no token to credit (kernels index position 0 or reduce over T)
        batch.require(*spec.needs)
        return EstimatorResult(torch.zeros(batch.response_mask.shape, dtype=torch.float32), {"empty": True})
    result = spec.fn(batch, config)
    adv = result.advantages
    if adv.shape != batch.response_mask.shape:
        raise RuntimeError(
            f"estimator {name!r} returned shape {tuple(adv.shape)}, expected {(batch.B, batch.T)}"
        )
    if not bool(torch.isfinite(adv).all()):
        raise RuntimeError(f"estimator {name!r} produced NaN/inf advantages")
    return result


def config_schema(name: str) -> dict:
    """Name, description, needs and fields (name, type, default, low, high, choices, help)."""
    spec = get(name)
    hints = typing.get_type_hints(spec.config_cls)
    out_fields = []
    for f in dataclasses.fields(spec.config_cls):
        hint = hints[f.name]
        choices = f.metadata.get("choices")
        if choices is None and typing.get_origin(hint) is typing.Literal:
            choices = typing.get_args(hint)
        type_name = (
            "choice" if choices else getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
        )
        out_fields.append({
            "name": f.name,
            "type": type_name,
            "default": f.default,
            "low": f.metadata.get("low"),
            "high": f.metadata.get("high"),
            "choices": list(choices) if choices else None,
            "help": f.metadata.get("help", ""),
        })
    return {"name": spec.name, "description": spec.description, "family": spec.family,
            "needs": list(spec.needs), "fields": out_fields}
