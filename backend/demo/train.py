"""Train the demo policy: `python -m backend.demo.train [--steps N] [--out DIR] [--seed S]`.

A GPT-2-architecture model (4 layers, 128 wide, ~0.83 M parameters) with a character tokenizer,
trained from scratch on the addition task of `backend.demo.task` with its style and format noise.
The default budget is a few minutes on two CPU cores; the policy comes out decent, not perfect,
which is what the demo needs (right and wrong answers in the same group).

Besides the final model in `--out` (config.json, model.safetensors, tokenizer files), it keeps
intermediate checkpoints in `--steps-dir`; `backend.demo.rollouts` samples training step k of the demo run
from checkpoint k. The demo ships step0..step2 in `sample_runs/demo-policy-steps/`; the last checkpoint
holds the final model's tensors, so it is shipped once, as `sample_runs/demo-policy` (`step_folder`).
Seeded, but not bit-reproducible across thread counts or machines: 1 and 2 threads differ by 3e-6 after
4 steps, and a retrain misses an earlier sampling's stored logprobs (docs/oracle.md), so the
shipped checkpoints are the record.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from backend.demo.task import Noise, make_problem, prompt_text, response_text
from backend.demo.tokenizer import build_char_tokenizer

DEFAULT_OUT = Path("sample_runs/demo-policy")
DEFAULT_STEPS_DIR = Path("build/demo-policy-steps")
CHECKPOINT_FRACTIONS = (0.4, 0.6, 0.8, 1.0)


def step_folder(steps_dir: Path, step: int, last: int, final: Path = DEFAULT_OUT) -> Path:
    """Checkpoint `step` of the demo run: `steps_dir/step<step>`, or for the last step, when that folder is
    absent, the final model `final` (`train` saves both from the same tensors at its last step)."""
    folder = steps_dir / f"step{step}"
    if step == last and not (folder / "config.json").exists():
        return final
    return folder


def model_config(tokenizer) -> GPT2Config:
    return GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=160,
        n_embd=128,
        n_layer=4,
        n_head=4,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )


def training_batch(rng: random.Random, tokenizer, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids: (B, T) int64 right-padded; labels: (B, T) int64, -100 on prompt and padding."""
    noise = Noise()
    rows, label_rows = [], []
    for _ in range(batch_size):
        a, b = make_problem(rng)
        prompt = tokenizer.encode(prompt_text(a, b), add_special_tokens=False)
        response = tokenizer.encode(response_text(a, b, rng, noise), add_special_tokens=False)
        response.append(tokenizer.eos_token_id)
        rows.append(prompt + response)
        label_rows.append([-100] * len(prompt) + response)
    T = max(len(r) for r in rows)
    input_ids = torch.full((batch_size, T), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((batch_size, T), -100, dtype=torch.long)
    for i, (row, lab) in enumerate(zip(rows, label_rows, strict=True)):
        input_ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(lab)] = torch.tensor(lab)
    return input_ids, labels


def supervised_step(model, optimizer, scheduler, input_ids: torch.Tensor, labels: torch.Tensor) -> float:
    """One clipped optimizer step on the next-token loss of `labels` (-100: not trained); returns the loss.
    Padding is the model's `pad_token_id`, left out of the attention."""
    attention_mask = (input_ids != model.config.pad_token_id).long()
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss.item()


def save(model, tokenizer, out: Path, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "training.json").write_text(json.dumps(meta, indent=2) + "\n")


def train(steps: int, batch_size: int, lr: float, seed: int, out: Path, steps_dir: Path) -> None:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = build_char_tokenizer()
    model = GPT2LMHeadModel(model_config(tokenizer))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params:,}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    checkpoints = {max(1, round(f * steps)): k for k, f in enumerate(CHECKPOINT_FRACTIONS)}
    start, running = time.perf_counter(), None
    model.train()
    for step in range(1, steps + 1):
        loss = supervised_step(model, optimizer, scheduler, *training_batch(rng, tokenizer, batch_size))
        running = loss if running is None else 0.95 * running + 0.05 * loss
        if step % 50 == 0 or step == steps:
            print(f"step {step}/{steps} loss {running:.3f} {time.perf_counter() - start:.0f}s", flush=True)
        if step in checkpoints:
            meta = {
                "seed": seed,
                "step": step,
                "steps": steps,
                "batch_size": batch_size,
                "lr": lr,
                "loss": round(running, 4),
                "parameters": n_params,
                "task": "addition (backend.demo.task)",
            }
            model.eval()
            save(model, tokenizer, steps_dir / f"step{checkpoints[step]}", meta)
            if step == steps:
                save(model, tokenizer, out, meta)
            model.train()
    print(f"saved {out} in {time.perf_counter() - start:.0f}s", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps-dir", type=Path, default=DEFAULT_STEPS_DIR)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    train(args.steps, args.batch_size, args.lr, args.seed, args.out, args.steps_dir)


if __name__ == "__main__":
    main()
