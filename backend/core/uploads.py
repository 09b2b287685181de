"""Where an uploaded file is saved: always a plain file directly inside the upload directory.

A browser sends whatever name the user's file has, or whatever a hostile client makes up: `../../x`,
`C:\\Windows\\x`, `..`, names with NUL bytes, control characters or 10,000 characters. The saved name
keeps only the last path component (either separator), letters, digits, `.`, `_` and `-`; it never
starts with a dot, is at most 120 characters with its extension kept, and falls back to `upload` plus
the original extension when nothing is left. Error messages can then still name the file the user knows.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from backend.core.errors import InputError

MAX_NAME = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_upload_path(directory: str | os.PathLike, filename: str) -> Path:
    """A path for `filename` inside `directory` that cannot escape it (raises `InputError` if it would)."""
    base = Path(directory).resolve()
    name = str(filename or "").replace("\x00", "")
    name = re.split(r"[\\/]", name)[-1]  # the last component, for POSIX and Windows separators alike
    name = _UNSAFE.sub("_", name).lstrip(".")
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    ext = ext[:16]
    if not stem.strip("._-"):
        stem = "upload"
    stem = stem[: MAX_NAME - len(ext) - 1]
    name = f"{stem}.{ext}" if ext else stem
    target = (base / name).resolve()
    if target.parent != base:
        raise InputError(f"upload name {filename!r:.80} cannot be saved inside {base}")
    return target
