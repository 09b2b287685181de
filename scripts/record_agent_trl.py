"""An agent run made by TRL's own tool loop: the tool-calling demo policy trained by
`GRPOTrainer(tools=[calculator])` on CPU and recorded by Credit Lens's TRL recorder. It ships in sample_runs/
as the bundled run `agent-trl` (manifest sample_runs/agent_trl.json), beside the `agent` run that
`backend.demo.agent` samples with its own loop.

    python -m backend.demo.tool_sft         # sample_runs/demo-tool-policy (33 min on 2 shared cores)
    python scripts/record_agent_trl.py      # rewrites sample_runs/recorded/agent-trl/ (2-3 minutes)

Needs the test dependencies (TRL 1.16, datasets). What TRL does with the tools (TRL 1.16,
`trl/trainer/grpo_trainer.py`): `_tokenize_prompts` renders each conversational prompt with the chat template
and the tools; `_generate` decodes every completion with `parse_response` (the tokenizer's response
template, `backend.demo.chat`); `_tool_call_loop` calls the tool each parsed `tool_calls` names, appends the
tool's tokens (`_get_tool_suffix_ids`, tool_mask 0) and generates again, at most `max_tool_calling_iterations`
times and within `max_completion_length`. The recorder writes TRL's `tool_mask` as the records' `loss_mask`,
and the turns it implies. Reward: `task`, 1 when the last assistant message's `#### n` is the sum.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backend.demo.chat import calculator  # noqa: E402 - after the path above
from backend.demo.task import make_problem  # noqa: E402

SAMPLES = ROOT / "sample_runs"
POLICY = SAMPLES / "demo-tool-policy"
RUN = "agent-trl"
STEPS = 4
PROMPTS_PER_STEP = 3
GENERATIONS = 6
SEED = 7
MAX_COMPLETION = 64
"""A worked two-digit episode is about 60 tokens. TRL generates after a tool's answer with max_new_tokens =
max_completion_length and cuts afterwards (`_tool_call_loop`), so prompt + 2 x this must fit the policy's 160
positions: at 96 a long turn ran past them (IndexError in GPT-2's position embedding)."""
TEMPERATURE = 1.5
"""At 1.0 the supervised policy solved all 72 completions (2026-12-07): every group's rewards equal, no
advantage anywhere; sampling hotter makes it slip in some, so groups have a reward to share."""
MAX_TOOL_CALLS = 3
"""Tool-calling iterations per completion at most (a two-digit sum needs two: one per column)."""
ANSWER = re.compile(r"####\s*(\d+)")


def task(completions, answer, **kwargs):
    """1.0 when the last assistant message's `#### n` is the sum (`answer`, a dataset column), else 0.0."""
    out = []
    for messages, want in zip(completions, answer, strict=True):
        said = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        found = ANSWER.search(said[-1]) if said else None
        out.append(float(found is not None and int(found.group(1)) == want))
    return out


def dataset_rows(seed: int = SEED, n: int = STEPS * PROMPTS_PER_STEP) -> list[dict]:
    """Conversational prompts `a+b=?` with two-digit operands, and their sums."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = make_problem(rng, three_digit_share=0.0)
        rows.append({"prompt": [{"role": "user", "content": f"{a}+{b}=?"}], "answer": a + b})
    return rows


def trainer_for(output_dir: Path, policy: Path = POLICY, steps: int = STEPS, prompts: int = PROMPTS_PER_STEP):
    """The GRPOTrainer of the run (tools=[calculator]), on CPU, seeded."""
    from datasets import Dataset  # noqa: PLC0415 - test dependency
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415 - test dependency

    tokenizer = AutoTokenizer.from_pretrained(policy, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(policy, local_files_only=True)
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=prompts * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=MAX_COMPLETION,
        max_tool_calling_iterations=MAX_TOOL_CALLS,
        learning_rate=1e-3,
        beta=0.0,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        data_seed=0,
        temperature=TEMPERATURE,
        shuffle_dataset=False,
        bf16=False,  # TRL's default autocasts to bf16, even on CPU
        disable_dropout=True,  # the demo policy has dropout 0.1: without this no two passes agree
        log_completions=True,  # completions/*.parquet: TRL's messages, what the turns are checked against
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[task],
        args=config,
        train_dataset=Dataset.from_list(dataset_rows(n=steps * prompts)),
        processing_class=tokenizer,
        tools=[calculator],
    )


def record(dest: Path) -> dict:
    """Train and record the run into `dest`; returns the recorder's figures."""
    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL

    with tempfile.TemporaryDirectory() as out:
        trainer = trainer_for(Path(out))
        shutil.rmtree(dest, ignore_errors=True)
        recorder = lens_trl.record(trainer, dest, entropies=True)
        trainer.train()
        recorder.close()
        logged = sorted((Path(out) / "completions").glob("*.parquet"))
        metrics = [h for h in trainer.state.log_history if "tools/call_frequency" in h]
        figures = {
            "tool_calls_per_completion": [round(h["tools/call_frequency"], 3) for h in metrics],
            "tool_failures": [round(h.get("tools/failure_frequency", 0.0), 3) for h in metrics],
            "task": [round(h.get("rewards/task/mean", float("nan")), 3) for h in metrics],
            "trl_completion_logs": len(logged),
        }
    # the trainer's args name its temporary output folder and the logging folder under it: not a setting
    settings = json.loads((dest / "trainer_config.json").read_text())
    for key in ("output_dir", "logging_dir"):
        settings[key] = None
    (dest / "trainer_config.json").write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
    return figures


def main() -> int:
    folder = SAMPLES / "recorded" / RUN
    figures = record(folder)
    manifest = {
        "run": RUN,
        "file": f"recorded/{RUN}",
        "model": POLICY.name,
        "source": "TRL GRPOTrainer(tools=[calculator]) + Credit Lens recorder",
        "recorded": f"python scripts/record_agent_trl.py (TRL GRPOTrainer with tools on CPU, seed 0, {STEPS} "
        f"steps of {PROMPTS_PER_STEP} prompts x {GENERATIONS} completions, at most {MAX_TOOL_CALLS} tool "
        f"calls and {MAX_COMPLETION} completion tokens, temperature {TEMPERATURE}, beta 0.0)",
        "policy": "python -m backend.demo.tool_sft (from sample_runs/demo-policy; its training.json)",
        "trl": figures,
    }
    (SAMPLES / "agent_trl.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{folder}: {sorted(p.name for p in folder.iterdir())}\n{json.dumps(figures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
