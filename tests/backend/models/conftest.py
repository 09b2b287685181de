"""The bundled demo policy, loaded once per test module (real model, no mocks)."""

from pathlib import Path

import pytest

from backend.ingest import import_path
from backend.models.transformers_engine import TransformersEngine
from backend.store import Store

ROOT = Path(__file__).resolve().parents[3]
DEMO_MODEL = ROOT / "sample_runs" / "demo-policy"
DEMO_RUN = ROOT / "sample_runs" / "demo_run.jsonl"


@pytest.fixture(scope="session")
def engine():
    return TransformersEngine(DEMO_MODEL, device="cpu")


@pytest.fixture
def demo_db(tmp_path):
    """A store holding the bundled demo run, imported with the demo policy and its answer verifier."""
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_path(store, DEMO_RUN, "demo", model_dir=str(DEMO_MODEL), verifier="answer_match")
    return db
