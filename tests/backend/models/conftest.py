"""The bundled demo policy, loaded once per test module (real model, no mocks)."""

from pathlib import Path

import pytest

from backend.models.transformers_engine import TransformersEngine

ROOT = Path(__file__).resolve().parents[3]
DEMO_MODEL = ROOT / "sample_runs" / "demo-policy"
DEMO_RUN = ROOT / "sample_runs" / "demo_run.jsonl"


@pytest.fixture(scope="session")
def engine():
    return TransformersEngine(DEMO_MODEL, device="cpu")
