"""The trainer configuration beside an imported folder, kept with the run, so that
runs can be compared setting by setting (`creditlens compare-runs`).

Looked for in the imported folder (a file's folder when one file is imported, as `--follow` does) and then
in its parent: `trainer_config.json` (`run_config.CONFIG_FILE`, the TRL recorder's copy of the trainer's
`args`), else `.hydra/config.yaml` (the config Hydra saves for a verl run; a `rollout_data_dir` usually sits
inside the run's output folder). The first found is stored in the run's meta (`config`, `config_source`);
a file that cannot be read is an InputError naming it and the line.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from backend.core import run_config
from backend.core.errors import InputError
from backend.store import Store

HYDRA_CONFIG = Path(".hydra") / "config.yaml"


def find(path: Path) -> tuple[dict, str] | None:
    """(configuration, where it came from) for an imported file or folder; None when there is none."""
    folder = path if path.is_dir() else path.parent
    for place in (folder, folder.parent):
        recorded = place / run_config.CONFIG_FILE
        if recorded.is_file():
            return _read_json(recorded), f"trl args: {recorded}"
        hydra = place / HYDRA_CONFIG
        if hydra.is_file():
            return _read_yaml(hydra), f"hydra: {hydra}"
    return None


def keep(store: Store, run: str, found: tuple[dict, str] | None) -> None:
    """Store `found` (from `find`) in `run`'s meta unless it is there already."""
    if found is None or not store.has_run(run):
        return
    config, source = found
    meta = store.run_info(run)["meta"]
    if meta.get(run_config.CONFIG_KEY) != config or meta.get(run_config.SOURCE_KEY) != source:
        store.set_run_meta(run, run_config.CONFIG_KEY, config)
        store.set_run_meta(run, run_config.SOURCE_KEY, source)


def _read_json(path: Path) -> dict:
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the trainer configuration ({exc})") from None
    return _object(config, path)


def _read_yaml(path: Path) -> dict:
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise InputError(f"{path}: {where}not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the Hydra configuration ({exc})") from None
    return _object(json.loads(json.dumps(config, default=str)), path)  # dates and the like as text


def _object(config, path: Path) -> dict:
    if not isinstance(config, dict):
        kind = type(config).__name__
        raise InputError(f"{path}: the configuration must be a mapping of keys to values, got {kind}")
    return config
