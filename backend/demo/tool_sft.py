"""Teach the demo policy to call the calculator: `python -m backend.demo.tool_sft [--steps N] [--out DIR]`.

A short supervised stage from `sample_runs/demo-policy` (the addition policy of `backend.demo.train`) on
worked tool-calling episodes of two-digit sums (`backend.demo.chat.episode_messages`), rendered with the
chat format of `backend.demo.chat` and cut into turns where TRL's tool loop cuts them. The loss is on the
assistant's turns only (each tool call and its `<eos>`, the answer turn): the prompt and the tool's
answers are context, as they are in TRL's tool mask. The result, with the chat template and the response
template in its tokenizer files, is the policy that `scripts/record_agent_trl.py` trains with
`GRPOTrainer(tools=[calculator])`. Seeded (torch and the problem stream); like `backend.demo.train`, not
bit-reproducible across thread counts or machines, so the shipped checkpoint is the record.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from backend.demo.chat import calculator, episode_messages, rendered_turns, with_chat
from backend.demo.task import make_problem
from backend.demo.train import DEFAULT_OUT, save, supervised_step

TOOL_POLICY = Path("sample_runs/demo-tool-policy")


def encoded_episode(tokenizer, a: int, b: int) -> tuple[list[int], list[int]]:
    """input ids of one rendered episode and its labels (-100 on the prompt and the tool's tokens)."""
    prompt, pieces = rendered_turns(tokenizer, episode_messages(a, b), [calculator])
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    labels = [-100] * len(ids)
    for role, text in pieces:
        piece = tokenizer.encode(text, add_special_tokens=False)
        ids += piece
        labels += piece if role == "assistant" else [-100] * len(piece)
    return ids, labels


def training_batch(rng: random.Random, tokenizer, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids: (B, T) int64 right-padded; labels: (B, T) int64, -100 where nothing is trained."""
    rows = [encoded_episode(tokenizer, *make_problem(rng, three_digit_share=0.0)) for _ in range(batch_size)]
    T = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((batch_size, T), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((batch_size, T), -100, dtype=torch.long)
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
    return input_ids, labels


def train(start: Path, out: Path, steps: int, batch_size: int, lr: float, seed: int) -> None:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = with_chat(AutoTokenizer.from_pretrained(start, local_files_only=True))
    model = AutoModelForCausalLM.from_pretrained(start, local_files_only=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    # cosine from lr down to a tenth of it, as backend.demo.train ends (no warmup: the weights are trained)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps))
    )
    started, running = time.perf_counter(), None
    model.train()
    for step in range(1, steps + 1):
        loss = supervised_step(model, optimizer, scheduler, *training_batch(rng, tokenizer, batch_size))
        running = loss if running is None else 0.9 * running + 0.1 * loss
        if step % 25 == 0 or step == steps:
            print(f"step {step}/{steps} loss {running:.3f} {time.perf_counter() - started:.0f}s", flush=True)
    model.eval()
    meta = {
        "start": str(start),
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "loss": round(running, 4),
        "task": "tool-calling episodes of two-digit sums (backend.demo.chat), loss on the assistant's turns",
        "command": "python -m backend.demo.tool_sft",
    }
    save(model, tokenizer, out, meta)
    print(f"saved {out} in {time.perf_counter() - started:.0f}s", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--out", type=Path, default=TOOL_POLICY)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    train(args.start, args.out, args.steps, args.batch_size, args.lr, args.seed)


if __name__ == "__main__":
    main()
