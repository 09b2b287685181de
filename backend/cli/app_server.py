"""`creditlens app ...`: start the Streamlit app.

The command knows only the path of the app's launcher (`app/server/launch.py`) and hands it every argument
after `app`: the server's options, its access token and the store preparation are app logic, and
`backend` never imports `app`. `creditlens app --help` prints the launcher's options.
"""

from __future__ import annotations

import sys
from pathlib import Path

from backend.core.foreground import run_in_foreground

APP_LAUNCHER = Path(__file__).resolve().parents[2] / "app" / "server" / "launch.py"


def cmd_app(args) -> int:
    return run_in_foreground([sys.executable, str(APP_LAUNCHER), *getattr(args, "rest", [])])


def add_commands(sub) -> None:
    p = sub.add_parser(
        "app",
        add_help=False,  # --help goes to the launcher, which owns the options
        help="start the Streamlit app (127.0.0.1 unless --host); `creditlens app --help` lists the options",
    )
    p.set_defaults(func=cmd_app, forwards_rest=True)
