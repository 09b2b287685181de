"""`creditlens app`: start the Streamlit server on 127.0.0.1 over a store (created if missing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from backend.store import default_db_path
from backend.store.commands import open_store

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
        "--client.toolbarMode",  # no "Deploy" button, from any working directory
        "viewer",
        "--",
        "--db",
        str(db),
    ]


def prepare_store(db: Path) -> list[str]:
    """Create/migrate the store and import the bundled sample runs it lacks; returns their names."""
    from backend.store.commands import import_bundled

    with open_store(db) as store:
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


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real `streamlit run` server on 127.0.0.1 for browser tests and the bench (context manager)."""

    def __init__(self, db: Path, port: int | None = None, log: Path | None = None):
        self.db, self.port, self.log = Path(db), port or free_port(), log
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        import time
        import urllib.request

        prepare_store(self.db)
        out = open(self.log, "w") if self.log else subprocess.DEVNULL  # noqa: SIM115 - closed in __exit__
        env = dict(os.environ, CREDITLENS_DB=str(self.db), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            streamlit_command(self.db, self.port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(MAIN.parents[1]),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with code {self.proc.returncode} (log: {self.log})")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"streamlit did not answer on {self.url} within 60 s (log: {self.log})")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
