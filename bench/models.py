"""`python -m bench models [--device cpu|cuda] [--engine transformers|vllm] [--samples 16] [--json FILE]`.

Two figures on the bundled demo policy and its demo run:
- scoring: teacher-forced logprobs + entropies of every response of the run, response tokens/s, at two
  chunk sizes;
- resampling: suffix tokens/s at M samples per position (default 16) over step-end positions of a few
  rollouts, batched (one `generate` call for all positions x M) against one sample at a time, in the
  same process. Both draw the same suffixes (every sample has its own seed), so the work is identical
  and the ratio is the batching speed-up alone (target on CPU: >= 5x at M = 16).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from backend.models import load_engine
from backend.models.resample import resample, suggest_steps

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_runs" / "demo-policy"
RUN = ROOT / "sample_runs" / "demo_run.jsonl"


def load_run(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bench_scoring(engine, records: list[dict], chunk_size: int) -> dict:
    prompts = [r["prompt_ids"] for r in records]
    responses = [r["token_ids"] for r in records]
    engine.score(prompts[:8], responses[:8], chunk_size=chunk_size)  # warm-up
    start = time.perf_counter()
    engine.score(prompts, responses, chunk_size=chunk_size)
    seconds = time.perf_counter() - start
    tokens = sum(len(r) for r in responses)
    return {
        "what": f"score, chunks of {chunk_size}",
        "rows": len(records),
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
    }


def bench_resampling(engine, records: list[dict], samples: int, seed: int = 0) -> tuple[dict, dict, bool]:
    jobs = []
    for r in records:
        positions = [p for p in suggest_steps(r["tokens"]) if p < len(r["token_ids"])]
        jobs.append((r, positions))
    engine.generate([jobs[0][0]["prompt_ids"]], n=2, max_new_tokens=8)  # warm-up

    start = time.perf_counter()
    batched = [
        resample(
            engine,
            r["prompt_ids"],
            r["token_ids"],
            pos,
            samples=samples,
            ground_truth=r["meta"]["ground_truth"],
            seed=seed,
        )
        for r, pos in jobs
    ]
    batched_s = time.perf_counter() - start
    batched_tokens = sum(res.tokens for res in batched)

    start, single_suffixes = time.perf_counter(), []
    for (r, _positions), res in zip(jobs, batched, strict=True):
        max_new = 2 * len(r["token_ids"]) + 16
        for s in res.samples:
            prefix = list(r["prompt_ids"]) + list(r["token_ids"][: s.pos])
            one = engine.generate([prefix], n=1, max_new_tokens=max_new, seed=s.seed)[0]
            single_suffixes.append(one.token_ids)
    single_s = time.perf_counter() - start
    same = single_suffixes == [s.suffix_ids for res in batched for s in res.samples]
    single_tokens = sum(len(t) for t in single_suffixes)
    n_positions = sum(len(p) for _, p in jobs)
    rows = len(single_suffixes)
    return (
        {
            "what": f"resample batched ({n_positions} positions x M={samples})",
            "rows": rows,
            "tokens": batched_tokens,
            "seconds": batched_s,
            "tokens_per_s": batched_tokens / batched_s,
        },
        {
            "what": "resample one sample at a time",
            "rows": rows,
            "tokens": single_tokens,
            "seconds": single_s,
            "tokens_per_s": single_tokens / single_s,
        },
        same,
    )


def format_table(rows: list[dict]) -> str:
    lines = [f"{'measure':<44} {'rows':>6} {'tokens':>8} {'seconds':>8} {'tokens/s':>10}"]
    for r in rows:
        lines.append(
            f"{r['what']:<44} {r['rows']:>6} {r['tokens']:>8} {r['seconds']:>8.2f} {r['tokens_per_s']:>10.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench models", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--run", type=Path, default=RUN)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--engine", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--rollouts", type=int, default=3, help="rollouts to resample at their step ends")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv or [])

    records = load_run(args.run)
    start = time.perf_counter()
    engine = load_engine(args.model, engine=args.engine, device=args.device)
    load_s = time.perf_counter() - start
    print(f"engine {engine.name} on {engine.device}, model {args.model.name} loaded in {load_s:.2f} s")
    rows = [bench_scoring(engine, records, 16), bench_scoring(engine, records, 64)]
    # Rollouts from the last step (the bundled policy's own samples), spread over groups.
    last_step = [r for r in records if r["step"] == max(x["step"] for x in records)]
    picked = last_step[:: max(1, len(last_step) // args.rollouts)][: args.rollouts]
    batched, single, same = bench_resampling(engine, picked, args.samples)
    rows += [batched, single]
    print(format_table(rows))
    ratio = batched["tokens_per_s"] / single["tokens_per_s"]
    print(
        f"resampling speed-up, batched / one at a time at M={args.samples}: {ratio:.1f}x "
        f"(same suffixes drawn both ways: {same})"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "engine": engine.name,
                    "device": engine.device,
                    "rows": rows,
                    "resample_speedup": ratio,
                    "same_suffixes": same,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
