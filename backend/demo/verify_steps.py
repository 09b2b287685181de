"""Prove which checkpoints sampled the demo run: `python -m backend.demo.verify_steps --steps-dir DIR
[--final DIR]`.

Every demo record stores the sampling policy's per-token logprobs (rounded to 4 decimals) and the checkpoint
that sampled it (`meta.checkpoint`, `step<k>`). Rescoring step k's responses with `DIR/step<k>` (for the
last step, when DIR has none, the bundled `sample_runs/demo-policy`: `backend.demo.train.step_folder`) must
give those logprobs back (max |diff| at the rounding, 5e-5); a retrained final checkpoint must hold the
same tensors as the bundled `sample_runs/demo-policy`. A step whose folder is missing is reported, not
passed. Exit 0 only when every step and the final match. The shipped checkpoints:
`python -m backend.demo.verify_steps --steps-dir sample_runs/demo-policy-steps`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from backend.demo.train import step_folder
from backend.models.transformers_engine import TransformersEngine

ROOT = Path(__file__).resolve().parents[2]
DEMO_RUN = ROOT / "sample_runs" / "demo_run.jsonl"
DEMO_POLICY = ROOT / "sample_runs" / "demo-policy"
TOLERANCE = 6e-5
"""The stored logprobs are rounded to 4 decimals (error <= 5e-5), plus float noise."""


def records_by_step(path: Path = DEMO_RUN) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    with path.open() as fh:
        for line in fh:
            rec = json.loads(line)
            out.setdefault(int(rec["step"]), []).append(rec)
    return out


def rescore_gap(folder: Path, records: list[dict]) -> dict:
    """Max and mean |stored - rescored| logprob over the records' tokens under the checkpoint in `folder`."""
    engine = TransformersEngine(folder, device="cpu")
    scored = engine.score(
        [r["prompt_ids"] for r in records], [r["token_ids"] for r in records], chunk_size=64
    )
    gaps = np.concatenate(
        [np.abs(np.asarray(r["logprobs"]) - s.logprobs) for r, s in zip(records, scored, strict=True)]
    )
    checkpoints = sorted({(r.get("meta") or {}).get("checkpoint") for r in records})
    return {
        "folder": str(folder),
        "tokens": int(gaps.size),
        "max_abs_diff": float(gaps.max()),
        "mean_abs_diff": float(gaps.mean()),
        "meta_checkpoint": checkpoints,
    }


def same_tensors(a: Path, b: Path) -> dict:
    """Whether two model folders hold identical tensors (names, shapes, values)."""
    left, right = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    if left.keys() != right.keys():
        return {"equal": False, "max_abs_diff": None, "why": "different tensor names"}
    diff = max(float((left[k].float() - right[k].float()).abs().max()) for k in left)
    equal = all(torch.equal(left[k], right[k]) for k in left)
    return {"equal": equal, "max_abs_diff": diff}


def verify(steps_dir: Path, final: Path | None) -> dict:
    report: dict = {"steps": {}, "final": None}
    by_step = records_by_step()
    for step, records in sorted(by_step.items()):
        folder = step_folder(steps_dir, step, max(by_step), DEMO_POLICY)
        if not (folder / "config.json").exists():
            report["steps"][step] = {"folder": str(folder), "missing": True, "match": False}
            continue
        gap = rescore_gap(folder, records)
        gap["match"] = gap["max_abs_diff"] <= TOLERANCE
        report["steps"][step] = gap
    if final is not None:
        report["final"] = (
            same_tensors(final, DEMO_POLICY)
            if (final / "model.safetensors").exists()
            else {"equal": False, "missing": True}
        )
    report["match"] = all(s["match"] for s in report["steps"].values()) and (
        final is None or bool(report["final"].get("equal"))
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-dir", type=Path, required=True, help="holds step0, step1, ...")
    parser.add_argument("--final", type=Path, default=None, help="a retrained final checkpoint to compare")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    report = verify(args.steps_dir, args.final)
    print(json.dumps(report, indent=1))
    return 0 if report["match"] else 1


if __name__ == "__main__":
    sys.exit(main())
