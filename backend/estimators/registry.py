"""The estimator registry: the only list of estimator names; it owns the call signature.

Every estimator is `fn(batch: RolloutBatch, config: <frozen dataclass>) -> EstimatorResult`.
Config fields are declared with `param(...)`, which records the default, the range and a one-line
help text; `config_schema` turns them into the JSON the CLI prints and the app renders as widgets.
Importing this module runs `backend/estimators/__init__.py` first, which imports (registers) every
estimator module, so the list is complete whenever it is read.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from backend.core.batch import MC_EXTRAS, MODEL_SCORE_EXTRAS, OPTIONAL_FIELDS, BatchError, RolloutBatch

MODEL = "model"
"""Need name of estimators that run the policy model itself (a resource, not a batch field)."""
SCOPES = ("group", "step", "run")
"""The batch an estimator needs to give its true number for a rollout: the rollout's group, its training
step (batch statistics: quantiles, batch means, Dr. GRPO's batch size), or the whole run (models fitted on
the run). Views and `creditlens estimate` both compute at this scope, so they never disagree."""
MC_NEEDS = MC_EXTRAS


def widest(*scopes: str) -> str:
    """The widest of some scopes (group < step < run): a batch that serves all of them."""
    return max(scopes, key=SCOPES.index)


"""The one spelling of the suffix-resampling need: the batch extras `creditlens resample` writes.
Estimators needing them (or `MODEL`) are not model-free: see `EstimatorSpec.model_free`."""


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
    """Batch fields (or extras) the estimator requires, all of them, e.g. ("entropies",), MC_NEEDS, or
    the resource MODEL. Fields it merely uses when present (token text, hidden states) are not listed."""
    family: str = "credit"
    """UI grouping: outcome, credit, value, tree, learned, modifier, aggregation."""
    needs_one_of: tuple[tuple[str, ...], ...] = ()
    """Alternatives on top of `needs`: at least one of these sets of fields must be present in full,
    e.g. (("entropies", "old_entropies"), ("logprobs", "ref_logprobs")). Empty: no alternatives."""
    source: str = ""
    """For an estimator named after a paper: the paper (arXiv id) and the official code with its commit that
    the implementation was checked against. Empty for our own constructions."""
    explain: Callable[[Any], list[str]] | None = None
    """The derivation of A_t from its terms (`fn(Terms) -> lines`, backend/estimators/explaining.py)."""

    def scope_for(self, config: Any) -> str:
        """The scope of this estimator under `config` (one of SCOPES), declared by the config class's
        `scope()` method (a function of the config: gae needs the run only when it fits its value probe
        on the run); a config without one is group-scoped."""
        scope = config.scope() if hasattr(config, "scope") else "group"
        if scope not in SCOPES:
            raise RuntimeError(f"estimator {self.name!r} declares scope {scope!r}; expected one of {SCOPES}")
        return scope

    def unmet(self, available: set[str] | frozenset[str]) -> str | None:
        """None when a run with the fields `available` (see `available_fields`) supports this
        estimator with its defaults; otherwise what is missing, in words."""
        missing = [n for n in self.needs if n not in available]
        if missing:
            return "no " + ", ".join(missing)
        if self.needs_one_of and not any(set(alt) <= available for alt in self.needs_one_of):
            return "none of " + " or ".join(" + ".join(alt) for alt in self.needs_one_of)
        return None

    @property
    def model_free(self) -> bool:
        """True when neither the model nor Monte Carlo resampling results are required (in `needs`, or
        in every alternative of `needs_one_of`): the estimators the oracle bench can run on any run."""

        def heavy(names: tuple[str, ...]) -> bool:
            return any(n == MODEL or n in MC_NEEDS or n in MODEL_SCORE_EXTRAS for n in names)

        if heavy(self.needs):
            return False
        return not self.needs_one_of or any(not heavy(alt) for alt in self.needs_one_of)


@dataclass(frozen=True)
class Config:
    """Base of every estimator config: validates ranges and choices on construction."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            hint = hints[f.name]
            choices = f.metadata.get("choices")
            if choices is None and typing.get_origin(hint) is Literal:
                choices = typing.get_args(hint)
            if choices is not None and value not in choices:
                raise ValueError(
                    f"{type(self).__name__}.{f.name} must be one of {list(choices)}, got {value!r}"
                )
            if hint in (int, float) and not isinstance(value, bool) and isinstance(value, (int, float)):
                if isinstance(value, float) and not math.isfinite(value):
                    raise ValueError(f"{type(self).__name__}.{f.name} must be finite, got {value!r}")
                low, high = f.metadata.get("low"), f.metadata.get("high")
                if (low is not None and value < low) or (high is not None and value > high):
                    raise ValueError(
                        f"{type(self).__name__}.{f.name} must be in [{low}, {high}], got {value!r}"
                    )
            elif hint in (int, float) and not isinstance(value, (int, float)):
                raise ValueError(f"{type(self).__name__}.{f.name} must be a number, got {value!r}")
            elif hint is bool and not isinstance(value, bool):
                raise ValueError(f"{type(self).__name__}.{f.name} must be true or false, got {value!r}")
            kind = f.metadata.get("kind")
            if kind == "regex":
                try:
                    re.compile(value)
                except (re.error, TypeError) as exc:
                    raise ValueError(
                        f"{type(self).__name__}.{f.name}: {value!r} is not a regular expression ({exc})"
                    ) from None
            elif kind == "base_estimator":
                bases = [n for n in names() if get(n).family not in ("modifier", "aggregation")]
                if value not in bases:
                    raise ValueError(
                        f"{type(self).__name__}.{f.name} must be a registered estimator that is "
                        f"not a modifier ({', '.join(bases)}), got {value!r}"
                    )

    def scope(self) -> str:
        """The batch this estimator needs for its true number (registry.SCOPES): its group by default;
        configs of estimators with batch statistics (step) or fitted models (run) override this."""
        return "group"

    def reads(self) -> tuple[str, ...] | None:
        """Optional batch fields this estimator reads beyond its declared needs (token ids, the mask, ids
        and scores always come): None, the default, means any field the run has. A streamed estimate
        loads only `needs` plus these (`fields_for`); the streamed == in-memory test checks the claim."""
        return None


