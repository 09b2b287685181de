"""The bundled sample runs (`sample_runs/*.json` manifests) and their shipped Monte Carlo teachers,
imported into a store that lacks them (`creditlens init`, the app's first start, tests)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa

from backend.ingest import import_path
from backend.models.environments import META_KEY as ENVIRONMENT_KEY
from backend.models.teacher import JOB
from backend.models.teacher_file import read_teacher_file
from backend.store import Store
from backend.store.checkpoints import ModelSpec, attach_from_spec

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_runs"


def bundled_manifests(sample_dir: Path = SAMPLE_DIR) -> list[dict]:
    """The bundled runs: every `sample_runs/*.json` manifest {run, file, model, verifier, source}, and
    `checkpoints` (step -> the folder of the checkpoint that sampled it) where the run ships them, and
    `environment` (`backend.models.environments`) for an agent run whose tool loop Credit Lens can run."""
    out = []
    for manifest in sorted(sample_dir.glob("*.json")):
        spec = json.loads(manifest.read_text())
        spec["file"] = str(sample_dir / spec["file"])
        if spec.get("model"):
            spec["model"] = str(sample_dir / spec["model"])
        if spec.get("checkpoints"):
            spec["checkpoints"] = {int(s): str(sample_dir / f) for s, f in spec["checkpoints"].items()}
        out.append(spec)
    return out


def import_bundled(store: Store, quiet: bool = False) -> list[str]:
    """Import every bundled run that the store does not have yet, and a bundled run's Monte Carlo
    teacher (manifest key `teacher`) where the run has none; returns the names imported."""
    imported = []
    for spec in bundled_manifests():
        if store.has_run(spec["run"]):
            imported += import_bundled_teacher(store, spec, quiet)
            continue
        report = import_path(
            store,
            spec["file"],
            spec["run"],
            fmt=spec.get("format"),
            model_dir=spec.get("model"),
            verifier=spec.get("verifier"),
            source=spec.get("source", "bundled sample"),
        )
        if spec.get("environment"):  # resampling and the teacher then run the run's tool loop
            store.set_run_meta(spec["run"], ENVIRONMENT_KEY, spec["environment"])
        if spec.get("checkpoints"):  # the model jobs then sample each rollout from its own step's policy
            report.notes.append(
                attach_from_spec(store, spec["run"], ModelSpec(spec["model"], spec["checkpoints"]))
            )
        imported.append(spec["run"])
        if not quiet:
            print(report.message(), file=sys.stderr)
        imported += import_bundled_teacher(store, spec, quiet)
    return imported


def import_bundled_teacher(store: Store, spec: dict, quiet: bool = False) -> list[str]:
    """The teacher suffixes shipped with a bundled run (one transaction), unless it has teacher rows."""
    teacher = spec.get("teacher")
    if not teacher or store.job_rollouts(spec["run"], JOB):
        return []
    index = store.rollout_index(spec["run"])
    lengths = dict(zip(index["rollout_id"].astype(int), index["length"].astype(int), strict=True))
    table = read_teacher_file(SAMPLE_DIR / teacher["file"], lengths)
    # the shipped file names its models relative to sample_runs/: they are this checkout's folders
    models = [str(SAMPLE_DIR / m) if not os.path.isabs(m) else m for m in table.column("model").to_pylist()]
    table = table.set_column(table.column_names.index("model"), "model", pa.array(models, pa.string()))
    if "on_policy" not in table.column_names and "on_policy_steps" in teacher:
        # the manifest says which steps the teacher's model sampled (backend.demo.verify_steps proves it)
        step_of = dict(zip(index["rollout_id"].astype(int), index["step"].astype(int), strict=True))
        flags = [step_of[r] in teacher["on_policy_steps"] for r in table.column("rollout_id").to_pylist()]
        table = table.append_column("on_policy", pa.array(flags, pa.bool_()))
    rows = store.import_job_samples(spec["run"], table, JOB)
    if not quiet:
        print(f"{spec['run']}: imported the Monte Carlo teacher ({rows} suffixes)", file=sys.stderr)
    return [f"{spec['run']} teacher"]
