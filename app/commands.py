"""`creditlens app`: start the Streamlit server on 127.0.0.1 over a store (created if missing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from backend.store import Store, default_db_path

MAIN = Path(__file__).resolve().parent / "main.py"
MAX_UPLOAD_MB = 200


def streamlit_command(db: Path, port: int, host: str = "127.0.0.1") -> list[str]:
    """The `streamlit run` command line the app is served with."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(MAIN),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.maxUploadSize",
        str(MAX_UPLOAD_MB),
        "--browser.gatherUsageStats",
        "false",
        "--",
        "--db",
        str(db),
    ]


def prepare_store(db: Path) -> list[str]:
    """Create/migrate the store and import the bundled sample runs it lacks; returns their names."""
    from backend.store.commands import import_bundled

    with Store(db) as store:
        return import_bundled(store, quiet=True)


def cmd_app(args) -> int:
    db = Path(args.db or default_db_path())
    imported = prepare_store(db)
    if imported:
        print(f"imported bundled runs: {', '.join(imported)}", file=sys.stderr)
    print(f"Credit Lens on http://{args.host}:{args.port} (store {db})", file=sys.stderr)
    env = dict(os.environ, CREDITLENS_DB=str(db))
    try:
        return subprocess.call(streamlit_command(db, args.port, args.host), env=env)
    except KeyboardInterrupt:
        return 0


def add_commands(sub) -> None:
    p = sub.add_parser("app", help="start the Streamlit app on 127.0.0.1")
    p.add_argument("--db", type=Path, default=None, help=f"store file (default {default_db_path()})")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, local only)")
    p.set_defaults(func=cmd_app)
