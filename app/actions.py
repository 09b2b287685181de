"""What the app changes in the store: import (upload or path), the main channel, token classes and delete,
each checking access first.

The Runs page hides these in read-only mode; the checks here are what refuses them (`access.Refused`)
whatever a client sends. Path imports read only inside the server's import roots, resolved after
symlinks (also the links inside an imported folder); uploads are saved to a fresh temporary folder, and
their import errors name the uploaded file, not that folder. An optional model folder (its tokenizer cuts
responses without token ids) is a path on the server like any other: it must lie inside the import roots.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from app import access

# Re-exported for the views and the class editor: what an action refuses with.
from app.access import Refused as Refused
from backend import ingest

# Re-exported for the Runs page, which reaches the backend only through app/.
from backend.core.errors import InputError as InputError
from backend.core.errors import StoreError as StoreError
from backend.core.uploads import safe_upload_path
from backend.credit import main_channel, token_classes
from backend.ingest import FORMATS as FORMATS
from backend.ingest.append import ImportRefused
from backend.store import StoreHandle


def _links_leaving_roots(current: access.Settings, folder: Path) -> None:
    """Refuse a folder holding a symlink that resolves outside the import roots."""
    if not folder.is_dir():
        return
    for entry in folder.rglob("*"):
        if entry.is_symlink():
            try:
                access.import_path_allowed(current, entry)
            except access.Refused:
                raise access.Refused(
                    f"{folder}: holds a link that leads outside the folders this server imports from; "
                    "import the files it links to from inside an import root, or upload them"
                ) from None


def _model_folder(current: access.Settings, model_dir: str | None) -> str | None:
    """The model folder resolved inside the import roots (None when not given); else `Refused`."""
    if model_dir is None or not str(model_dir).strip():
        return None
    folder = access.import_path_allowed(current, str(model_dir).strip(), model=True)
    _links_leaving_roots(current, folder)
    return str(folder)


def _import(
    handle: StoreHandle,
    target: Path,
    name: str,
    fmt: str | None,
    on_progress,
    model_dir: str | None = None,
    **options,
):
    """options: channels (list of column or key names), main_channel, append (as `creditlens import`).
    A refused append says what fixes it in the import form, not on the command line."""
    with handle.write() as store:
        try:
            return ingest.import_path(
                store,
                target,
                name,
                fmt=fmt,
                model_dir=model_dir,
                on_progress=on_progress,
                **{k: v for k, v in options.items() if v is not None},
            )
        except ImportRefused as exc:
            raise InputError(exc.app_message) from None


def import_from_path(
    current: access.Settings,
    handle: StoreHandle,
    path: str,
    name: str,
    fmt: str | None = None,
    on_progress: Callable[[float], None] | None = None,
    model_dir: str | None = None,
    **options,
):
    """Import a file or folder on the server into run `name` (tokenized with `model_dir`'s tokenizer when
    given; `options` as `_import`); returns the importer's report."""
    access.require_writable(current, "import")
    target = access.import_path_allowed(current, path)
    _links_leaving_roots(current, target)
    return _import(handle, target, name, fmt, on_progress, _model_folder(current, model_dir), **options)


def import_upload(
    current: access.Settings,
    handle: StoreHandle,
    filename: str,
    content: bytes,
    name: str,
    fmt: str | None = None,
    on_progress: Callable[[float], None] | None = None,
    model_dir: str | None = None,
    **options,
):
    """Import uploaded bytes, saved under the browser's file name made safe inside a temporary folder that
    is removed afterwards; an error names the uploaded file (`filename`), never the temporary path."""
    access.require_writable(current, "import")
    model = _model_folder(current, model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        target = safe_upload_path(tmp, filename)
        target.write_bytes(content)
        try:
            return _import(handle, target, name, fmt, on_progress, model, **options)
        except (InputError, StoreError) as exc:
            raise type(exc)(_as_uploaded(str(exc), target, filename)) from None


def _as_uploaded(message: str, saved: Path, filename: str) -> str:
    """`message` with the saved copy's path (and its temporary folder) replaced by the uploaded name."""
    shown = str(filename).replace("\x00", "")[:200] or saved.name
    for path in (saved, saved.parent, saved.resolve(), saved.parent.resolve()):
        message = message.replace(str(path), shown)
    return message


def set_main_channel(current: access.Settings, handle: StoreHandle, name: str, channel: str) -> str:
    """Make `channel` (one of the run's channels, or all) the run's main channel; returns it."""
    access.require_writable(current, "main channel")
    with handle.write() as store:
        return main_channel.set_main_channel(store, name, channel)


def delete_run(current: access.Settings, handle: StoreHandle, name: str) -> None:
    access.require_writable(current, "delete")
    with handle.write() as store:
        store.delete_run(name)


def save_token_classes(
    current: access.Settings, handle: StoreHandle, run: str, classes: tuple | None
) -> None:
    """Save `classes` with run `run`, for every view and command (None: back to the default classes)."""
    access.require_writable(current, "token classes")
    with handle.write() as store:
        token_classes.save(store, run, classes)
