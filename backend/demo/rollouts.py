"""Sample the demo run: `python -m backend.demo.rollouts [--prompts-per-step 14] [--group 8]`.

Training step k of the run is sampled from the policy's checkpoint k (written by
`backend.demo.train` into `--steps-dir`; the demo ships step0..step2 in `sample_runs/demo-policy-steps/`,
and the last one, when the folder has none, is the bundled `sample_runs/demo-policy`), so reward rates
move across steps the way they would in a real run. The bundled demo was sampled by
`python -m backend.demo.rollouts --steps-dir sample_runs/demo-policy-steps` and then
`python -m backend.demo.process`; the manifest is written afresh, so its teacher and checkpoint keys
(`demo_run.json`) are put back by hand, with the commands that made them.
Reference logprobs come from checkpoint 0, the policy the run started from. Every response is scored
on all channels (task by the `answer_match` verifier, format, style, length, process by the
`arithmetic_steps` step verifier) with token-local style, format and process rewards, and the run is
written in the native JSONL format (docs/importing.md) with a manifest.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from backend.demo.task import make_problem, prompt_text
from backend.demo.train import DEFAULT_OUT, DEFAULT_STEPS_DIR, step_folder
from backend.models.transformers_engine import TransformersEngine
from backend.rewards import evaluate

VERIFIER = "answer_match"
STEP_VERIFIER = "arithmetic_steps"
OUT = Path("sample_runs/demo_run.jsonl")
MANIFEST = {
    "run": "demo",
    "file": "demo_run.jsonl",
    "model": "demo-policy",
    "verifier": VERIFIER,
    "step_verifier": STEP_VERIFIER,
    "source": "demo policy rollouts",
}


def rounded(values, digits: int = 4) -> list[float]:
    return [round(float(v), digits) for v in values]


def sample_step(
    engine: TransformersEngine,
    ref: TransformersEngine,
    step: int,
    problems,
    group: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
) -> list[dict]:
    prompts = [prompt_text(a, b) for a, b in problems]
    prompt_ids = [engine.encode(p) for p in prompts]
    samples = engine.generate(
        prompt_ids, n=group, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
    )
    ref_scores = ref.score(
        [prompt_ids[s.prefix_index] for s in samples], [s.token_ids for s in samples], chunk_size=64
    )
    records = []
    for sample, ref_scored in zip(samples, ref_scores, strict=True):
        i = sample.prefix_index
        a, b = problems[i]
        tokens = engine.token_texts(sample.token_ids)
        response = engine.decode(sample.token_ids)
        verdict = evaluate(
            response, a + b, tokens, verifier=VERIFIER, prompt=prompts[i], step_verifier=STEP_VERIFIER
        )
        records.append(
            {
                "prompt": prompts[i],
                "response": response,
                "group": step * 1000 + i,
                "step": step,
                "prompt_ids": prompt_ids[i],
                "token_ids": sample.token_ids,
                "tokens": tokens,
                "logprobs": rounded(sample.logprobs),
                "ref_logprobs": rounded(ref_scored.logprobs),
                "entropies": rounded(sample.entropies),
                "rewards": verdict.scores,
                "token_rewards": verdict.token_rewards,
                "meta": {
                    "ground_truth": a + b,
                    "operands": [a, b],
                    "seed": sample.seed,
                    "finished": sample.finished,
                    "checkpoint": f"step{step}",
                    "temperature": temperature,
                    "violations": verdict.spans,
                },
            }
        )
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-dir", type=Path, default=DEFAULT_STEPS_DIR)
    parser.add_argument(
        "--final", type=Path, default=DEFAULT_OUT, help="the last step's checkpoint when --steps-dir has none"
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts-per-step", type=int, default=14)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    folders = [step_folder(args.steps_dir, k, args.steps - 1, args.final) for k in range(args.steps)]
    missing = [k for k, folder in enumerate(folders) if not (folder / "config.json").exists()]
    if missing:
        raise SystemExit(
            f"no checkpoints {missing} in {args.steps_dir}; run `python -m backend.demo.train` first"
        )
    rng = random.Random(args.seed)
    ref = TransformersEngine(folders[0], device="cpu")
    start, records = time.perf_counter(), []
    for step in range(args.steps):
        print(f"step {step}: sampled by {folders[step]}", flush=True)
        engine = ref if step == 0 else TransformersEngine(folders[step], device="cpu")
        problems = [make_problem(rng) for _ in range(args.prompts_per_step)]
        records += sample_step(
            engine,
            ref,
            step,
            problems,
            args.group,
            args.max_new_tokens,
            args.temperature,
            seed=args.seed * 100_000 + step * 10_000,
        )
        rows = records[-len(problems) * args.group :]
        rate = {
            c: sum(r["rewards"][c] >= (1 if c == "task" else 0) for r in rows) / len(rows)
            for c in ("task", "format", "style")
        }
        print(
            f"step {step}: {len(rows)} responses, task {rate['task']:.2f} format {rate['format']:.2f} "
            f"clean style {rate['style']:.2f}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as fh:
        for record in records:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
    manifest = dict(
        MANIFEST,
        file=args.out.name,
        responses=len(records),
        steps=args.steps,
        group_size=args.group,
        temperature=args.temperature,
        seed=args.seed,
        ref_logprobs="checkpoint step0 (the policy the run starts from)",
    )
    args.out.with_suffix(".json").write_text(json.dumps(manifest, indent=2) + "\n")
    size = args.out.stat().st_size / 1e6
    print(
        f"wrote {len(records)} responses to {args.out} ({size:.2f} MB) in {time.perf_counter() - start:.0f}s"
    )


if __name__ == "__main__":
    main()
