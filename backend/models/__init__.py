"""Engines (transformers on CPU/CUDA, vLLM on CUDA), scoring and suffix resampling.

`load_engine(model_dir, engine="auto")` opens a local Hugging Face folder under the safe-loading
rules of `backend.models.loading`; `backend.models.resample` values positions of a rollout.
"""

from backend.models.engine import Engine, EngineUnavailable, Sample, Scored
from backend.models.factory import engine_note, load_engine, resolve_engine, vllm_usable

__all__ = [
    "Engine",
    "EngineUnavailable",
    "Sample",
    "Scored",
    "engine_note",
    "load_engine",
    "resolve_engine",
    "vllm_usable",
]
