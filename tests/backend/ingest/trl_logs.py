"""Real TRL completion logs, written by TRL's own `GRPOTrainer(log_completions=True)` on CPU with the
bundled demo policy (trl 1.16.0, transformers 5.24.0; see `trl/trainer/grpo_trainer.py`, `GRPOTrainer.log`
and `_generate_and_score_completions`, in that release).

The run is built to exercise what real logs hold: two reward functions, one of them returning None for
some completions (a NaN reward) and both returning None for some (an unscorable row, advantage 0), a
`log_extra` integer column and a string column, and one prompt that appears twice in the dataset next
to itself (two groups of `num_generations` with the same prompt text in one step).
"""

from __future__ import annotations

from pathlib import Path

DEMO_POLICY = Path(__file__).resolve().parents[3] / "sample_runs" / "demo-policy"
NUM_GENERATIONS = 4
PROMPTS = ["12+34=?\n", "12+34=?\n", "5+7=?\n", "40+2=?\n", "9+9=?\n", "70+1=?\n"]
PROMPTS_PER_STEP = 3
# A minimal chat template for the conversational run (the demo tokenizer has none; TRL needs one).
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def digits_reward(completions, log_extra=None, **kwargs):
    """0.25 per digit (capped at 1); None for the first two completions of every group."""
    texts = [_text(c) for c in completions]
    if log_extra is not None:
        log_extra("n_chars", [len(t) for t in texts])
        log_extra("first_char", [t[:1] or "-" for t in texts])
    return [
        None if i % NUM_GENERATIONS < 2 else min(1.0, 0.25 * sum(ch.isdigit() for ch in t))
        for i, t in enumerate(texts)
    ]


def newline_reward(completions, **kwargs):
    """1 when the completion has a newline, else 0; None for the first completion of every group."""
    return [None if i % NUM_GENERATIONS == 0 else float("\n" in _text(c)) for i, c in enumerate(completions)]


def _text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content") or "" for m in completion)
    return completion


def run_grpo(output_dir: Path, conversational: bool, steps: int = 2) -> Path:
    """Train `steps` GRPO steps and return the directory of TRL's completion logs."""
    if conversational:
        rows = [{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS]
    else:
        rows = [{"prompt": p} for p in PROMPTS]
    return train_logged(
        output_dir,
        rows,
        [digits_reward, newline_reward],
        steps=steps,
        num_generations=NUM_GENERATIONS,
        batch_size=PROMPTS_PER_STEP * NUM_GENERATIONS,
        chat_template=CHAT_TEMPLATE if conversational else None,
    )


def train_logged(
    output_dir: Path,
    rows: list[dict],
    reward_funcs: list,
    *,
    steps: int,
    num_generations: int,
    batch_size: int,
    chat_template: str | None = None,
) -> Path:
    """Train the demo policy with TRL's GRPOTrainer on `rows`, logging completions; return the log folder."""
    # Heavy (seconds to import), needed only by the session fixtures that train; TRL and datasets are pinned
    # test dependencies, so a missing one fails here rather than skipping.
    from datasets import Dataset  # noqa: PLC0415 - heavy, only here
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy, only here
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415 - heavy, only here

    tokenizer = AutoTokenizer.from_pretrained(DEMO_POLICY, local_files_only=True)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    model = AutoModelForCausalLM.from_pretrained(DEMO_POLICY, local_files_only=True)
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        num_generations=num_generations,
        max_completion_length=16,
        learning_rate=1e-4,
        logging_steps=1,
        log_completions=True,
        num_completions_to_print=0,
        shuffle_dataset=False,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        temperature=1.0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    trainer.train()
    return output_dir / "completions"


def has_newline(response: str, ground_truth) -> float:
    """A verifier for resampling on a TRL run (TRL logs carry no ground truth): the newline reward."""
    return float("\n" in response)
