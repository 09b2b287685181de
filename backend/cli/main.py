"""The parser over every command module and the entry point (`creditlens` = `main`).

`InputError`/`StoreError`/`BatchError` become one line on stderr and exit code 2, with nothing written.
"""

from __future__ import annotations

import argparse
import sys

from backend.cli import (
    app_server,
    checkpoints,
    estimators,
    explorer,
    model_credit,
    models,
    monitor,
    steps,
    store,
    synthetic,
    teacher,
)
from backend.core.batch_fields import BatchError
from backend.core.errors import InputError, StoreError

# Areas that contribute subcommands, in the order `creditlens --help` lists them.
COMMAND_MODULES = (
    store,
    checkpoints,
    estimators,
    models,
    model_credit,
    teacher,
    steps,
    synthetic,
    explorer,
    monitor,
    app_server,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="creditlens", description="Token-level credit inspection for GRPO runs"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "forwards_rest", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if rest:
        args.rest = rest
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
