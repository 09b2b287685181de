"""`creditlens ...` / `python -m backend.cli ...`: the command line of DESIGN.md.

Each area owns its subcommands in a `commands` module with `add_commands(subparsers)`; a handler
gets the parsed args and returns an exit code. `InputError`/`StoreError`/`BatchError` become one
line on stderr and exit code 2, with nothing written.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from backend.errors import InputError, StoreError

# Areas that contribute subcommands (module path; each has add_commands(subparsers)).
COMMAND_MODULES = (
    "backend.store.commands",
    "backend.estimators.commands",
    "backend.models.commands",
    "backend.teacher_commands",
    "backend.model_credit_commands",
    "backend.synthetic_commands",
    "backend.explorer_commands",
    "app.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="creditlens", description="Token-level credit inspection for GRPO runs"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # area not built yet
                continue
            raise
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from backend.batch import BatchError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (InputError, StoreError, BatchError) as exc:
        print(f"creditlens {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"creditlens {args.command}: interrupted; nothing was committed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
