"""The checkpoint a recorded run names for each step (`meta.checkpoint` of native Parquet step files, as the
TRL recorder writes them), attached to the run at import.

The recorder writes each row's `checkpoint`, the folder of the weights that sampled it, relative to the step
file's folder, so a recording and its checkpoints read the same wherever they are copied (a clone of the
repository reads the bundled runs). The import resolves it against the step file's folder (an absolute one
is kept as it is) and attaches the folders that exist as the steps' checkpoints, the ones `creditlens
checkpoints` lists and the model jobs sample from. A step that has a checkpoint attached already keeps it
(attached on purpose with `creditlens checkpoints` or `import --model`); a name that is no folder here (the
demo's `step0` label, a checkpoint the trainer never saved) attaches nothing.

`meta.checkpoint_after` (the weights once the step's update was done, what `creditlens landed` scores with)
is resolved the same way and attached as the step's after-update checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from backend.store import Store
from backend.store.checkpoint_queries import set_step_checkpoints, step_checkpoints
from backend.store.landed_queries import after_checkpoints, set_after_checkpoints

__all__ = ["attach", "named_folders"]


def named_folders(path: Path, key: str = "checkpoint") -> dict[int, str]:
    """step -> absolute folder of the existing checkpoint folders the rows of one native Parquet file name
    in `meta.<key>` (the first named per step); {} for a file without `step` and `meta` columns or without
    any."""
    try:
        table = pq.read_table(path, columns=["step", "meta"])
    except (KeyError, ValueError, OSError, pa.ArrowException):  # no such columns: nothing named
        return {}
    found: dict[int, str] = {}
    for step, named in _named(table, key):
        if step is None or not isinstance(named, str) or not named or int(step) in found:
            continue
        try:
            folder = (path.parent / Path(named).expanduser()).resolve()  # an absolute name stays itself
            if folder.is_dir():
                found[int(step)] = str(folder)
        except (OSError, ValueError, RuntimeError):  # a name no file system takes (a NUL, too long, a loop)
            continue
    return found


def _named(table: pa.Table, key: str) -> list[tuple[int | None, object]]:
    """Distinct (step, meta.<key>) pairs of a table of `step` and `meta` (JSON text, as the recorder
    writes it, or a struct); only rows whose meta can name a checkpoint are parsed."""
    meta = table.column("meta")
    if pa.types.is_struct(meta.type):
        if meta.type.get_field_index(key) < 0:
            return []
        pairs = pa.table({"step": table.column("step"), "name": pc.struct_field(meta, key)})
        rows = pairs.group_by(["step", "name"]).aggregate([])
        return list(zip(rows.column("step").to_pylist(), rows.column("name").to_pylist(), strict=True))
    if not (pa.types.is_string(meta.type) or pa.types.is_large_string(meta.type)):
        return []
    naming = pc.fill_null(pc.match_substring(meta, f'"{key}"'), False)
    rows = table.filter(naming).group_by(["step", "meta"]).aggregate([])
    out = []
    for step, text in zip(rows.column("step").to_pylist(), rows.column("meta").to_pylist(), strict=True):
        try:
            out.append((step, json.loads(text).get(key)))
        except (ValueError, AttributeError):
            continue  # the import itself says which record's meta is not a JSON object
    return out


def attach(store: Store, run: str, files: list[Path]) -> list[str]:
    """Attach the checkpoints the native step files name (relative to each file's folder) to the steps of
    `run` without one; returns the import summary's note ([] when nothing was attached)."""
    if not files or not store.has_run(run):
        return []
    named: dict[int, str] = {}
    for path in files:
        if path.suffix == ".parquet":
            for step, folder in named_folders(path).items():
                named.setdefault(step, folder)
    notes = []
    attached = step_checkpoints(store, run)
    fresh = {s: f for s, f in named.items() if s not in attached}
    if fresh:
        set_step_checkpoints(store, run, fresh)
        steps = ", ".join(map(str, sorted(fresh)))
        notes.append(f"step checkpoints named by the step files: {len(fresh)} attached (steps {steps})")
    after: dict[int, str] = {}
    for path in files:
        if path.suffix == ".parquet":
            for step, folder in named_folders(path, "checkpoint_after").items():
                after.setdefault(step, folder)
    known = after_checkpoints(store, run)
    fresh = {s: f for s, f in after.items() if s not in known}
    if fresh:
        set_after_checkpoints(store, run, fresh)
        notes.append(f"after-update checkpoints named by the step files: {len(fresh)} attached")
    return notes
