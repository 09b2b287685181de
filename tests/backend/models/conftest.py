"""The bundled demo policy, loaded once per test module (real model, no mocks)."""

from pathlib import Path

import pytest

from backend.ingest import import_path
from backend.models.transformers_engine import TransformersEngine
from backend.store import Store
from tests.conftest import copy_store, shared_once

ROOT = Path(__file__).resolve().parents[3]
DEMO_MODEL = ROOT / "sample_runs" / "demo-policy"
DEMO_RUN = ROOT / "sample_runs" / "demo_run.jsonl"


@pytest.fixture(scope="session")
def engine():
    return TransformersEngine(DEMO_MODEL, device="cpu")


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    """The bundled demo run alone, without the shipped teacher values (these tests value rollouts
    themselves and count what they wrote), imported once per suite."""
    return shared_once(tmp_path_factory, "demo_only", _import_demo)


def _import_demo(path: Path) -> None:
    with Store(path) as store:
        import_path(store, DEMO_RUN, "demo", model_dir=str(DEMO_MODEL), verifier="answer_match")


@pytest.fixture
def demo_db(demo_template, tmp_path) -> Path:
    """This test's copy of a store holding the bundled demo run, imported with the demo policy and its
    answer verifier."""
    return copy_store(demo_template, tmp_path / "runs.duckdb")
