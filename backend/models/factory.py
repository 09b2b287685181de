"""`load_engine`: which engine opens a model folder here (vLLM on CUDA when installed, else transformers),
beside the engines it chooses between; `backend.models` re-exports it as the package's face."""

from __future__ import annotations

import importlib.util
import os

import torch

from backend.core.errors import InputError
from backend.models.engine import Engine, EngineName
from backend.models.transformers_engine import TransformersEngine
from backend.models.vllm_engine import VLLMEngine


def vllm_usable() -> bool:
    """vLLM importable and a CUDA device visible (what `engine="auto"` asks)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    return bool(torch.cuda.is_available())


def resolve_engine(
    engine: EngineName = "auto", device: str | None = None, need_entropies: bool = False
) -> str:
    """The engine `load_engine` opens: "vllm" or "transformers".

    `auto` takes vLLM when it is importable and a CUDA device is visible (and `device` is unset or
    CUDA), unless the caller needs per-token entropies of sampled tokens, which vLLM does not report.
    """
    if engine not in ("auto", "transformers", "vllm"):
        raise InputError(f"unknown engine {engine!r}; choose auto, transformers or vllm")
    if engine != "auto":
        return engine
    on_cuda = device is None or str(device).startswith("cuda")
    return "vllm" if on_cuda and not need_entropies and vllm_usable() else "transformers"


def engine_note(engine: EngineName = "auto", device: str | None = None) -> str:
    """One line for the UI: which engine `engine` opens here and what its samples lack."""
    chosen = resolve_engine(engine, device)
    prefix = f"{engine} → {chosen} here" if engine == "auto" else chosen
    if chosen == "vllm":
        return (
            f"{prefix}: vLLM reports the logprob of each sampled token but not its entropy "
            "(stored as NaN); scoring and anything that needs entropies run through transformers."
        )
    return f"{prefix}: sampled tokens carry their logprob and entropy."


def load_engine(
    model_dir: str | os.PathLike,
    engine: EngineName = "auto",
    device: str | None = None,
    allow_pickle: bool = False,
    need_entropies: bool = False,
    **kwargs,
) -> Engine:
    """Open a local model folder with the asked engine (see `resolve_engine` for what auto picks).

    Raises `InputError` for a folder that breaks the loading rules (see `backend.models.loading`) and
    `EngineUnavailable` (an `InputError`) when vLLM or a GPU is missing for `engine="vllm"`.
    """
    if resolve_engine(engine, device, need_entropies) == "vllm":
        if need_entropies:
            raise InputError(
                "the vLLM engine reports no entropies of sampled tokens; use --engine transformers"
            )
        return VLLMEngine(model_dir, allow_pickle=allow_pickle, **kwargs)
    return TransformersEngine(model_dir, device=device, allow_pickle=allow_pickle, **kwargs)
