"""Two short GRPO runs of the demo policy, trained by TRL's GRPOTrainer and recorded by Credit Lens's TRL
recorder, that differ in one setting: the KL coefficient β (0.0 and 0.2). They ship in sample_runs/ as
the bundled runs `kl-0.0` and `kl-0.2` (manifests sample_runs/kl_*.json), so runs side by side and
`creditlens compare-runs` have a real pair to compare (`config.beta` differs; nothing else does).

    python scripts/record_sample_runs.py        # rewrites sample_runs/recorded/kl-*/ (about a minute)

Each step file carries `logprobs_after` (the recorder scores every batch again after its update). The run
kl-0.0 also keeps the weights after each step, `recorded/kl-0.0/trainer/checkpoint-<k>/` (model and tokenizer
only, 3.4 MB each): the step files name them (`meta.checkpoint_after`, and `meta.checkpoint` for the step they
sampled), so `creditlens landed --run kl-0.0 --source checkpoints` scores with them; kl-0.2 keeps none.

Needs the test dependencies (TRL, datasets). Rewards: `task` (1 when the completion's `#### n` answer is the
sum, the bundled demo's verifier), and `format` (0 with a `#### ` answer line, -1 without): two channels.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLES = ROOT / "sample_runs"
POLICY = SAMPLES / "demo-policy"
BETAS = (0.0, 0.2)
KEEP_CHECKPOINTS = (0.0,)
"""The runs whose per-step weights ship (the other route of `creditlens landed`); one is enough."""
CHECKPOINT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
"""What a shipped checkpoint keeps: what `creditlens landed` loads (no optimizer or trainer state)."""
STEPS = 6
GENERATIONS = 4
PROMPTS = ["84+48=?\n", "12+34=?\n", "57+25=?\n", "40+29=?\n", "66+17=?\n", "31+58=?\n"]
PROMPTS_PER_STEP = 2
ANSWER = re.compile(r"####\s*(\d+)")


def _expected(prompt: str) -> int:
    a, b = re.findall(r"\d+", prompt)[:2]
    return int(a) + int(b)


def task(prompts, completions, **kwargs):
    """1.0 when the `#### n` answer is the sum of the prompt's two numbers, else 0.0."""
    out = []
    for prompt, text in zip(prompts, completions, strict=True):
        found = ANSWER.search(text)
        out.append(float(found is not None and int(found.group(1)) == _expected(prompt)))
    return out


def format(completions, **kwargs):  # noqa: A001 - TRL names the channel after the function
    """0.0 when the completion has a `#### n` answer line, else -1.0."""
    return [0.0 if ANSWER.search(text) else -1.0 for text in completions]


def trainer_for(beta: float, output_dir: Path, save: bool, callbacks: tuple = ()):
    """The GRPOTrainer of the run with KL coefficient `beta` (the demo policy, the two reward functions, the
    prompts in order, CPU, seeded): what `record_one` records and what `python -m bench attribution`
    replays. `save`: a checkpoint after every step (model only) under `output_dir`."""
    from datasets import Dataset  # noqa: PLC0415 - test dependency
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415 - test dependency

    tokenizer = AutoTokenizer.from_pretrained(POLICY, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(POLICY, local_files_only=True)
    saving = (
        {"save_strategy": "steps", "save_steps": 1, "save_only_model": True}
        if save
        else {"save_strategy": "no"}
    )
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=STEPS,
        per_device_train_batch_size=PROMPTS_PER_STEP * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=48,
        learning_rate=1e-3,
        beta=beta,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        data_seed=0,
        temperature=1.0,
        shuffle_dataset=False,
        bf16=False,
        disable_dropout=True,
        **saving,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[task, format],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * STEPS]),
        processing_class=tokenizer,
        callbacks=list(callbacks) or None,
    )


def record_one(beta: float, dest: Path) -> None:
    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL

    keep = beta in KEEP_CHECKPOINTS
    shutil.rmtree(dest, ignore_errors=True)
    # Both runs save every step (their settings differ in beta alone), inside the recording, where its step
    # files name the checkpoints relative to it; only the runs of KEEP_CHECKPOINTS keep them.
    out = dest / "trainer"
    trainer = trainer_for(beta, out, save=True)
    recorder = lens_trl.record(trainer, dest, entropies=True)
    trainer.train()
    recorder.close()
    print(
        f"{dest.name}: recorder {recorder.seconds:.2f} s, of which after-update scoring "
        f"{recorder.after_seconds:.2f} s"
    )
    if not keep:
        shutil.rmtree(out)
    else:
        for checkpoint in sorted(out.glob("checkpoint-*")):
            for path in checkpoint.iterdir():
                if path.name not in CHECKPOINT_FILES:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        for path in out.iterdir():
            if not path.name.startswith("checkpoint-"):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    # the trainer's args name its output folder and the logging folder under it: where, not a setting
    settings = json.loads((dest / "trainer_config.json").read_text())
    for key in ("output_dir", "logging_dir"):
        settings[key] = None
    (dest / "trainer_config.json").write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")


def main() -> int:
    for beta in BETAS:
        name = f"kl-{beta}"
        folder = SAMPLES / "recorded" / name
        record_one(beta, folder)
        manifest = {
            "run": name,
            "file": f"recorded/{name}",
            "model": "demo-policy",
            "source": f"TRL GRPOTrainer + Credit Lens recorder, beta={beta}",
            "recorded": "python scripts/record_sample_runs.py (TRL GRPOTrainer on CPU, seed 0, "
            f"{STEPS} steps of {PROMPTS_PER_STEP} prompts x {GENERATIONS} completions, beta {beta})",
        }
        path = SAMPLES / f"kl_{str(beta).replace('.', '')}.json"
        path.write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"{folder}: {sorted(p.name for p in folder.iterdir())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
