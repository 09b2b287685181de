"""Sample the bundled multi-turn agent run: `python -m backend.demo.agent`.

The demo policy solves `a+b=?` one column per assistant turn; after each column line a calculator tool
answers with the line's left-hand side evaluated (`calc: 12`, or `calc: error` when the line is not a sum),
and the policy goes on from the tool's answer, until it writes its `#### answer` line, ends, or has had
`MAX_TURNS` turns. The tool's tokens are in the response (the policy reads them) but carry `loss_mask` 0:
a trainer never trains them, so no estimator may credit them.

Why not TRL's own tool loop (`GRPOTrainer(tools=[...])`): it finds tool calls by parsing the policy's
output with the chat template's response schema (`trl.chat_template_utils.parse_response`; JSON tool
calls in `<tool_call>` tags for the templates TRL knows). The demo policy is a 99-character GPT-2 trained
only on worked additions: it has no chat template and never writes a tool call, so TRL's loop would
never call the tool and every completion would be one assistant turn. This loop drives the same policy
with a plain-text protocol it does follow (the column lines it was trained on).

Step k is sampled by checkpoint k + 1 of the demo policy (`sample_runs/demo-policy-steps/step<k+1>`, the
last by `sample_runs/demo-policy`); the manifest's `checkpoints` says so. Per rollout:
- logprobs, entropies: the whole response scored by the sampling checkpoint (the assistant tokens'
  scores equal their sampling logprobs; the run's manifest gives the largest difference measured);
  ref_logprobs: scored by checkpoint 0 (`demo-policy-steps/step0`);
- rewards: `task` (the `answer_match` verifier on the response);
- loss_mask (1 on the policy's tokens, 0 on the tool's) and turns (assistant and tool spans);
- turn_rewards, one per assistant turn: the environment's progress after the turn, the share of the
  problem's columns (`backend.demo.task.worked_lines`) the transcript has written correctly so far, and
  the task score after the answer turn.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from backend.demo.rollouts import VERIFIER, rounded
from backend.demo.task import make_problem, prompt_text, worked_lines
from backend.demo.train import DEFAULT_OUT, step_folder
from backend.models.transformers_engine import TransformersEngine
from backend.rewards import evaluate

SAMPLES = Path("sample_runs")
OUT = SAMPLES / "agent_run.jsonl"
STEPS_DIR = SAMPLES / "demo-policy-steps"
MANIFEST = {
    "run": "agent",
    "file": "agent_run.jsonl",
    "model": "demo-policy",
    "verifier": VERIFIER,
    "source": "demo policy with a calculator tool (multi-turn)",
}
WHY_NOT_TRL = (
    "TRL's GRPOTrainer(tools=[...]) finds tool calls by parsing the policy's output with its chat template's "
    "response schema; the 99-character demo policy has no chat template and never writes a tool call, so "
    "TRL's loop would never call the tool. backend.demo.agent drives the same policy with a plain-text "
    "protocol it follows (its column lines, each answered by the calculator)."
)
MAX_TURNS = 5
"""Assistant turns per episode at most (a two-digit sum needs 3: two columns and the answer)."""
TURN_TOKENS = 32
"""New tokens per assistant turn at most (a column line is about 16 characters)."""
SUM = re.compile(r"(\d+(?:\+\d+)+)\s*=")


def calculator(line: str) -> str:
    """The tool's answer to an assistant line: the sum left of its `=`, or `error`."""
    match = SUM.search(line)
    value = sum(int(x) for x in match.group(1).split("+")) if match else "error"
    return f"calc: {value}\n"


@dataclass(eq=False)  # identity: two episodes of a group start equal
class Episode:
    """One rollout being sampled: its context, its tokens and their turns."""

    a: int
    b: int
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    sampled: dict[int, float] = field(default_factory=dict)
    """Position -> the logprob the policy sampled the token with (assistant tokens)."""
    done: bool = False

    def add(self, role: str, ids: list[int]) -> None:
        start = len(self.token_ids)
        self.token_ids += ids
        self.loss_mask += [1 if role == "assistant" else 0] * len(ids)
        self.turns.append({"role": role, "start": start, "end": start + len(ids)})

    def progress(self) -> float:
        """The share of the problem's column lines written correctly so far (the environment's score)."""
        wanted = worked_lines(self.a, self.b)
        written = {line.strip() for line in self.lines}
        return round(sum(line in written for line in wanted) / len(wanted), 4)


