"""Verifiers and local rules: answer match, format, style spans, repetition, length.

`get_verifier(name)` resolves a registered name or `module:function`; `evaluate(...)` scores one
response on every channel (task, format, style, length) with token-local style/format rewards.
"""

from backend.rewards.evaluate import Evaluation, evaluate
from backend.rewards.registry import (
    describe,
    get_verifier,
    register_verifier,
    run_verifier,
    verifier_names,
)

__all__ = [
    "Evaluation",
    "describe",
    "evaluate",
    "get_verifier",
    "register_verifier",
    "run_verifier",
    "verifier_names",
]
