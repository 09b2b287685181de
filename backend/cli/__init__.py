"""`creditlens ...` / `python -m backend.cli ...`: the command line (docs/commands.md), the top floor.

One module per area (`store`, `estimators`, `models`, `model_credit`, `teacher`, `synthetic`, `explorer`,
`monitor`, `app_server`)
with `add_commands(subparsers)`; a handler gets the parsed args and returns an exit code. The commands
import the rest of `backend`; nothing imports them but the entry point and tests.

Building the parser imports every command module, so their top-level imports stay light (the store,
DuckDB, pandas, Arrow): a handler that computes imports torch, the estimators or a model engine inside
itself (`# noqa: PLC0415 - heavy`). `--help` and the commands that only read the store (`runs`,
`rollouts`/`trends` without an estimator, `token-classes`, `delete`, `estimators`) then start in about the
time of importing DuckDB and pandas instead of 2+ s (docs/benchmarks.md); tests/test_architecture.py runs them
and fails when one of them imports torch, transformers or backend.estimators.
"""

from backend.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