def run_episodes(
    engine: TransformersEngine, problems: list[tuple[int, int]], group: int, seed: int
) -> list[Episode]:
    """`group` episodes per problem, every live episode's next assistant turn sampled in one batch."""
    newline = engine.encode("\n")[0]
    episodes = [Episode(a, b, engine.encode(prompt_text(a, b))) for a, b in problems for _ in range(group)]
    for turn in range(MAX_TURNS):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        samples = engine.generate(
            [e.prompt_ids + e.token_ids for e in live],
            n=1,
            max_new_tokens=TURN_TOKENS,
            temperature=1.0,
            prefix_seeds=[seed + episodes.index(e) * 100 + turn for e in live],
        )
        for episode, sample in zip(live, samples, strict=True):
            ids = sample.token_ids
            ended = newline not in ids  # the end token (or the turn's budget) came before a newline
            if newline in ids:
                ids = ids[: ids.index(newline) + 1]
            line = engine.decode(ids)
            episode.sampled.update(
                {len(episode.token_ids) + k: lp for k, lp in enumerate(sample.logprobs[: len(ids)])}
            )
            episode.add("assistant", ids)
            episode.lines.append(line)
            final = ended or "####" in line or turn == MAX_TURNS - 1
            room = engine.max_positions - len(episode.prompt_ids) - len(episode.token_ids) - TURN_TOKENS - 12
            if final or room < 0:
                episode.done = True
                task = evaluate(engine.decode(episode.token_ids), episode.a + episode.b, verifier=VERIFIER)
                episode.turn_rewards.append(float(task.scores["task"]))
            else:
                episode.turn_rewards.append(episode.progress())
                episode.add("tool", engine.encode(calculator(line)))
    return episodes


def records_of(
    engine: TransformersEngine,
    ref: TransformersEngine,
    episodes: list[Episode],
    step: int,
    group: int,
    checkpoint: str,
) -> tuple[list[dict], float]:
    """Native records of one step's episodes, and the largest |scored - sampled| logprob over their
    assistant tokens (the whole response is scored by the sampling policy, tool tokens included)."""
    prompts = [e.prompt_ids for e in episodes]
    responses = [e.token_ids for e in episodes]
    scored = engine.score(prompts, responses, chunk_size=64)
    ref_scored = ref.score(prompts, responses, chunk_size=64)
    records, gap = [], 0.0
    for i, (e, own, base) in enumerate(zip(episodes, scored, ref_scored, strict=True)):
        gap = max([gap] + [abs(float(own.logprobs[t]) - lp) for t, lp in e.sampled.items()])
        response = engine.decode(e.token_ids)
        task = evaluate(response, e.a + e.b, verifier=VERIFIER).scores["task"]
        records.append(
            {
                "prompt": prompt_text(e.a, e.b),
                "response": response,
                "group": step * 1000 + i // group,
                "step": step,
                "prompt_ids": e.prompt_ids,
                "token_ids": e.token_ids,
                "tokens": engine.token_texts(e.token_ids),
                "logprobs": rounded(own.logprobs),
                "ref_logprobs": rounded(base.logprobs),
                "entropies": rounded(own.entropies),
                "rewards": {"task": float(task)},
                "loss_mask": e.loss_mask,
                "turns": e.turns,
                "turn_rewards": e.turn_rewards,
                "meta": {"ground_truth": e.a + e.b, "operands": [e.a, e.b], "checkpoint": checkpoint},
            }
        )
    return records, gap


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group", type=int, default=6)
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    # step k is sampled by checkpoint k + 1 (checkpoint 0 rarely gets a sum right through the tool's lines:
    # no group would have a reward to share); checkpoint 0 is the reference, as in the demo run
    folders = [step_folder(STEPS_DIR, k + 1, 3, DEFAULT_OUT) for k in range(args.steps)]
    rng = random.Random(args.seed)
    ref = TransformersEngine(step_folder(STEPS_DIR, 0, 3), device="cpu")
    start, records, checkpoints, gaps = time.perf_counter(), [], {}, {}
    for step in range(args.steps):
        engine = TransformersEngine(folders[step], device="cpu")
        problems = [make_problem(rng, three_digit_share=0.0) for _ in range(args.prompts_per_step)]
        episodes = run_episodes(engine, problems, args.group, seed=args.seed * 100_000 + step * 10_000)
        checkpoint = str(folders[step].relative_to(SAMPLES))
        rows, gap = records_of(engine, ref, episodes, step, args.group, checkpoint)
        checkpoints[str(step)], gaps[str(step)] = checkpoint, float(f"{gap:.2e}")
        records += rows
        solved = sum(r["rewards"]["task"] > 0 for r in rows) / len(rows)
        turns = sum(len(r["turns"]) for r in rows) / len(rows)
        print(
            f"step {step} ({folders[step]}): {len(rows)} rollouts, task {solved:.2f}, {turns:.1f} turns, "
            f"max |scored - sampled logprob| {gap:.2e}"
        )
    with args.out.open("w") as fh:
        for record in records:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
    seconds = time.perf_counter() - start
    manifest = dict(
        MANIFEST,
        file=args.out.name,
        responses=len(records),
        steps=args.steps,
        group_size=args.group,
        seed=args.seed,
        checkpoints=checkpoints,
        ref_logprobs="checkpoint step0",
        on_policy_evidence=f"max |scored - sampled logprob| on the assistant tokens per step: {gaps}",
        sampled=f"python -m backend.demo.agent (defaults), {seconds:.0f} s on 2 shared CPU cores",
        why_not_trl=WHY_NOT_TRL,
    )
    args.out.with_suffix(".json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(records)} rollouts to {args.out} in {seconds:.0f}s")


if __name__ == "__main__":
    main()
