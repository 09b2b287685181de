"""The parser over every command module and the entry point (`creditlens` = `main`).

`InputError`/`StoreError`/`BatchError` become one line on stderr and exit code 2, with nothing written.
"""

from __future__ import annotations

import argparse
import io
import os
import sys

from backend.cli import (
    agent_turns,
    app_server,
    attribution,
    checkpoints,
    compare_estimators,
    compare_runs,
    estimators,
    explorer,
    landed,
    model_credit,
    models,
    monitor,
    steps,
    store,
    synthetic,
    teacher,
    tune,
)
from backend.core import workers
from backend.core.batch_fields import BatchError
from backend.core.errors import InputError, StoreError, one_line
from backend.store.connection import interrupted

# Areas that contribute subcommands, in the order `creditlens --help` lists them.
COMMAND_MODULES = (
    store,
    checkpoints,
    estimators,
    models,
    model_credit,
    attribution,
    teacher,
    steps,
    synthetic,
    explorer,
    compare_estimators,
    compare_runs,
    agent_turns,
    landed,
    monitor,
    tune,
    app_server,
)


class OneLineErrors(argparse.ArgumentParser):
    """argparse with its errors as every other bad input: one line on stderr and exit code 2. The usage
    block argparse prints first is what `--help` shows; the line points there instead. The subcommands'
    parsers are of this class too (`add_subparsers` makes its parsers of the parent's class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (`{self.prog} --help` for usage)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="creditlens", description="Token-level credit inspection for GRPO runs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The exit code of one command; 141 (128 + SIGPIPE, as a shell reports `yes | head`) when the reader of
    its output went away first (`creditlens estimators | head`), with no traceback."""
    try:
        try:
            return _run(argv)
        finally:  # what is still buffered goes now, while a closed pipe can still be caught here
            sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return 141


def _discard_stdout() -> None:
    """Point stdout at /dev/null: Python flushes it again at exit, which would print the error anyway."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # not a file (a test's StringIO): nothing to flush at exit


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "forwards_rest", False):
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        commands[args.command].error(f"unrecognized arguments: {' '.join(rest)}")
    if rest:
        args.rest = rest
    try:
        if getattr(args, "splits_run", False):  # `--workers` / `--ray` (cli.common.add_workers_args)
            with workers.using(workers.Workers(args.workers, args.ray)):
                return int(args.func(args) or 0)
        return int(args.func(args) or 0)
    except (InputError, StoreError, BatchError) as exc:
        print(f"creditlens {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, RuntimeError) as exc:  # a RuntimeError: DuckDB's Ctrl-C inside a query
        if not interrupted(exc):
            raise
        print(f"creditlens {args.command}: interrupted; nothing was committed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
