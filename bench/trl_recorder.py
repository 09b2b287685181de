"""`python -m bench.trl_recorder [--steps 6] [--completion 64] [--layers 4 --width 128]`: a real TRL 1.16
`GRPOTrainer`'s time per step without the recorder, with `record(trainer, dir)` and with
`record(..., entropies=True)`, on CPU; `no-after` is `record(..., after=False)`, without the pass after
each update that writes `logprobs_after` (the default `record` makes it).

The policy is the bundled demo policy (4 layers, 128 wide), or, with other --layers/--width, a GPT-2 of
that shape with random weights and the demo tokenizer (nothing to download). Each mode trains a fresh
trainer from the same seed; a callback times every optimizer step, the first `--warmup` steps are left out
and the median is reported, beside the recorder's own time per step (`Recorder.seconds`), which is the
figure least moved by other load on the machine; wall and process CPU seconds are both given. The load
average is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from creditlens.integrations import trl as lens_trl

DEMO_POLICY = Path(__file__).resolve().parents[1] / "sample_runs" / "demo-policy"
PROMPTS = ["12+34=?\n", "5+7=?\n", "40+2=?\n", "9+9=?\n", "70+1=?\n", "3+4=?\n", "8+15=?\n", "61+7=?\n"]


def _digits(completions, **kwargs):
    return [min(1.0, 0.25 * sum(ch.isdigit() for ch in c)) for c in completions]


def _newline(completions, **kwargs):
    return [float("\n" in c) for c in completions]


class _StepTimer(TrainerCallback):
    """Wall and process CPU seconds (all threads) of every optimizer step."""

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._start = (0.0, 0.0)

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        self.wall.append(time.perf_counter() - self._start[0])
        self.cpu.append(time.process_time() - self._start[1])


def _trainer(out: Path, args) -> GRPOTrainer:
    tokenizer = AutoTokenizer.from_pretrained(DEMO_POLICY, local_files_only=True)
    if args.layers == 4 and args.width == 128:
        model = AutoModelForCausalLM.from_pretrained(DEMO_POLICY, local_files_only=True)
    else:
        base = GPT2Config.from_pretrained(DEMO_POLICY)
        config = GPT2Config(
            **{
                **base.to_dict(),
                "n_layer": args.layers,
                "n_embd": args.width,
                "n_head": max(1, args.width // 64),
                "n_positions": 1024,
            }
        )
        model = AutoModelForCausalLM.from_config(config)
    config = GRPOConfig(
        output_dir=str(out),
        max_steps=args.steps,
        per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations,
        max_completion_length=args.completion,
        learning_rate=1e-4,
        beta=args.beta,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_dropout=True,
        bf16=False,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[_digits, _newline],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        processing_class=tokenizer,
    )


def run_mode(mode: str, args, base: Path) -> dict:
    trainer = _trainer(base / mode / "trainer", args)
    timer = _StepTimer()
    trainer.add_callback(timer)
    recorder = None
    if mode != "off":
        recorder = lens_trl.record(
            trainer, base / mode / "run", entropies=mode == "entropies", after=mode != "no-after"
        )
    trainer.train()
    steps = len(recorder.files) if recorder is not None else 1
    return {
        "mode": mode,
        "wall": statistics.median(timer.wall[args.warmup :]),
        "cpu": statistics.median(timer.cpu[args.warmup :]),
        "recorder_wall": recorder.seconds / steps if recorder is not None else 0.0,
        "recorder_cpu": recorder.cpu_seconds / steps if recorder is not None else 0.0,
        "after_cpu": recorder.after_cpu_seconds / steps if recorder is not None else 0.0,
    }


def entropy_cost(rows: int, tokens: int, vocab: int, repeats: int = 3) -> tuple[float, float]:
    """CPU seconds of what the recorder does per chunk after the model's forward, on random logits
    (rows, tokens, vocab): log-softmax and the sampled tokens' logprobs, and the same with entropies."""
    logits = torch.randn(rows, tokens + 1, vocab)[:, :-1]
    ids = torch.randint(vocab, (rows, tokens, 1))
    out = []
    for with_entropy in (False, True):
        best = float("inf")
        for _ in range(repeats):
            start = time.process_time()
            logp = torch.log_softmax(logits.float(), dim=-1)
            logp.gather(-1, ids)
            if with_entropy:
                (-(logp.exp() * logp).sum(-1)).sum()
            best = min(best, time.process_time() - start)
        out.append(best)
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trl_recorder")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--completion", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--beta", type=float, default=0.0)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("off", "no-after", "record", "entropies"):
            rows.append(run_mode(mode, args, Path(tmp)))
    off = rows[0]["cpu"]
    print(
        f"GRPOTrainer on CPU, {args.layers} layers x {args.width}, {args.prompts} prompts x "
        f"{args.generations} generations, {args.completion} completion tokens, beta={args.beta}; "
        f"median of steps {args.warmup + 1}..{args.steps}; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(
        "seconds per step (median); CPU = the process's CPU time, all threads: the figure to compare when "
        "the machine is shared"
    )
    print(
        f"{'mode':<10} {'CPU s':>8} {'ratio':>6} {'wall s':>8} {'recorder CPU s':>15} "
        f"{'recorder wall s':>16} {'after-update CPU s':>19}"
    )
    for r in rows:
        print(
            f"{r['mode']:<10} {r['cpu']:>8.3f} {r['cpu'] / off:>6.2f} {r['wall']:>8.3f} "
            f"{r['recorder_cpu']:>15.3f} {r['recorder_wall']:>16.3f} {r['after_cpu']:>19.3f}"
        )
    print("\nafter the forward pass, CPU ms per 1000 completion tokens (random logits, best of 3)")
    print(f"{'vocabulary':>10} {'logprobs':>9} {'+entropies':>11}")
    for vocab in (99, 32_000, 151_936):
        tokens = max(64, (1 << 25) // vocab)  # at most 128 MB of logits
        plain, with_entropy = entropy_cost(1, tokens, vocab)
        print(f"{vocab:>10} {plain * 1e6 / tokens:>9.2f} {with_entropy * 1e6 / tokens:>11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
