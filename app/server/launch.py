"""`creditlens app` (`python app/server/launch.py ...`): the Streamlit server over a store (created if
missing).

The command line's `app` command only knows this file's path and hands it its arguments, so the
server's options, the access token and the store preparation stay app logic.

Bound to loopback (the default) it behaves as a local tool. Bound to any other address it requires an
access token (generated at start and printed with a ready-to-open URL, or given by `--token` /
`CREDITLENS_TOKEN`) unless `--no-token`; see `auth.py` and `gate.py` beside this file.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

from app import access, keys
from app.server import auth
from backend.core.errors import InputError, StoreError
from backend.core.foreground import run_in_foreground
from backend.demo.store_setup import prepare_store
from backend.store import default_db_path

SERVER = Path(__file__).resolve().parent / "asgi.py"  # the app (app/main.py) behind the token gate
MAX_UPLOAD_MB = 200


def streamlit_command(
    db: Path,
    port: int,
    host: str = "127.0.0.1",
    app_args: list[str] | tuple[str, ...] = (),
    script: Path = SERVER,
) -> list[str]:
    """The `streamlit run` command line the app is served with (`app_args`: `--read-only`, ...; `script`: the
    app, or another page served the same way, e.g. the bench's trivial baseline)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(script),
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
        # No watching of source files: a served tool does not rerun when a file changes. Streamlit's watcher
        # registers every imported module's file (torch's and pandas' included) for each new session and
        # polls them: about 0.4 s of the server's CPU per fresh page load (docs/benchmarks.md).
        "--server.fileWatcherType",
        "none",
        # No full garbage collection after every script run: with torch, transformers and pandas loaded it
        # walks about 300k objects, 0.15 s of CPU per run (per page load, per click); Python's own
        # generational collection still runs.
        "--runner.postScriptGC",
        "false",
        "--",
        "--db",
        str(db),
        *app_args,
    ]


def access_token(host: str, token: str | None, no_token: bool) -> tuple[str | None, bool]:
    """The token the server will require and whether it was generated here.

    Loopback: the given token if any, else none. Any other address: the given one (`--token`, else
    $CREDITLENS_TOKEN), else a new random one; `--no-token` means none.
    """
    given = token or os.environ.get(access.TOKEN_ENV) or None
    if no_token:
        if token:
            raise InputError("--no-token and --token contradict each other; pass one of them")
        return None, False
    if given or auth.is_loopback(host):
        return given, False
    return auth.new_token(), True


def app_arguments(
    db: Path, read_only: bool, import_roots: list[Path] | None, max_suffixes: int | None, say_skipped=True
):
    """The switches after `--` that carry the access settings to the Streamlit script.

    A root named with --import-root must exist (the user asked for it). The default roots (the store's
    folder and the cwd) are skipped with a line on stderr when missing: on a machine that never ran the
    app the store's folder does not exist until the store is created (`cmd_app` creates it first).
    """
    roots = []
    for root in import_roots or access.default_roots(db):
        resolved = Path(root).expanduser().resolve()
        if not resolved.is_dir():
            if import_roots:
                raise InputError(f"--import-root {root}: not a directory")
            if say_skipped:
                print(f"import root {resolved}: no such folder, skipped", file=sys.stderr)
            continue
        roots.append(resolved)
    out = ["--read-only"] if read_only else []
    for root in dict.fromkeys(roots):
        out += ["--import-root", str(root)]
    if max_suffixes is not None:
        if max_suffixes < 1:
            raise InputError(f"--max-suffixes: must be at least 1, got {max_suffixes}")
        out += ["--max-suffixes", str(max_suffixes)]
    return out


def _urls(host: str, port: int, token: str | None, view: str = "") -> list[str]:
    """The addresses to print; `view`: the path and query they open (`trends?run=NAME&live=1`)."""
    hosts = [host] if host not in ("0.0.0.0", "::", "") else ["127.0.0.1", socket.getfqdn()]
    path, _, query = view.lstrip("/").partition("?")
    if token:
        query = "&".join(q for q in (query, f"{keys.URL_TOKEN}={quote(token, safe='')}") if q)
    query = f"/{path}" + (f"?{query}" if query else "")
    scheme = "https" if os.environ.get("STREAMLIT_SERVER_SSL_CERT_FILE") else "http"  # Streamlit's own TLS
    return [f"{scheme}://{'[' + h + ']' if ':' in h else h}:{port}{query}" for h in hosts]


