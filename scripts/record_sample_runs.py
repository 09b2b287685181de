"""Two short GRPO runs of the demo policy, trained by TRL's GRPOTrainer and recorded by Credit Lens's TRL
recorder, that differ in one setting: the KL coefficient β (0.0 and 0.2). They ship in sample_runs/ as
the bundled runs `kl-0.0` and `kl-0.2` (manifests sample_runs/kl_*.json), so runs side by side and
`creditlens compare-runs` have a real pair to compare (`config.beta` differs; nothing else does).

    python scripts/record_sample_runs.py        # rewrites sample_runs/recorded/kl-*/ (about a minute)

Needs the test dependencies (TRL, datasets). Rewards: `task` (1 when the completion's `#### n` answer is the
sum, the bundled demo's verifier), and `format` (0 with a `#### ` answer line, -1 without): two channels.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLES = ROOT / "sample_runs"
POLICY = SAMPLES / "demo-policy"
BETAS = (0.0, 0.2)
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


def record_one(beta: float, dest: Path) -> None:
    from datasets import Dataset  # noqa: PLC0415 - test dependency
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415 - test dependency

    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL

    tokenizer = AutoTokenizer.from_pretrained(POLICY, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(POLICY, local_files_only=True)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=STEPS,
            per_device_train_batch_size=PROMPTS_PER_STEP * GENERATIONS,
            num_generations=GENERATIONS,
            max_completion_length=48,
            learning_rate=1e-3,
            beta=beta,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            seed=0,
            data_seed=0,
            temperature=1.0,
            shuffle_dataset=False,
            bf16=False,
            disable_dropout=True,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[task, format],
            args=config,
            train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * STEPS]),
            processing_class=tokenizer,
        )
        shutil.rmtree(dest, ignore_errors=True)
        recorder = lens_trl.record(trainer, dest, entropies=True)
        trainer.train()
        recorder.close()
    # the trainer's args name its temporary output folder and the logging folder under it: not a setting
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
