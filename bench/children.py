"""One `creditlens` command in a process of its own, timed, with its CPU seconds and peak memory
(`run_child`), and a row of the bench's table (`line`): what `python -m bench scale` and its scaling rows
share."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNNER = (
    "import sys, time\nfrom backend.cli import main\nstart = time.perf_counter()\n"
    "code = main(sys.argv[1:])\nprint(f'__seconds__ {time.perf_counter() - start}')\nsys.exit(code)"
)


def run_child(
    args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float, float, float]:
    """(wall seconds, seconds after process start, CPU seconds, peak RSS MB) of one `creditlens` command in
    its own process (CPU and RSS from wait4: that process's own, python's start included; the CPU seconds
    move less than the others when other jobs share the cores; RSS includes python and torch, ~0.4 GB).
    `cwd`: another checkout to run (its `backend` comes first on the path); `env`: added variables."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: stderr can outgrow a pipe's buffer
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, *args],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=cwd,
            env={**_inherited(cwd), **(env or {})},
        )
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        errors.seek(0)
        err = errors.read()
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"creditlens {' '.join(args)} failed: {err.strip().splitlines()[-1:]}")
    inner = float(out.strip().splitlines()[-1].split()[-1])
    return wall, inner, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _inherited(cwd: Path | None) -> dict[str, str]:
    """This process's environment; for another checkout (`cwd`) without what this package set at its import
    (`backend.ENV_SET_HERE`): a baseline runs as it would from the user's shell."""
    import backend  # noqa: PLC0415 - the bench's own package, imported by then

    dropped = set(backend.ENV_SET_HERE) if cwd is not None else set()
    return {k: v for k, v in os.environ.items() if k not in dropped}


def line(
    label: str, tokens: int, wall: float, inner: float, cpu: float, rss: float, base: float | None
) -> None:
    """One row of the table; the ratio is tokens/s against `base` (none without one)."""
    rate = tokens / inner
    ratio = f"{rate / base:>6.2f}" if base else f"{'':>6}"
    print(
        f"{label:<54} {tokens:>11,} {wall:>7.1f} {inner:>7.1f} {cpu:>6.1f} {rate:>11,.0f} {ratio} "
        f"{rss:>8,.0f}"
    )