def cmd_app(args) -> int:
    db = Path(args.db or default_db_path())
    token, generated = access_token(args.host, args.token, args.no_token)
    # Arguments are checked before anything is written; the store (and its folder) is created before
    # the default import roots are resolved, since the store's folder is one of them.
    app_arguments(db, args.read_only, args.import_root, args.max_suffixes, say_skipped=False)
    if args.read_only:
        if not db.exists():
            raise InputError(f"{db}: no such store (read-only mode creates nothing; run creditlens init)")
    else:
        imported = prepare_store(db)
        if imported:
            print(f"imported bundled runs: {', '.join(imported)}", file=sys.stderr)
    app_args = app_arguments(db, args.read_only, args.import_root, args.max_suffixes)
    env = dict(os.environ, CREDITLENS_DB=str(db))
    env.pop(access.TOKEN_ENV, None)
    if token:
        env[access.TOKEN_ENV] = token  # the environment, not argv: `ps` shows argv to every user
    if not auth.is_loopback(args.host):
        print(
            f"Credit Lens is reachable from the network: bound to {args.host}:{args.port}.", file=sys.stderr
        )
        if token is None:
            print(
                "WARNING: --no-token: anyone who can reach this port can browse every run"
                + (
                    ""
                    if args.read_only
                    else ", import files from the import roots, delete runs and start jobs"
                )
                + ". Prefer an SSH tunnel (see docs/app-and-sharing.md).",
                file=sys.stderr,
            )
        else:
            print(
                "It asks for an access token" + (" (generated for this start)" if generated else "") + ".",
                file=sys.stderr,
            )
    roots = [app_args[i + 1] for i, a in enumerate(app_args) if a == "--import-root"]
    print(
        f"store {db}; path imports from: {', '.join(roots)}" + ("; read-only" if args.read_only else ""),
        file=sys.stderr,
    )
    for url in _urls(args.host, args.port, token, args.open):
        print(f"Credit Lens on {url}", file=sys.stderr)
    return run_in_foreground(streamlit_command(db, args.port, args.host, app_args), env=env)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="creditlens app", description="start the Streamlit app (127.0.0.1 unless --host)"
    )
    p.add_argument("--db", type=Path, default=None, help=f"store file (default {default_db_path()})")
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1, local only; any other address requires a token)",
    )
    p.add_argument(
        "--token",
        default=None,
        help=f"the access token (default: ${access.TOKEN_ENV}, else a new one when bound beyond loopback); "
        f"prefer ${access.TOKEN_ENV}, since other users can read command lines",
    )
    p.add_argument(
        "--no-token", action="store_true", help="no token even when bound beyond loopback (unsafe)"
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        help="browse, estimate and explain only: import, delete, score, resample and teacher are refused",
    )
    p.add_argument(
        "--import-root",
        type=Path,
        action="append",
        default=None,
        metavar="DIR",
        help="a folder path imports may read from (repeatable; default: the store's folder and the cwd)",
    )
    p.add_argument(
        "--open",
        default="",
        metavar="VIEW",
        help="the view and query of the printed address (default: the landing view), e.g. "
        "'trends?run=NAME&live=1' (creditlens watch prints that one)",
    )
    p.add_argument(
        "--max-suffixes",
        type=int,
        default=None,
        metavar="N",
        help=f"most suffixes (positions x samples) one resampling request may ask for "
        f"(default {access.DEFAULT_MAX_SUFFIXES})",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """`creditlens app ...`: bad input is one line on stderr and exit code 2, as for every command."""
    args = build_parser().parse_args(argv)
    try:
        return cmd_app(args)
    except (InputError, StoreError) as exc:
        print(f"creditlens app: error: {exc}", file=sys.stderr)
        return 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real `streamlit run` server for browser tests and the bench (context manager), bound to `host`
    (127.0.0.1 by default) and always reached on 127.0.0.1."""

    def __init__(
        self,
        db: Path,
        port: int | None = None,
        log: Path | None = None,
        host: str = "127.0.0.1",
        token: str | None = None,
        app_args: list[str] | tuple[str, ...] = (),
        script: Path = SERVER,
    ):
        self.db, self.port, self.log, self.script = Path(db), port or free_port(), log, Path(script)
        self.host, self.token, self.app_args = host, token, list(app_args)
        self.url = f"http://127.0.0.1:{self.port}"  # reached on loopback whatever the bind address
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        if "--read-only" not in self.app_args:
            prepare_store(self.db)
        out = open(self.log, "w") if self.log else subprocess.DEVNULL  # noqa: SIM115 - closed in __exit__
        env = dict(os.environ, CREDITLENS_DB=str(self.db), PYTHONUNBUFFERED="1")
        env.pop(access.TOKEN_ENV, None)
        if self.token:
            env[access.TOKEN_ENV] = self.token
        self.proc = subprocess.Popen(
            streamlit_command(self.db, self.port, self.host, self.app_args, self.script),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(SERVER.parents[2]),
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


if __name__ == "__main__":
    sys.exit(main())
