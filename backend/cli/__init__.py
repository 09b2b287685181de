"""`creditlens ...` / `python -m backend.cli ...`: the command line of DESIGN.md, the top floor.

One module per area (`store`, `estimators`, `models`, `model_credit`, `teacher`, `synthetic`, `explorer`,
`monitor`, `app_server`)
with `add_commands(subparsers)`; a handler gets the parsed args and returns an exit code. The commands
import the rest of `backend`; nothing imports them but the entry point and tests.
"""

from backend.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
