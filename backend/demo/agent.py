"""Sample the bundled multi-turn agent run: `python -m backend.demo.agent`.

The demo policy solves `a+b=?` one column per assistant turn; after each column line a calculator tool
answers with the line's left-hand side evaluated (`calc: 12`, or `calc: error` when the line is not a sum),
and the policy goes on from the tool's answer, until it writes its `#### answer` line, ends, or has had
`MAX_TURNS` turns. The tool's tokens are in the response (the policy reads them) but carry `loss_mask` 0:
a trainer never trains them, so no estimator may credit them.

Why not TRL's own tool loop (`GRPOTrainer(tools=[...])`): it finds tool calls by parsing the policy's
output with the chat template's response schema (`trl.chat_template_utils.parse_response`). The plain demo
policy has no chat template and never writes a tool call, so this loop drives it with a plain-text
protocol it does follow (the column lines it was trained on). The bundled `agent-trl` run is the one
TRL's loop made, with the demo policy first taught a chat format with tool calls (`backend/demo/chat.py`,
`python -m backend.demo.tool_sft`; `scripts/record_agent_trl.py`).

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
import time
from pathlib import Path

import torch

from backend.demo.rollouts import VERIFIER, rounded
from backend.demo.task import make_problem, prompt_text, worked_lines
from backend.demo.train import DEFAULT_OUT, step_folder
from backend.models import tool_loop
from backend.models.environments import CALCULATOR, calculator  # noqa: F401 - the demo's tool, named here
from backend.models.tool_loop import Episode
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
    "This run is Credit Lens's own loop over the plain demo policy, which has no chat template and never "
    "writes a tool call, so TRL's GRPOTrainer(tools=[...]) could not drive it; it speaks a plain-text "
    "protocol the policy follows (its column lines, each answered by the calculator). The bundled run "
    "agent-trl is the one TRL's tool loop made: the demo policy taught a chat format with tool calls "
    "(python -m backend.demo.tool_sft), trained by GRPOTrainer(tools=[calculator])."
)
ENVIRONMENT = CALCULATOR
"""The episode's loop: the calculator answers each column line; `ENVIRONMENT.max_turns` (5) assistant turns
at most (a two-digit sum needs 3), `ENVIRONMENT.turn_tokens` (32) new tokens per turn."""
MAX_TURNS = ENVIRONMENT.max_turns


def progress(a: int, b: int, lines: list[str]) -> float:
    """The share of the problem's column lines written correctly in `lines` (the environment's score)."""
    wanted = worked_lines(a, b)
    written = {line.strip() for line in lines}
    return round(sum(line in written for line in wanted) / len(wanted), 4)


def turn_rewards(engine: TransformersEngine, episode: Episode) -> list[float]:
    """One per assistant turn: the progress after it, and the task score after the last."""
    a, b = episode.tag
    task = evaluate(engine.decode(episode.token_ids), a + b, verifier=VERIFIER).scores["task"]
    lines = episode.lines
    return [progress(a, b, lines[: k + 1]) for k in range(len(lines) - 1)] + [float(task)]


def run_episodes(
    engine: TransformersEngine, problems: list[tuple[int, int]], group: int, seed: int
) -> list[Episode]:
    """`group` episodes per problem through the tool loop (`backend.models.tool_loop`), every live episode's
    next assistant turn sampled in one batch; episode i's turn k draws with seed `seed + 100 i + k`."""
    episodes = [
        Episode(engine.encode(prompt_text(a, b)), seed + i * 100, tag=(a, b))
        for i, (a, b) in enumerate(p for p in problems for _ in range(group))
    ]
    return tool_loop.run_episodes(engine, episodes, ENVIRONMENT)


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
        a, b = e.tag
        task = evaluate(response, a + b, verifier=VERIFIER).scores["task"]
        records.append(
            {
                "prompt": prompt_text(a, b),
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
                "turn_rewards": turn_rewards(engine, e),
                "meta": {"ground_truth": a + b, "operands": [a, b], "checkpoint": checkpoint},
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
        environment=ENVIRONMENT.name,
    )
    args.out.with_suffix(".json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(records)} rollouts to {args.out} in {seconds:.0f}s")


if __name__ == "__main__":
    main()
