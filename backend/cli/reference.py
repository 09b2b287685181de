"""The command reference, docs/commands.md, written from the argparse definitions (`build_parser`), so it
cannot drift from the program: `python -m backend.cli.reference > docs/commands.md`.
tests/backend/test_docs_drift.py fails when the file differs from what this prints. `app` hands its arguments
to the app's launcher, which owns its options: its section is the launcher's `--help`, run here as the command
runs it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from backend.cli.app_server import APP_LAUNCHER
from backend.cli.main import build_parser

HEADER = """# Command reference

`creditlens` (installed by `make`) and `python -m backend.cli` are the same program. Bad input never ends
in a traceback: exit code 2 and one line on stderr naming the file, the line or record, and the field;
nothing is written.

The store every command reads and writes is `--db FILE` where given, else the file the environment variable
`CREDITLENS_DB` names, else `~/.creditlens/runs.duckdb`.

This page is generated from the argparse definitions: `python -m backend.cli.reference > docs/commands.md`
(a test fails when it is stale). `creditlens COMMAND --help` prints the same.
"""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers here and nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Command name -> its one-line help (the `help=` of `add_parser`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {}


def _option(action: argparse.Action) -> tuple[str, str]:
    """(the option as `--help` shows it, its help with choices and default)."""
    name = argparse.HelpFormatter("creditlens")._format_action_invocation(action)
    text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += (" " if text else "") + "(one of: " + ", ".join(str(c) for c in action.choices) + ")"
    if action.required and action.option_strings:
        text += (" " if text else "") + "(required)"
    return name, text


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line wrapped at 110 columns whatever the terminal (COLUMNS would change the page)."""
    formatter = argparse.HelpFormatter(parser.prog, width=110)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _launcher_help() -> str:
    """`creditlens app --help`, 110 columns wide: `app` hands its arguments to the app's launcher, which owns
    the options (and backend never imports the app), so the page runs it as the command does."""
    done = subprocess.run(
        [sys.executable, str(APP_LAUNCHER), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "110"},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{APP_LAUNCHER} --help failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference() -> str:
    """The whole page, Markdown."""
    parser = build_parser()
    helps = _helps(parser)
    out = [HEADER, "| command | what it does |", "|---|---|"]
    commands = _subcommands(parser)
    out += [f"| [`{name}`](#creditlens-{name}) | {helps.get(name, '')} |" for name in commands]
    for name, sub in commands.items():
        if sub.get_default("forwards_rest"):  # `app`: its launcher's options, as `creditlens app --help`
            out += ["", f"## creditlens {name}", "", helps.get(name, ""), "", "```", _launcher_help(), "```"]
            continue
        out += ["", f"## creditlens {name}", "", helps.get(name, ""), "", "```", _usage(sub), "```", ""]
        rows = [_option(a) for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        if rows:
            out += ["| option | meaning |", "|---|---|"]
            out += [f"| `{_cell(opt)}` | {_cell(text)} |" for opt, text in rows]
    # Defaults under the home folder (the store) read as ~, so the page is the same on every machine.
    return "\n".join(out).replace(str(Path.home()), "~") + "\n"


def main() -> int:
    sys.stdout.write(reference())
    return 0


if __name__ == "__main__":
    sys.exit(main())
