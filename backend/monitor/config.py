"""What the credit-health monitors are and how they are tuned: the one list of detectors (name, statistic,
direction and default smallest change, what to do when one fires) and the settings read from TOML.

A settings file (`creditlens monitor --config FILE`) overrides any default; every key is optional:

    [onset]                 # the change-point rule for every detector (backend/monitor/change_point.py)
    min_baseline = 5        # earlier steps needed before an onset can be called
    window = 20             # at most this many earlier steps form the baseline
    persistence = 2         # consecutive departing steps that confirm an onset
    z_warn = 4.0            # robust z of a departure
    z_alert = 8.0           # robust z (at the onset step) that makes it an alert
    top_rollouts = 5        # rollout ids listed per alert

    [detectors.entropy_collapse]
    enabled = true
    min_rel = 0.25          # plus any [onset] key, for this detector only
    direction = "down"

An unknown section, detector or key is an error that names the file and the key (a typo never silently
keeps a default).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from backend.core.errors import InputError
from backend.monitor.change_point import OnsetRule


@dataclass(frozen=True)
class Detector:
    """name: the TOML section and the alerts' `detector`; statistic: what is measured per step;
    direction/min_delta/min_rel: the defaults of the onset rule's fields of the same name; action: what a
    user does when it fires (docs/monitors.md repeats these)."""

    name: str
    statistic: str
    direction: str
    min_delta: float = 0.0
    min_rel: float = 0.0
    action: str = ""


DETECTORS: tuple[Detector, ...] = (
    Detector(
        "class_share",
        "per token class, its share of the step's positive credit Σmax(A,0) and of "
        "its negative credit Σmax(−A,0) (the run's classes, under the chosen estimator and channel)",
        "both",
        min_delta=0.05,
        action="open the rollouts: a class gaining positive credit that carries no answer (filler, "
        "a phrase a judge pays for) is reward hacking in the making; fix the reward, or give "
        "the phrase its own penalised class or channel",
    ),
    Detector(
        "channel_takeover",
        "per reward channel, its share of Σ|β·Ã| over the step's tokens "
        "(split-channel credit, the Tune view's share of |A|)",
        "up",
        min_delta=0.10,
        action="one channel is steering the update: check its scale and β (Tune), whether its scores "
        "saturate or its penalty fires on every response",
    ),
    Detector(
        "entropy_collapse",
        "mean token entropy over the step (token-weighted)",
        "down",
        min_rel=0.25,
        action="the policy is becoming deterministic fast: lower the learning rate, raise the "
        "entropy bonus or the KL coefficient, check for a reward that pays one template",
    ),
    Detector(
        "kl_acceleration",
        "growth of the mean k1 KL to the reference from the previous step (kl_t − kl_{t−1})",
        "up",
        min_delta=0.005,
        action="the policy leaves the reference faster than before: check the KL coefficient and the "
        "reward of the rollouts with the largest KL",
    ),
    Detector(
        "length_drift",
        "mean response length (tokens)",
        "both",
        min_rel=0.20,
        action="read the longest (or shortest) rollouts: padding that a judge rewards, or answers "
        "cut short; consider a length channel",
    ),
    Detector(
        "truncation",
        "share of responses cut at the length limit",
        "up",
        min_delta=0.05,
        action="responses run into max length: raise the limit or penalise the overlong tail; "
        "truncated responses rarely carry a scored answer",
    ),
    Detector(
        "zero_variance",
        "share of groups whose responses all score the same on the main channel",
        "up",
        min_delta=0.15,
        action="these groups give no gradient under group-relative estimators: the prompts became "
        "too easy or too hard, or the reward saturated; refresh the prompt mix",
    ),
    Detector(
        "repetition",
        "mean over rollouts of the share of 16-token windows repeating an earlier one",
        "up",
        min_delta=0.03,
        action="looping output: read the rollouts; check the sampling temperature and whether a "
        "reward pays for length",
    ),
    Detector(
        "garbled",
        "mean over rollouts of the share of characters that are control/replacement "
        "characters or lie in a word mixing Latin with another script",
        "up",
        min_delta=0.005,
        action="broken text usually means numerics (bf16/fp16 logits, a sampler or engine mismatch) "
        "or a tokenizer mismatch: compare the inference and training logprobs",
    ),
    Detector(
        "logged_gap",
        "mean |recomputed mean A − the trainer's logged advantage| over the step's "
        "rollouts (runs that log an advantage)",
        "up",
        min_delta=0.05,
        action="the trainer's advantage stopped matching the recomputed one: check its normalization, "
        "reward aggregation and the group ids the trainer used",
    ),
)
NAMES = tuple(d.name for d in DETECTORS)
_ONSET_KEYS = ("min_baseline", "window", "persistence", "z_warn", "z_alert")
_DETECTOR_KEYS = ("enabled", *_ONSET_KEYS, "min_delta", "min_rel", "direction")
# Keys of one detector beyond the onset rule's, with their defaults.
EXTRA_KEYS = {"channel_takeover": {"groups_per_step": 16}}


def detector(name: str) -> Detector:
    for d in DETECTORS:
        if d.name == name:
            return d
    raise InputError(f"detector {name!r}: no such detector; detectors: {', '.join(NAMES)}")


@dataclass(frozen=True)
class MonitorSettings:
    """onset: the rule's shared fields as (key, value) pairs; top_rollouts: ids listed per alert;
    detectors: (name, ((key, value), ...)) overrides per detector. Hashable, so a view can cache on it."""

    onset: tuple[tuple[str, object], ...] = ()
    top_rollouts: int = 5
    detectors: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()

    def enabled(self, name: str) -> bool:
        return bool(dict(dict(self.detectors).get(name, ())).get("enabled", True))

    def option(self, name: str, key: str):
        """A detector's own setting beyond the onset rule (EXTRA_KEYS), or its default."""
        return dict(dict(self.detectors).get(name, ())).get(key, EXTRA_KEYS[name][key])

    def rule(self, name: str) -> OnsetRule:
        """The onset rule of detector `name`: defaults, then [onset], then [detectors.<name>]."""
        d = detector(name)
        fields = {
            "direction": d.direction,
            "min_delta": d.min_delta,
            "min_rel": d.min_rel,
            **dict(self.onset),
            **dict(dict(self.detectors).get(name, ())),
        }
        for key in ("enabled", *EXTRA_KEYS.get(name, {})):
            fields.pop(key, None)
        return OnsetRule(**fields)


