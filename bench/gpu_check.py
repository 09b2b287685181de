"""`python -m bench.gpu_check [--out FILE]`: the checks to run when a CUDA machine is lent.

Prepared to run unattended in a few minutes; every section records its figures or its error and the
next one still runs. Sections:
1. estimators: every registered estimator on the demo run and an oracle batch, on CPU and on CUDA;
   max |A_cpu - A_cuda| and time per call on each device;
2. transformers engine on CUDA: teacher-forced scores against CPU, score == generate's logprobs on
   CUDA, same seed -> same suffixes, and `bench.models` figures (scoring tokens/s, batched vs one at a
   time resampling at M = 16);
3. vLLM (when importable): suffix logprobs against transformers' teacher-forced scores, same seed ->
   same suffixes, and suffix tokens/s against the transformers engine on the same workload.
The summary is printed as JSON and written to --out (default $OUT/gpu_check.json when $OUT is set).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = ROOT / "sample_runs" / "demo-policy"
RUN = ROOT / "sample_runs" / "demo_run.jsonl"


def run_section(report: dict, name: str, fn, *args) -> None:
    """Run one section; store its result, or its error, under `name` (a failure does not stop the rest)."""
    start = time.perf_counter()
    try:
        report[name] = fn(*args)
    except Exception as exc:  # noqa: BLE001
        report[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    report[name + "_seconds"] = round(time.perf_counter() - start, 2)
    print(f"[{name}] {json.dumps(report[name], default=str)[:2000]}", flush=True)


def load_records() -> list[dict]:
    return [json.loads(line) for line in RUN.read_text().splitlines() if line.strip()]


def demo_batch():
    from backend.batch import batch_from_records

    records = []
    for i, r in enumerate(load_records()):
        records.append(
            {
                "token_ids": r["token_ids"],
                "group_id": r["group"],
                "rollout_id": i,
                "step": r["step"],
                "scores": r["rewards"],
                "token_rewards": r["token_rewards"],
                "logprobs": r["logprobs"],
                "ref_logprobs": r["ref_logprobs"],
                "entropies": r["entropies"],
                "tokens": r["tokens"],
            }
        )
    return batch_from_records(records)


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check_estimators(device: str) -> dict:
    from backend.estimators import registry

    batches = {"demo": demo_batch()}
    try:
        from backend.synthetic import oracle_batch

        batches["oracle"] = oracle_batch(seed=0, prompts=256, group=8)
    except Exception as exc:  # noqa: BLE001
        batches["oracle_error"] = str(exc)
    out = {}
    for batch_name, cpu_batch in batches.items():
        if isinstance(cpu_batch, str):
            out[batch_name] = cpu_batch
            continue
        cuda_batch = cpu_batch.to(device)
        for name in registry.names():
            key = f"{batch_name}/{name}"
            try:
                start = time.perf_counter()
                cpu = registry.estimate(name, cpu_batch).advantages
                cpu_s = time.perf_counter() - start
                registry.estimate(name, cuda_batch)  # warm-up (kernels, allocator)
                synchronize(device)
                start = time.perf_counter()
                gpu = registry.estimate(name, cuda_batch).advantages
                synchronize(device)
                gpu_s = time.perf_counter() - start
                out[key] = {
                    "max_abs_diff": float((gpu.cpu() - cpu).abs().max()) if cpu.numel() else 0.0,
                    "cpu_ms": round(cpu_s * 1e3, 2),
                    "cuda_ms": round(gpu_s * 1e3, 2),
                    "device": str(gpu.device),
                }
            except Exception as exc:  # noqa: BLE001
                out[key] = {"skipped": f"{type(exc).__name__}: {str(exc)[:200]}"}
    diffs = [v["max_abs_diff"] for v in out.values() if isinstance(v, dict) and "max_abs_diff" in v]
    out["summary"] = {"ran": len(diffs), "worst_abs_diff": max(diffs, default=0.0)}
    return out


def check_transformers_engine(device: str) -> dict:
    import numpy as np
    import torch

    from backend.models.transformers_engine import TransformersEngine
    from bench.models import bench_resampling, bench_scoring

    records = load_records()
    cpu = TransformersEngine(MODEL, device="cpu")
    gpu = TransformersEngine(MODEL, device=device, max_batch=1024)
    sample = records[-64:]
    prompts, responses = [r["prompt_ids"] for r in sample], [r["token_ids"] for r in sample]
    cpu_scores = cpu.score(prompts, responses)
    gpu_scores = gpu.score(prompts, responses)
    score_diff = max(
        float(np.abs(a.logprobs - b.logprobs).max()) for a, b in zip(cpu_scores, gpu_scores, strict=True)
    )
    prefixes = [r["prompt_ids"] for r in records[-112::8]]
    drawn = gpu.generate(prefixes, n=16, max_new_tokens=96, seed=7)
    again = gpu.generate(prefixes, n=16, max_new_tokens=96, seed=7)
    rescored = gpu.score(
        [prefixes[s.prefix_index] for s in drawn], [s.token_ids for s in drawn], chunk_size=256
    )
    gen_diff = max(
        (
            float(np.abs(np.asarray(s.logprobs) - r.logprobs).max())
            for s, r in zip(drawn, rescored, strict=True)
            if s.token_ids
        ),
        default=0.0,
    )
    last_step = [r for r in records if r["step"] == max(x["step"] for x in records)]
    batched, single, same = bench_resampling(gpu, last_step[::37][:3], 16)
    big_prefixes = [r["prompt_ids"] for r in records[::4]]
    start = time.perf_counter()
    big = gpu.generate(big_prefixes, n=16, max_new_tokens=96, seed=1)
    big_s = time.perf_counter() - start
    big_tokens = sum(len(s.token_ids) for s in big)
    return {
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
        "score_cpu_vs_cuda_max_abs_diff": score_diff,
        "generate_vs_score_max_abs_diff": gen_diff,
        "same_seed_same_suffixes": [s.token_ids for s in drawn] == [s.token_ids for s in again],
        "scoring": [bench_scoring(gpu, records, 16), bench_scoring(gpu, records, 256)],
        "resample_batched": batched,
        "resample_single": single,
        "resample_same_suffixes": same,
        "resample_speedup": batched["tokens_per_s"] / single["tokens_per_s"],
        "bulk_generate": {
            "rows": len(big),
            "tokens": big_tokens,
            "seconds": big_s,
            "tokens_per_s": big_tokens / big_s,
        },
    }


def check_vllm() -> dict:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return {"skipped": "vllm is not importable here"}
    import numpy as np

    from backend.models.resample import resample, suggest_steps
    from backend.models.transformers_engine import TransformersEngine
    from backend.models.vllm_engine import VLLMEngine

    records = load_records()
    start = time.perf_counter()
    engine = VLLMEngine(MODEL, gpu_memory_utilization=0.3, enforce_eager=True)
    load_s = time.perf_counter() - start
    hf = TransformersEngine(MODEL, device="cuda", max_batch=1024)
    prefixes = [r["prompt_ids"] for r in records[::4]]
    out = {"load_seconds": load_s}
    for name, eng in (("vllm", engine), ("transformers", hf)):
        eng.generate(prefixes[:2], n=2, max_new_tokens=8)  # warm-up
        start = time.perf_counter()
        drawn = eng.generate(prefixes, n=16, max_new_tokens=96, temperature=1.0, seed=3)
        seconds = time.perf_counter() - start
        tokens = sum(len(s.token_ids) for s in drawn)
        out[f"{name}_bulk"] = {
            "rows": len(drawn),
            "tokens": tokens,
            "seconds": seconds,
            "tokens_per_s": tokens / seconds,
        }
        if name == "vllm":
            again = eng.generate(prefixes, n=16, max_new_tokens=96, temperature=1.0, seed=3)
            out["vllm_same_seed_same_suffixes"] = [s.token_ids for s in drawn] == [s.token_ids for s in again]
            rescored = hf.score(
                [prefixes[s.prefix_index] for s in drawn], [s.token_ids for s in drawn], chunk_size=256
            )
            diffs = [
                float(np.abs(np.asarray(s.logprobs) - r.logprobs).max())
                for s, r in zip(drawn, rescored, strict=True)
                if s.token_ids
            ]
            out["vllm_logprobs_vs_transformers_max_abs_diff"] = max(diffs, default=0.0)
            out["vllm_logprobs_vs_transformers_median_abs_diff"] = float(np.median(diffs)) if diffs else 0.0
            out["vllm_finished_share"] = sum(s.finished for s in drawn) / len(drawn)
    out["bulk_speedup_vllm_over_transformers"] = (
        out["vllm_bulk"]["tokens_per_s"] / out["transformers_bulk"]["tokens_per_s"]
    )
    r = [x for x in records if x["step"] == 3][5]
    positions = [p for p in suggest_steps(r["tokens"]) if p < len(r["token_ids"])]
    for name, eng in (("vllm", engine), ("transformers", hf)):
        res = resample(
            eng,
            r["prompt_ids"],
            r["token_ids"],
            positions,
            samples=16,
            ground_truth=r["meta"]["ground_truth"],
            seed=0,
        )
        out[f"{name}_resample"] = {
            "positions": [p.to_json() for p in res.positions],
            "tokens": res.tokens,
            "seconds": res.seconds,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    default_out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--device", default="cuda", help="cuda, or cpu to dry-run the script logic")
    parser.add_argument(
        "--skip", default="", help="comma-separated sections to skip: estimators,transformers,vllm"
    )
    args = parser.parse_args(argv)
    import torch

    report: dict = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
    }
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            report["error"] = "no CUDA device visible; nothing to check (--device cpu dry-runs the script)"
            print(json.dumps(report, indent=2))
            return 1
        report["device"] = torch.cuda.get_device_name(0)
    else:
        report["device"] = "cpu (dry run of the script)"
    skip = set(filter(None, args.skip.split(",")))
    if "estimators" not in skip:
        run_section(report, "estimators", check_estimators, args.device)
    if "transformers" not in skip:
        run_section(report, "transformers_engine", check_transformers_engine, args.device)
    if "vllm" not in skip and args.device.startswith("cuda"):
        run_section(report, "vllm", check_vllm)
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
