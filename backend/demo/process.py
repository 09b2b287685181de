"""Add the process channel to the demo run: `python -m backend.demo.process [--run FILE]`.

Every record of `sample_runs/demo_run.jsonl` gets `rewards.process` (minus its number of wrong steps)
and `token_rewards.process` (-1 on the newline that ends each wrong line, or on the last token of a
wrong last line) from the `arithmetic_steps` step verifier, run on the record's prompt, token text
and `meta.ground_truth`. Nothing else changes: every other field is written back as it was read
(JSON numbers round-trip exactly), so rollout ids, tokens and the shipped teacher
(`sample_runs/demo_teacher.parquet`) still match. Deterministic and idempotent: a second run writes
the same bytes. The manifest (`demo_run.json`) records the step verifier. New samplings
(`backend.demo.rollouts`) score the process channel the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from backend.rewards.evaluate import process_channel

STEP_VERIFIER = "arithmetic_steps"
RUN = Path(__file__).resolve().parents[2] / "sample_runs" / "demo_run.jsonl"


def with_process(record: dict, step_verifier: str = STEP_VERIFIER) -> dict:
    """The record with its process channel (re)computed; its other fields untouched."""
    score, local, _ = process_channel(
        record["prompt"],
        record["response"],
        record["meta"]["ground_truth"],
        record.get("tokens"),
        step_verifier,
    )
    out = dict(record)
    out["rewards"] = {**record["rewards"], "process": score}
    if local is not None:
        out["token_rewards"] = {**record.get("token_rewards", {}), "process": local}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=RUN, help="native JSONL run, rewritten in place")
    args = parser.parse_args(argv)
    lines = args.run.read_text().splitlines()
    records = [with_process(json.loads(line)) for line in lines if line.strip()]
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
    fd, tmp = tempfile.mkstemp(dir=args.run.parent, suffix=".jsonl")  # replace the file whole or not at all
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, args.run)
    manifest_path = args.run.with_suffix(".json")
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        manifest["step_verifier"] = STEP_VERIFIER
        manifest["process"] = (
            "channel `process`: the step verifier's score per line at the line's end "
            "(`python -m backend.demo.process`)"
        )
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    wrong = sum(r["rewards"]["process"] < 0 for r in records)
    print(f"{args.run}: process channel for {len(records)} responses ({wrong} with a wrong step)")


if __name__ == "__main__":
    main()