def _check_keys(table: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r}; keys: {', '.join(allowed)}")


def parse_settings(data: dict, source: str = "settings") -> MonitorSettings:
    """Settings from a parsed TOML document (`source` names it in errors)."""
    _check_keys(data, ("onset", "detectors"), source)
    onset = dict(data.get("onset", {}))
    _check_keys(onset, (*_ONSET_KEYS, "top_rollouts"), f"{source} [onset]")
    top = onset.pop("top_rollouts", 5)
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise InputError(f"{source} [onset] top_rollouts: expected a whole number >= 1, got {top!r}")
    detectors = dict(data.get("detectors", {}))
    overrides = []
    for name, table in detectors.items():
        if name not in NAMES:
            raise InputError(f"{source} [detectors.{name}]: no such detector; detectors: {', '.join(NAMES)}")
        if not isinstance(table, dict):
            raise InputError(f"{source} detectors.{name}: expected a table [detectors.{name}]")
        extra = EXTRA_KEYS.get(name, {})
        _check_keys(table, (*_DETECTOR_KEYS, *extra), f"{source} [detectors.{name}]")
        if not isinstance(table.get("enabled", True), bool):
            raise InputError(f"{source} [detectors.{name}] enabled: expected true or false")
        for key in extra:
            value = table.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(
                    f"{source} [detectors.{name}] {key}: expected a whole number >= 0, got {value!r}"
                )
        overrides.append((name, tuple(sorted(table.items()))))
    settings = MonitorSettings(tuple(sorted(onset.items())), top, tuple(sorted(overrides)))
    for name in NAMES:  # every rule builds, or the error says which and why
        try:
            settings.rule(name)
        except (TypeError, ValueError) as exc:
            where = f"[detectors.{name}]" if name in dict(overrides) else "[onset]"
            raise InputError(f"{source} {where}: {exc}") from None
    return settings


def load_settings(path: str | Path | None) -> MonitorSettings:
    """The settings of a TOML file (None: the defaults); InputError names the file and what is wrong."""
    if path is None:
        return MonitorSettings()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read the monitor settings ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    return parse_settings(data, str(path))


def defaults_toml() -> str:
    """Every setting at its default, as a TOML file a user can edit (`creditlens monitor --defaults`)."""
    rule = OnsetRule()
    lines = ["[onset]"]
    lines += [f"{k} = {getattr(rule, k)!r}" for k in _ONSET_KEYS]
    lines.append(f"top_rollouts = {MonitorSettings().top_rollouts}")
    for d in DETECTORS:
        lines += [
            "",
            f"[detectors.{d.name}]",
            "# " + d.statistic,
            "enabled = true",
            f'direction = "{d.direction}"',
            f"min_delta = {d.min_delta!r}",
            f"min_rel = {d.min_rel!r}",
        ]
        lines += [f"{k} = {v!r}" for k, v in EXTRA_KEYS.get(d.name, {}).items()]
    return "\n".join(lines) + "\n"
