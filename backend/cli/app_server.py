"""`creditlens app ...`: start the Streamlit app; `creditlens watch PATH`: follow a training folder and serve
the app on it.

The commands know only the path of the app's launcher (`app/server/launch.py`) and hand it the server's
arguments: the server's options, its access token and the store preparation are app logic, and `backend`
never imports `app`. `creditlens app --help` prints the launcher's options.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode

from backend.core.errors import InputError
from backend.core.foreground import run_in_foreground, run_together
from backend.demo.store_setup import prepare_store
from backend.ingest import formats
from backend.store import default_db_path

APP_LAUNCHER = Path(__file__).resolve().parents[2] / "app" / "server" / "launch.py"


def cmd_app(args) -> int:
    return run_in_foreground([sys.executable, str(APP_LAUNCHER), *getattr(args, "rest", [])])


def watch_commands(args) -> list[list[str]]:
    """`creditlens watch`'s two processes: `import --follow --monitor` on the folder, and the app opened on
    the run's Trends with Live on."""
    run = args.run or Path(args.path).resolve().name
    db = str(args.db or default_db_path())
    follower = [sys.executable, "-m", "backend.cli", "import", str(args.path), "--run", run, "--db", db]
    follower += ["--follow", "--monitor", "--poll", str(args.poll)]
    for flag, value in (("--format", args.format), ("--model", args.model)):
        if value is not None:
            follower += [flag, str(value)]
    if args.monitor_config is not None:
        follower += ["--monitor-config", str(args.monitor_config)]
    if args.append:
        follower.append("--append")
    view = "trends?" + urlencode({"run": run, "live": "1"})
    server = [sys.executable, str(APP_LAUNCHER), "--db", db, "--port", str(args.port), "--host", args.host]
    server += ["--open", view]
    return [follower, server]


def cmd_watch(args) -> int:
    if Path(args.path).exists() and not Path(args.path).is_dir():
        raise InputError(f"{args.path}: watch needs the folder the trainer writes its step files to")
    # a folder not there yet is the trainer's to create: the follower waits for it and says so
    # The server imports the bundled runs a store lacks on start (as `creditlens app` does), holding the write
    # lock for the whole import: tens of seconds on a loaded machine. Side by side with the follower, the
    # follower waited on that lock and gave up (CI: "the store is open for writing in another process").
    # Done first, here, the server finds nothing to import and holds the lock only to check.
    imported = prepare_store(Path(args.db or default_db_path()))
    if imported:
        print(f"imported bundled runs: {', '.join(imported)}", file=sys.stderr)
    return run_together(watch_commands(args))


def add_commands(sub) -> None:
    p = sub.add_parser(
        "app",
        add_help=False,  # --help goes to the launcher, which owns the options
        help="start the Streamlit app (127.0.0.1 unless --host); `creditlens app --help` lists the options",
    )
    p.set_defaults(func=cmd_app, forwards_rest=True)

    p = sub.add_parser(
        "watch",
        help="follow a training folder (import --follow with the monitors) and serve the app on its run, "
        "live; Ctrl-C stops both",
    )
    p.add_argument(
        "path",
        type=Path,
        help="the folder the trainer writes step files to (verl rollout_data_dir, TRL completions/, the "
        "recorder's folder, native step_<N>.jsonl files); one not there yet is waited for",
    )
    p.add_argument("--run", default=None, help="the run's name (default: the folder's name)")
    p.add_argument("--db", type=Path, default=None, help=f"store file (default {default_db_path()})")
    p.add_argument("--port", type=int, default=8501, help="port to serve the app on (default 8501)")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; see creditlens app --help)"
    )
    p.add_argument(
        "--format", choices=formats.followed(), default=None, help="the step files' format (default: detect)"
    )
    p.add_argument("--model", default=None, help="the run's model folder (as import --model)")
    p.add_argument(
        "--poll", type=float, default=0.5, help="seconds between looks at the folder (default 0.5)"
    )
    p.add_argument(
        "--monitor-config", type=Path, default=None, help="the monitors' TOML settings (docs/monitors.md)"
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="follow into an existing run that this folder never fed (its model and channels must match)",
    )
    p.set_defaults(func=cmd_watch)