class UnknownEstimator(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


_REGISTRY: dict[str, EstimatorSpec] = {}
_ALIASES: dict[str, str] = {}
"""Deprecated name -> current name. An alias resolves in `get` (so links, `--estimator oldname` and scripts
keep working for one release) with a deprecation line on stderr; `names()` lists current names only."""
_WARNED: set[str] = set()


def param(
    default: Any,
    *,
    help: str,
    low: float | None = None,
    high: float | None = None,
    choices: tuple | None = None,
    kind: str | None = None,
) -> Any:
    """A config field with its default, range (inclusive) or choices, and one line of help.

    kind: "regex" (must compile) or "base_estimator" (a registered estimator that is not a modifier):
    checked by `Config` when the config is built."""
    meta = {"help": help, "low": low, "high": high, "choices": choices, "kind": kind}
    return field(default=default, metadata=meta)


def register(
    name: str,
    config_cls: type,
    description: str,
    needs: tuple[str, ...] = (),
    family: str = "credit",
    needs_one_of: tuple[tuple[str, ...], ...] = (),
    source: str = "",
    aliases: tuple[str, ...] = (),
    explain: Callable[[Any], list[str]] | None = None,
) -> Callable:
    """Decorator: `@register("grpo", GRPOConfig, "one line", explain=fn)`. Registering a name twice raises."""

    def wrap(fn: Callable) -> Callable:
        if name in _REGISTRY:
            raise ValueError(f"estimator {name!r} is already registered")
        if not (
            isinstance(config_cls, type)
            and issubclass(config_cls, Config)
            and dataclasses.is_dataclass(config_cls)
            and config_cls.__dataclass_params__.frozen
        ):
            raise TypeError(f"config of {name!r} must be a frozen dataclass subclassing registry.Config")
        if isinstance(needs, str) or not all(isinstance(n, str) for n in needs):
            raise TypeError(f"needs of {name!r} must be a tuple of field names, got {needs!r}")
        alternatives = tuple(tuple(alt) for alt in needs_one_of)
        if any(
            not alt or isinstance(alt, str) or not all(isinstance(n, str) for n in alt)
            for alt in needs_one_of
        ):
            raise TypeError(
                f"needs_one_of of {name!r} must be non-empty tuples of field names, got {needs_one_of!r}"
            )
        _REGISTRY[name] = EstimatorSpec(
            name,
            fn,
            config_cls,
            description,
            tuple(needs),
            family,
            alternatives,
            source=source,
            explain=explain,
        )
        for old in aliases:
            if old in _REGISTRY or old in _ALIASES:
                raise ValueError(f"alias {old!r} of {name!r} is already a name or an alias")
            _ALIASES[old] = name
        return fn

    return wrap


def names() -> list[str]:
    return list(_REGISTRY)


def aliases() -> dict[str, str]:
    """Deprecated names and the current names they resolve to."""
    return dict(_ALIASES)


def canonical(name: str) -> str:
    """The current name of `name`: itself, or what a deprecated alias resolves to (with a deprecation
    line on stderr, once per alias and process). Unknown names come back unchanged."""
    new = _ALIASES.get(name)
    if new is None:
        return name
    if name not in _WARNED:
        _WARNED.add(name)
        message = (
            f"creditlens: estimator name {name!r} is deprecated and will be removed in the next "
            "release; "
            f"use {new!r} (same results)"
        )
        print(message, file=sys.stderr)
    return new


def get(name: str) -> EstimatorSpec:
    name = canonical(name)
    if name not in _REGISTRY:
        raise UnknownEstimator(f"unknown estimator {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def available_fields(batch: RolloutBatch) -> frozenset[str]:
    """Names of the optional fields `batch` carries: per-token fields that are not None, `tokens`
    (token text), and every extras key (e.g. old_entropies, mc_values, mc_mask, hidden)."""
    return frozenset([n for n in OPTIONAL_FIELDS if getattr(batch, n) is not None] + list(batch.extras))


def supported(batch: RolloutBatch, resources: tuple[str, ...] = ()) -> list[str]:
    """Registered names whose needs `batch` meets (plus `resources`, e.g. (MODEL,) when a model is
    loaded). Config choices can add needs (gae's value_source='stored' needs values): defaults only."""
    available = available_fields(batch) | set(resources)
    return [n for n in names() if get(n).unmet(available) is None]


def check_needs(name: str, batch: RolloutBatch) -> None:
    """Raise a `BatchError` saying what `batch` lacks for estimator `name` and how to get it."""
    spec = get(name)
    available = available_fields(batch)
    if spec.unmet(available) is None:
        return
    if any(n in MC_NEEDS and n not in available for n in spec.needs):
        raise BatchError(
            f"{name} needs resampling results (extras {', '.join(MC_NEEDS)}) and this run has "
            "none; run `creditlens resample --run RUN --rollout ID --suggest entropy:5` first"
        )
    scored = [MODEL_SCORE_EXTRAS[n] for n in spec.needs if n in MODEL_SCORE_EXTRAS and n not in available]
    if scored:
        extras = ", ".join(n for n, m in MODEL_SCORE_EXTRAS.items() if m == scored[0])
        raise BatchError(
            f"{name} needs {scored[0]} scores of the policy model (extras {extras}) for every "
            "rollout of the batch (its group), and some have none; run `creditlens "
            f"model-credit --run RUN --method {scored[0]} --rollout ID` (or --rollouts all) "
            "first"
        )
    batch.require(*spec.needs)  # names the missing fields and how to fill them
    options = " or ".join(" + ".join(alt) for alt in spec.needs_one_of)  # `needs` are met: no alternative is
    raise BatchError(
        f"{name} needs {options}; this run has none of these in full (import the missing "
        f"fields, or fill model fields with `creditlens score --model DIR`)"
    )


def unavailable(batch: RolloutBatch) -> dict[str, str]:
    """Estimators that cannot run on `batch` with their defaults: name -> what is missing and how to
    get it (the message `estimate` would fail with). The app lists them instead of offering them."""
    out = {}
    for name in names():
        try:
            check_needs(name, batch)
        except BatchError as exc:
            out[name] = str(exc)
    return out


def fields_for(name: str, config: Any) -> frozenset[str] | None:
    """The batch fields estimator `name` reads under `config` (None: every field the run has)."""
    spec = get(name)
    reads = config.reads() if hasattr(config, "reads") else None
    if reads is None or (hasattr(config, "fits_values") and config.fits_values()):
        return None  # the fitted value probe's features use whatever fields the run has
    return frozenset([*spec.needs, *(n for alt in spec.needs_one_of for n in alt), *reads])


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
    """Run estimator `name` on `batch`; checks the output contract (shape, finite, 0 on padding).

    The estimator sees `batch.trained()`: tokens the trainer does not train (`loss_mask` 0: a tool's
    output, an environment's observation) are holes like padding, so they get exactly 0 and no
    normalization, mean, weight or position counts them; they stay in the batch's rows."""
    spec = get(name)
    if config is None:
        config = make_config(name, **overrides)
    batch = batch.trained()
    batch.validate()
    check_needs(name, batch)
    if batch.T == 0:  # every response is empty: nothing to credit (kernels index position 0 or reduce over T)
        return EstimatorResult(torch.zeros(batch.response_mask.shape, dtype=torch.float32), {"empty": True})
    result = spec.fn(batch, config)
    adv = result.advantages
    if adv.shape != batch.response_mask.shape:
        raise RuntimeError(
            f"estimator {name!r} returned shape {tuple(adv.shape)}, expected {(batch.B, batch.T)}"
        )
    if not bool(torch.isfinite(adv).all()):
        raise RuntimeError(f"estimator {name!r} produced NaN/inf advantages")
    if bool(adv.masked_fill(batch.response_mask.to(adv.device), 0.0).any()):
        raise RuntimeError(f"estimator {name!r} wrote non-zero advantages on padding or untrained tokens")
    return result


def config_schema(name: str) -> dict:
    """Name, description, family, needs, needs_one_of, model_free and fields (name, type, default, low,
    high, choices, help)."""
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
        out_fields.append(
            {
                "name": f.name,
                "type": type_name,
                "default": f.default,
                "low": f.metadata.get("low"),
                "high": f.metadata.get("high"),
                "choices": list(choices) if choices else None,
                "help": f.metadata.get("help", ""),
            }
        )
    return {
        "name": spec.name,
        "description": spec.description,
        "family": spec.family,
        "source": spec.source,
        "aliases": sorted(old for old, new in _ALIASES.items() if new == spec.name),
        "needs": list(spec.needs),
        "needs_one_of": [list(alt) for alt in spec.needs_one_of],
        "model_free": spec.model_free,
        "scope": spec.scope_for(spec.config_cls()),
        "fields": out_fields,
    }


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of the estimator sources, the channels and the batch (where the summed channel `all` is
    computed): cached outputs from older code never match."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    sources = [*root.glob("*.py"), *(root / "methods").glob("*.py")]
    sources += [root.parent / "credit" / "channels.py", root.parent / "core" / "batch.py"]
    for path in sorted(sources):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def config_hash(name: str, config: Any) -> str:
    """The store's cache key of an estimator output: name, every config field, the code version."""
    payload = {"estimator": canonical(name), "config": dataclasses.asdict(config), "code": code_fingerprint()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]
