"""`python -m bench.gpu_check [--device cuda|cpu] [--only SECTIONS] [--plant-error] [--out FILE]`: the
check to run when a CUDA machine is lent. It prints one table and exits 1 when any row fails.

Sections and their bounds (each row says its bound):
1. estimators — every model-free registered estimator on the demo run and an oracle batch, on CUDA
   and on CPU: max |A_cuda − A_cpu| <= 1e-5, and the result must stay on the device;
2. transformers — the engine on CUDA against CPU: greedy suffixes token for token, their logprobs
   and teacher-forced logprobs/entropies to 1e-4; on CUDA, sampled logprobs equal teacher-forced
   ones to 1e-4 and the same seed draws the same suffixes;
3. vllm (when `vllm` is importable, CUDA only) — float32, greedy suffixes token for token against
   transformers on CUDA, logprobs within 1e-3 of transformers' teacher-forced ones, at T=0.7 /
   top_p=0.9 the finished share within 0.1 and the mean suffix length within 15% of transformers',
   and 8 stored (prefix, seed) pairs regenerated alone reproduce their tokens; teacher-forced logprobs
   from vLLM's `prompt_logprobs` (the GPU route of `creditlens landed`) within 1e-3 of transformers'.
4. attribution — the first-order attribution (`backend.models.attribution`: a backward and a forward-mode
   pass) on the bundled kl-0.2 run's step 1 against CPU: predicted Δ log π and one token's shares within
   1e-3 of the largest CPU value; on the device the shares sum to the prediction (within 2e-3 of Σ|share|,
   float32) and one real SGD step moves the tokens as predicted (Pearson r >= 0.99).

Runs on the device image as it is (Python 3.12, torch 2.11, transformers 5.17; installs nothing).
`--device cpu` runs the same comparisons CPU against CPU: a dry run of the script's logic, and with
`--plant-error` (which shifts one compared output by 100x its bound) a demonstration that the check
fails — the planted row is named and the exit code is 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from backend.core.batch import batch_from_records
from backend.estimators import registry
from backend.evaluation.synthetic import oracle_batch
from backend.models.transformers_engine import TransformersEngine
from backend.models.vllm_engine import VLLMEngine

# Before anything can import vllm: no usage statistics (offline by policy) and the engine in this
# process, so a request's sampling depends on its own seed only.
os.environ.update({"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = ROOT / "sample_runs" / "demo-policy"
RUN = ROOT / "sample_runs" / "demo_run.jsonl"
SECTIONS = ("estimators", "transformers", "vllm", "attribution")

ESTIMATOR_TOL = 1e-5
LOGPROB_TOL = 1e-4
VLLM_LOGPROB_TOL = 1e-3
"""vLLM's fp32 kernels (Triton attention, fused ops) differ from transformers' in summation order."""
FINISHED_SHARE_TOL = 0.1
"""448 samples per engine: the standard error of a difference of two shares is <= 0.034."""
MEAN_LENGTH_REL_TOL = 0.15
ATTRIBUTION_REL_TOL = 1e-3
"""Relative to the largest CPU value: float32 sums of ~10^5 products in another order."""
ATTRIBUTION_STEP = ROOT / "sample_runs" / "recorded" / "kl-0.2" / "step_000001.parquet"


@dataclass
class Row:
    section: str
    check: str
    value: str
    bound: str
    ok: bool | None
    """None: a figure reported without a bound (or a section skipped)."""
    note: str = ""


class Report:
    def __init__(self, plant_error: bool):
        self.rows: list[Row] = []
        self.plant_error = plant_error
        self.planted: str | None = None

    def add(self, section: str, check: str, value, bound: str = "", ok: bool | None = None, note: str = ""):
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        self.rows.append(Row(section, check, text, bound, ok, note))

    def max_diff(self, section: str, check: str, reference, other, tol: float) -> float:
        """Add a row for max |other − reference| <= tol (float arrays or tensors of one shape); the
        first comparison of a `--plant-error` run shifts one element of `other` by 100 * tol."""
        ref = np.asarray(_to_numpy(reference), dtype=np.float64)
        oth = np.array(_to_numpy(other), dtype=np.float64)
        note = ""
        if self.plant_error and self.planted is None and oth.size:
            oth.flat[0] += 100 * tol
            self.planted = f"{section}: {check}"
            note = "planted error"
        if ref.shape != oth.shape:
            self.add(section, check, f"shapes {ref.shape} vs {oth.shape}", f"<= {tol:g}", False, note)
            return float("inf")
        diff = float(np.abs(oth - ref).max()) if ref.size else 0.0
        self.add(section, check, diff, f"<= {tol:g}", bool(diff <= tol), note)
        return diff

    def error(self, section: str, check: str, exc: BaseException) -> None:
        self.add(section, check, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}", "", False)

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.ok is False]

    def table(self) -> str:
        head = ("section", "check", "value", "bound", "result")
        cells = [head] + [
            (
                r.section,
                r.check,
                r.value,
                r.bound,
                ("ok" if r.ok else "FAIL" if r.ok is False else "-") + (f" ({r.note})" if r.note else ""),
            )
            for r in self.rows
        ]
        widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
        return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells)


def _to_numpy(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def load_records() -> list[dict]:
    return [json.loads(line) for line in RUN.read_text().splitlines() if line.strip()]


def demo_batch():
    records = [
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
        for i, r in enumerate(load_records())
    ]
    return batch_from_records(records)


def check_estimators(report: Report, device: str, names: list[str] | None, batch_names: list[str]) -> None:
    section = "estimators"
    builders = {"demo": demo_batch, "oracle": lambda: oracle_batch(seed=0, prompts=256, group=8)}
    wanted = names or registry.names()
    model_free = [n for n in wanted if registry.get(n).model_free]
    for name in wanted:
        if name not in model_free:
            report.add(section, f"{name}", "not model-free (needs a model or resampling): not compared")
    compared = {n: 0 for n in model_free}
    for batch_name in batch_names:
        cpu_batch = builders[batch_name]()
        dev_batch = cpu_batch.to(device)
        available = registry.available_fields(cpu_batch)
        for name in model_free:
            if registry.get(name).unmet(available) is not None:
                continue  # the batch lacks a field this estimator needs; another batch has it
            check = f"{batch_name}/{name} max|A_{device} - A_cpu|"
            try:
                cpu = registry.estimate(name, cpu_batch).advantages
                dev = registry.estimate(name, dev_batch).advantages
            except Exception as exc:  # noqa: BLE001 - recorded as a failed row, the rest still runs
                report.error(section, check, exc)
                continue
            compared[name] += 1
            if dev.device.type != dev_batch.response_mask.device.type:
                report.add(section, check, f"result on {dev.device}", f"on {device}", False)
                continue
            report.max_diff(section, check, cpu, dev, ESTIMATOR_TOL)
    for name, count in compared.items():
        if count == 0:
            report.add(section, f"{name}", "no batch meets its needs", "compared once", False)


def check_transformers(report: Report, device: str) -> None:
    section = "transformers"
    records = load_records()
    cpu = TransformersEngine(MODEL, device="cpu")
    dev = TransformersEngine(MODEL, device=device, dtype=torch.float32, max_batch=1024)
    prefixes = [r["prompt_ids"] for r in records[::28][:16]]

    greedy_cpu = cpu.generate(prefixes, n=1, max_new_tokens=64, temperature=0.0)
    greedy_dev = dev.generate(prefixes, n=1, max_new_tokens=64, temperature=0.0)
    differ = sum(a.token_ids != b.token_ids for a, b in zip(greedy_cpu, greedy_dev, strict=True))
    report.add(
        section,
        f"greedy suffixes that differ, {device} vs cpu",
        f"{differ}/{len(prefixes)}",
        "0",
        differ == 0,
    )
    same = [(a, b) for a, b in zip(greedy_cpu, greedy_dev, strict=True) if a.token_ids == b.token_ids]
    report.max_diff(
        section,
        f"greedy logprobs max|{device} - cpu|",
        np.concatenate([a.logprobs for a, _ in same] or [[]]),
        np.concatenate([b.logprobs for _, b in same] or [[]]),
        LOGPROB_TOL,
    )

    sample = records[-64:]
    prompts, responses = [r["prompt_ids"] for r in sample], [r["token_ids"] for r in sample]
    scored_cpu, scored_dev = cpu.score(prompts, responses), dev.score(prompts, responses)
    report.max_diff(
        section,
        f"teacher-forced logprobs max|{device} - cpu|",
        np.concatenate([s.logprobs for s in scored_cpu]),
        np.concatenate([s.logprobs for s in scored_dev]),
        LOGPROB_TOL,
    )
    report.max_diff(
        section,
        f"teacher-forced entropies max|{device} - cpu|",
        np.concatenate([s.entropies for s in scored_cpu]),
        np.concatenate([s.entropies for s in scored_dev]),
        LOGPROB_TOL,
    )

    drawn = dev.generate(prefixes, n=4, max_new_tokens=64, seed=7)
    again = dev.generate(prefixes, n=4, max_new_tokens=64, seed=7)
    differ = sum(a.token_ids != b.token_ids for a, b in zip(drawn, again, strict=True))
    report.add(
        section, f"same seed, suffixes that differ on {device}", f"{differ}/{len(drawn)}", "0", differ == 0
    )
    rescored = dev.score([prefixes[s.prefix_index] for s in drawn], [s.token_ids for s in drawn])
    report.max_diff(
        section,
        f"sampled vs teacher-forced logprobs on {device}",
        np.concatenate([r.logprobs for r in rescored]),
        np.concatenate([s.logprobs for s in drawn]),
        LOGPROB_TOL,
    )


def check_vllm(report: Report, device: str) -> None:
    section = "vllm"
    if not device.startswith("cuda"):
        report.add(section, "vLLM engine", "skipped: needs CUDA")
        return
    if importlib.util.find_spec("vllm") is None:
        report.add(section, "vLLM engine", "skipped: vllm is not importable here")
        return
    records = load_records()
    start = time.perf_counter()
    engine = VLLMEngine(MODEL, dtype="float32", gpu_memory_utilization=0.3, enforce_eager=True)
    report.add(section, "load seconds", time.perf_counter() - start)
    model_dtype = getattr(getattr(engine.llm.llm_engine, "model_config", None), "dtype", None)
    report.add(section, "vLLM model dtype", model_dtype, "torch.float32", model_dtype == torch.float32)
    hf = TransformersEngine(MODEL, device="cuda", dtype=torch.float32, max_batch=1024)
    prefixes = [r["prompt_ids"] for r in records[::28][:16]]

    greedy_v = engine.generate(prefixes, n=1, max_new_tokens=64, temperature=0.0)
    greedy_t = hf.generate(prefixes, n=1, max_new_tokens=64, temperature=0.0)
    differ = sum(
        (a.token_ids, a.finished) != (b.token_ids, b.finished)
        for a, b in zip(greedy_v, greedy_t, strict=True)
    )
    report.add(
        section,
        "greedy suffixes that differ, vllm vs transformers",
        f"{differ}/{len(prefixes)}",
        "0",
        differ == 0,
    )
    same = [(a, b) for a, b in zip(greedy_v, greedy_t, strict=True) if a.token_ids == b.token_ids]
    report.max_diff(
        section,
        "greedy logprobs max|vllm - transformers|",
        np.concatenate([b.logprobs for _, b in same] or [[]]),
        np.concatenate([a.logprobs for a, _ in same] or [[]]),
        VLLM_LOGPROB_TOL,
    )

    # the checkpoint route of `creditlens landed` on a GPU: the responses' logprobs from prompt_logprobs
    forced = records[::28][:16]
    prompts, responses = [r["prompt_ids"] for r in forced], [r["token_ids"] for r in forced]
    report.max_diff(
        section,
        "prompt_logprobs (landed) max|vllm - transformers teacher-forced|",
        np.concatenate([s.logprobs for s in hf.score(prompts, responses)]),
        np.concatenate(engine.prompt_logprobs(prompts, responses)),
        VLLM_LOGPROB_TOL,
    )

    many = [r["prompt_ids"] for r in records[::16]][:28]
    runs = {}
    for name, eng in (("vllm", engine), ("transformers", hf)):
        eng.generate(many[:2], n=2, max_new_tokens=8, temperature=0.7, top_p=0.9)  # warm-up
        start = time.perf_counter()
        drawn = eng.generate(many, n=16, max_new_tokens=96, temperature=0.7, top_p=0.9, seed=3)
        seconds = time.perf_counter() - start
        runs[name] = drawn
        tokens = sum(len(s.token_ids) for s in drawn)
        report.add(section, f"T=0.7 top_p=0.9: {name} tokens/s ({len(drawn)} suffixes)", tokens / seconds)
    rescored = hf.score([many[s.prefix_index] for s in runs["vllm"]], [s.token_ids for s in runs["vllm"]])
    report.max_diff(
        section,
        "T=0.7 vllm logprobs vs transformers teacher-forced",
        np.concatenate([r.logprobs for r in rescored]),
        np.concatenate([s.logprobs for s in runs["vllm"]]),
        VLLM_LOGPROB_TOL,
    )
    share = {k: float(np.mean([s.finished for s in v])) for k, v in runs.items()}
    length = {k: float(np.mean([len(s.token_ids) for s in v])) for k, v in runs.items()}
    gap = abs(share["vllm"] - share["transformers"])
    report.add(
        section,
        f"finished share vllm {share['vllm']:.3f} vs transformers {share['transformers']:.3f}",
        gap,
        f"<= {FINISHED_SHARE_TOL:g}",
        gap <= FINISHED_SHARE_TOL,
    )
    rel = abs(length["vllm"] - length["transformers"]) / max(length["transformers"], 1e-9)
    report.add(
        section,
        f"mean suffix length vllm {length['vllm']:.1f} vs transformers {length['transformers']:.1f} (rel.)",
        rel,
        f"<= {MEAN_LENGTH_REL_TOL:g}",
        rel <= MEAN_LENGTH_REL_TOL,
    )
    stored = runs["vllm"][:: max(1, len(runs["vllm"]) // 8)][:8]
    differ = 0
    for s in stored:
        alone = engine.generate(
            [many[s.prefix_index]], n=1, max_new_tokens=96, temperature=0.7, top_p=0.9, seed=s.seed
        )
        differ += alone[0].token_ids != s.token_ids
    report.add(
        section,
        "stored (prefix, seed) regenerated alone that differ",
        f"{differ}/{len(stored)}",
        "0",
        differ == 0,
    )


def check_attribution(report: Report, device: str) -> None:
    import pyarrow.parquet as pq  # noqa: PLC0415 - this section only

    from backend.models import attribution  # noqa: PLC0415 - this section only

    section = "attribution"
    table = pq.read_table(ATTRIBUTION_STEP, columns=["prompt_ids", "token_ids"]).to_pylist()
    rows = attribution.token_rows([r["prompt_ids"] for r in table], [r["token_ids"] for r in table])
    lengths = [len(r["token_ids"]) for r in table]
    pattern = {0: 1.0, 5: 1.0, 2: -1.0}  # credit on some responses, none on the others
    credit = torch.tensor(
        [pattern.get(i, 0.0) / sum(lengths) for i, L in enumerate(lengths) for _ in range(L)]
    )
    lr, target = 0.005, lengths[0] + 3
    out = {}
    for where in ("cpu", device):
        model = attribution.load_policy(MODEL, where)
        on = rows.to(where)
        predicted = attribution.predicted_change(model, on, credit, lr)
        shares, _ = attribution.token_shares(model, on, target, credit, lr)
        out[where] = (model, on, predicted.cpu(), shares.cpu())
    _, _, cpu_predicted, cpu_shares = out["cpu"]
    model, on, predicted, shares = out[device]
    for name, ref, got in (("predicted Δ", cpu_predicted, predicted), ("shares", cpu_shares, shares)):
        scale = float(ref.abs().max())
        report.max_diff(
            section, f"{name} max|{device} - cpu| / max|cpu|", ref / scale, got / scale, ATTRIBUTION_REL_TOL
        )
    # relative to Σ|share|: two float32 routes to one number (in float64 they agree to 1e-12; in float32 on
    # CPU 4.3e-4 apart, 2026-12-07)
    gap = abs(float(shares.sum()) - float(predicted[target])) / float(shares.abs().sum())
    report.add(section, f"|Σ shares - predicted| / Σ|shares| on {device}", gap, "<= 2e-3", gap <= 2e-3)
    before = attribution.token_logprobs(model, attribution.parameters(model), on).detach()
    params = dict(model.named_parameters())
    optimizer = torch.optim.SGD(params.values(), lr=lr)
    (-(attribution.token_logprobs(model, params, on) * credit.to(device)).sum()).backward()
    optimizer.step()
    with torch.no_grad():
        realized = (attribution.token_logprobs(model, attribution.parameters(model), on) - before).cpu()
    r = float(np.corrcoef(predicted.numpy(), realized.numpy())[0, 1])
    report.add(section, f"one SGD step on {device}: Pearson r(predicted, realized)", r, ">= 0.99", r >= 0.99)


def run_section(report: Report, name: str, fn, *args) -> None:
    """A section that raises is one failed row; the next section still runs."""
    try:
        fn(report, *args)
    except Exception as exc:  # noqa: BLE001
        report.error(name, "section raised", exc)
        report.rows[-1].note = traceback.format_exc().strip().splitlines()[-1][:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    default_out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None
    parser.add_argument("--out", type=Path, default=default_out, help="also write the rows as JSON here")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu to dry-run the comparisons")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run")
    parser.add_argument("--estimators", default="", help="comma-separated estimator names (default: all)")
    parser.add_argument("--batches", default="demo,oracle", help="estimator batches: demo, oracle")
    parser.add_argument(
        "--plant-error", action="store_true", help="shift the first compared output: the check must fail"
    )
    args = parser.parse_args(argv)
    sections = [s for s in args.only.split(",") if s]
    batches = [b for b in args.batches.split(",") if b]
    unknown = [s for s in sections if s not in SECTIONS] + [b for b in batches if b not in ("demo", "oracle")]
    if unknown:
        parser.error(f"unknown section or batch: {', '.join(unknown)}")
    report = Report(args.plant_error)
    report.add("setup", "python / torch", f"{platform.python_version()} / {torch.__version__}")
    if args.device.startswith("cuda"):
        ok = torch.cuda.is_available()
        name = torch.cuda.get_device_name(0) if ok else "no CUDA device visible (--device cpu dry-runs)"
        report.add("setup", "device", name, "a CUDA device", ok)
    else:
        report.add("setup", "device", f"{args.device} (dry run: {args.device} against cpu)")
    if report.failed:
        sections = []
    names = [n for n in args.estimators.split(",") if n] or None
    if "estimators" in sections:
        run_section(report, "estimators", check_estimators, args.device, names, batches)
    if "transformers" in sections:
        run_section(report, "transformers", check_transformers, args.device)
    if "vllm" in sections:
        run_section(report, "vllm", check_vllm, args.device)
    if "attribution" in sections:
        run_section(report, "attribution", check_attribution, args.device)

    failed = report.failed
    print(report.table())
    verdict = (
        f"{len(failed)} of {sum(r.ok is not None for r in report.rows)} checks failed"
        if failed
        else "all checks passed"
    )
    print(verdict + (f"; planted error at {report.planted}" if report.planted else ""))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"rows": [asdict(r) for r in report.rows], "verdict": verdict}, indent=2)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
