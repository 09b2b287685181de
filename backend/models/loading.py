"""Safe model loading: local folders only, safetensors only unless asked, no remote code, no hub.

Every engine goes through `check_model_dir` before touching a file, so the rules live in one place:
- the path must be an existing local folder with a `config.json` (URLs and hub ids are refused:
  nothing is ever downloaded);
- weights must be safetensors; pickle checkpoints (`*.bin`, `*.pt`, `*.pth`, `*.ckpt`) can run code
  when unpickled, so they are refused unless the caller passes `allow_pickle=True`;
- a config that needs custom modeling code (`auto_map`) is refused: `trust_remote_code` stays off.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from backend.core.errors import InputError

# Nothing is reachable from a hub; make every library call fail fast instead of retrying a network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


class EngineUnavailable(InputError):
    """The asked-for engine cannot run here (vLLM not installed, no GPU)."""


@dataclass(frozen=True)
class ModelFolder:
    path: Path
    use_safetensors: bool
    """False only when the folder has pickle weights alone and the caller allowed pickle."""


def check_model_dir(model_dir: str | os.PathLike, allow_pickle: bool = False) -> ModelFolder:
    """Validate a model folder against the loading rules; raise `InputError` saying what would fix it."""
    text = os.fspath(model_dir)
    if "://" in text:
        raise InputError(f"model {text!r} is a URL; only local folders are loaded (nothing is downloaded)")
    path = Path(text).expanduser()
    if not path.exists():
        raise InputError(
            f"model folder {text!r} does not exist; pass a local Hugging Face folder "
            f"(config.json + *.safetensors) — hub ids are not downloaded"
        )
    if not path.is_dir():
        raise InputError(f"model {text!r} is a file; pass the folder that holds config.json and the weights")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise InputError(f"model folder {text!r} has no config.json")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{config_file}: not valid JSON ({exc})") from exc
    if isinstance(config, dict) and config.get("auto_map"):
        raise InputError(
            f"{config_file}: the model needs custom code (auto_map); remote code is never run "
            f"(trust_remote_code is off) — use a model whose architecture transformers ships"
        )
    safetensors = sorted(p.name for p in path.glob("*.safetensors"))
    pickles = sorted(
        p.name
        for p in path.iterdir()
        if p.suffix in PICKLE_SUFFIXES
        and "optimizer" not in p.name
        and not p.name.startswith("training_args")
    )
    if safetensors:
        return ModelFolder(path.resolve(), use_safetensors=True)
    if pickles and not allow_pickle:
        raise InputError(
            f"model folder {text!r} has only pickle weights ({', '.join(pickles)}); unpickling can run "
            f"code, so it is refused — convert them to safetensors or pass --allow-pickle if you trust them"
        )
    if not pickles:
        raise InputError(f"model folder {text!r} has no weights (*.safetensors)")
    return ModelFolder(path.resolve(), use_safetensors=False)
