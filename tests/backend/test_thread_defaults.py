"""The package's OpenMP default: threads that sleep between parallel regions (backend/__init__.py), set
before torch loads, a user's own value kept, and left out of a bench's baseline checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import backend
from bench.children import _inherited

ROOT = Path(__file__).resolve().parents[2]
SHOW = "import backend, os, torch; print(os.environ.get('OMP_WAIT_POLICY'), backend.ENV_SET_HERE)"


def _run(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    command = [sys.executable, "-c", SHOW]
    done = subprocess.run(command, cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_threads_sleep_by_default_and_a_users_value_wins():
    assert _run({}) == "PASSIVE ('OMP_WAIT_POLICY',)"
    assert _run({"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE ()"


def test_a_bench_baseline_checkout_runs_without_what_the_package_set(monkeypatch):
    monkeypatch.setattr(backend, "ENV_SET_HERE", ("OMP_WAIT_POLICY",))
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert "OMP_WAIT_POLICY" not in _inherited(ROOT / "elsewhere")
    assert _inherited(None)["OMP_WAIT_POLICY"] == "PASSIVE"
