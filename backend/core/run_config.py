"""A run's trainer configuration as stored with it, flattened, and the keys that differ between runs.

The TRL recorder writes the trainer's `args` beside its step files (`CONFIG_FILE`); an import finds that file,
or a Hydra config (`.hydra/config.yaml`, verl's) in the imported folder or its parent
(`backend.ingest.run_config`), and keeps it in the run's JSON meta under `config` (`CONFIG_KEY`, beside
`config_source`). Nested sections are flattened to dotted keys
(`actor_rollout_ref.actor.kl_loss_coef`) so two runs compare key by key; lists become their JSON text (a
value that compares and prints the same everywhere).
"""

from __future__ import annotations

import json
from typing import Any

CONFIG_FILE = "trainer_config.json"
"""The file the TRL recorder writes into its folder: the trainer's `args` as a JSON object."""
CONFIG_KEY = "config"
"""The run meta's key holding the trainer's configuration (a JSON object)."""
SOURCE_KEY = "config_source"
"""The run meta's key saying where the configuration came from (`trl args`, `hydra: PATH`)."""
Scalar = str | int | float | bool | None
TRL_EPSILON = 1e-4
"""What TRL's GRPOTrainer adds to the std it divides by (a constant of the trainer, TRL 1.16
`_generate_and_score_completions`); the TRL importer keeps it in the meta of every rollout with a logged
advantage (`advantage_epsilon`), and the run's recipe uses it (backend.credit.as_trained)."""


def flatten(config: dict | None, prefix: str = "") -> dict[str, Scalar]:
    """`{"actor": {"lr": 1e-6}}` -> `{"actor.lr": 1e-6}`; lists and other values as JSON text."""
    out: dict[str, Scalar] = {}
    for key, value in (config or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[name] = value
        else:
            out[name] = json.dumps(value, sort_keys=True, default=str)
    return out


def differing_keys(configs: dict[str, dict[str, Scalar]]) -> list[str]:
    """The flattened keys whose value is not the same in every run of `configs` (run -> flattened config);
    a key one run lacks differs. Runs without any stored configuration are left out of the comparison (they
    have nothing to differ by). Sorted."""
    stored = [c for c in configs.values() if c]
    if len(stored) < 2:
        return []
    keys = sorted(set().union(*stored))
    missing = object()
    return [k for k in keys if len({_comparable(c.get(k, missing)) for c in stored}) > 1]


def _comparable(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", float(value))  # 1 and 1.0 are the same setting
    return ("other", id(value))
