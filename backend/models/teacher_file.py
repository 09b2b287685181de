"""The shipped teacher file: a `creditlens teacher --export` Parquet file read back and checked against the
run it belongs to (the bundled demo's teacher, `backend.demo.bundled`)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq

from backend.core.errors import InputError

TEACHER_COLUMNS = (
    "rollout_id",
    "pos",
    "sample_idx",
    "seed",
    "suffix_ids",
    "suffix_text",
    "reward",
    "engine",
    "model",
)


def read_teacher_file(path: str | os.PathLike, lengths: dict[int, int]):
    """A teacher Parquet file (`creditlens teacher --export`) checked against the run it belongs to:
    every column present, every rollout in `lengths` (rollout id -> response length), every position
    inside its response, every reward finite. Returns the Arrow table; errors name the file and row."""
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    missing = [c for c in TEACHER_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
    table = table.select([*TEACHER_COLUMNS, *(["on_policy"] if "on_policy" in table.column_names else [])])
    rollouts = table.column("rollout_id").to_pylist()
    positions = table.column("pos").to_pylist()
    rewards = table.column("reward").to_pylist()
    for row, (rid, pos, reward) in enumerate(zip(rollouts, positions, rewards, strict=True)):
        if rid not in lengths:
            raise InputError(f"{path}: row {row}: field rollout_id: the run has no rollout {rid}")
        if pos is None or not 0 <= pos <= lengths[rid]:
            raise InputError(
                f"{path}: row {row}: field pos: {pos} is outside rollout {rid} (0..{lengths[rid]})"
            )
        if reward is None or not np.isfinite(reward):
            raise InputError(f"{path}: row {row}: field reward: {reward!r} is not a finite number")
    return table
