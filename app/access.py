"""Who may do what in this server process: the access token, read-only mode, import roots, job limits.

`creditlens app` decides these settings and hands them to the Streamlit process the way it hands over
the store: switches after `--` on the `streamlit run` command line (`--read-only`, `--import-root DIR`,
`--max-suffixes N`), with environment variables as the fallback (`CREDITLENS_READ_ONLY=1`,
`CREDITLENS_IMPORT_ROOTS` joined with `os.pathsep`, `CREDITLENS_MAX_SUFFIXES`). The token travels only
in the environment (`CREDITLENS_TOKEN`): a command line is visible to every user of the machine (`ps`);
how it is made and checked is the server's (`app/server/auth.py`).

Every function that changes the store or occupies the model checks here itself (`require_writable`,
`import_path_allowed`); hiding a button is only the polite half.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

TOKEN_ENV = "CREDITLENS_TOKEN"
READ_ONLY_ENV = "CREDITLENS_READ_ONLY"
ROOTS_ENV = "CREDITLENS_IMPORT_ROOTS"
MAX_SUFFIXES_ENV = "CREDITLENS_MAX_SUFFIXES"
# Actions that write to the store or occupy the model; read-only mode refuses each of them.
WRITE_ACTIONS = (
    "import",
    "delete",
    "score",
    "resample",
    "teacher",
    "model_credit",
    "token classes",
    "main channel",
)
# Suffixes one resampling request may ask for (positions x samples): 4096 x ~40 tokens is about half a
# minute of the bundled model on 2 CPU cores, and far more than a view needs for V̂ with error bars.
DEFAULT_MAX_SUFFIXES = 4096


class Refused(Exception):
    """The server's settings forbid this action (read-only mode, a path outside the import roots, a limit)."""


@dataclass(frozen=True)
class Settings:
    token: str | None
    read_only: bool
    import_roots: tuple[Path, ...]
    max_suffixes: int


def _argv_values(argv: list[str], flag: str) -> list[str]:
    values = []
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.startswith(flag + "="):
            values.append(arg.split("=", 1)[1])
    return values


def default_roots(db: str | os.PathLike) -> tuple[Path, ...]:
    """The store's folder and the current directory."""
    return tuple(dict.fromkeys((Path(db).expanduser().resolve().parent, Path.cwd().resolve())))


def settings(db: str | os.PathLike, argv: list[str] | None = None) -> Settings:
    """This process's settings (see the module docstring for where each comes from)."""
    argv = list(sys.argv if argv is None else argv)
    read_only = "--read-only" in argv or os.environ.get(READ_ONLY_ENV, "") not in ("", "0")
    roots = _argv_values(argv, "--import-root")
    if not roots and os.environ.get(ROOTS_ENV):
        roots = [r for r in os.environ[ROOTS_ENV].split(os.pathsep) if r]
    import_roots = tuple(Path(r).expanduser().resolve() for r in roots) or default_roots(db)
    limit = (_argv_values(argv, "--max-suffixes") or [os.environ.get(MAX_SUFFIXES_ENV, "")])[-1]
    max_suffixes = int(limit) if limit.strip().isdigit() else DEFAULT_MAX_SUFFIXES
    return Settings(os.environ.get(TOKEN_ENV) or None, read_only, import_roots, max_suffixes)


def require_writable(current: Settings, action: str) -> None:
    """Raise `Refused` when read-only mode forbids `action` (one of `WRITE_ACTIONS`)."""
    if action not in WRITE_ACTIONS:
        raise ValueError(f"unknown action {action!r}; known: {', '.join(WRITE_ACTIONS)}")
    if current.read_only:
        raise Refused(f"{action} is switched off: this server runs in read-only mode (--read-only)")


def import_path_allowed(current: Settings, path: str | os.PathLike, model: bool = False) -> Path:
    """The path, resolved after symlinks, if it lies inside an allowed import root; else `Refused`.

    The check happens before the file is opened, so a refused path tells nothing about what is there
    (whether it exists, what it holds). `model`: the path is a model folder, which cannot be uploaded.
    """
    resolved = Path(path).expanduser().resolve()
    for root in current.import_roots:
        if resolved == root or resolved.is_relative_to(root):
            return resolved
    roots = ", ".join(str(r) for r in current.import_roots)
    if model:  # a model folder cannot be uploaded: only the server's roots can let it in
        raise Refused(
            f"{path}: outside the folders this server reads from ({roots}); move or link the model folder "
            "into one of them, or ask whoever started the server to add its folder (--import-root DIR)"
        )
    raise Refused(
        f"{path}: outside the folders this server imports from ({roots}); upload the file instead, "
        "or ask whoever started the server to add its folder (--import-root DIR)"
    )


def check_job_size(current: Settings, positions: int, samples: int) -> None:
    """Refuse a resampling request of more than `max_suffixes` suffixes (positions x samples)."""
    if positions * samples > current.max_suffixes:
        raise Refused(
            f"{positions} positions x {samples} samples = {positions * samples} suffixes; this server "
            f"allows at most {current.max_suffixes} per request (--max-suffixes)"
        )
