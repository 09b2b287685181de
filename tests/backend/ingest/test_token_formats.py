"""Token-level dumps of NeMo-RL, prime-rl and RL Logging Board, imported through the real command line
into a real DuckDB file, then `estimate grpo` on each imported run; readable byte-level BPE labels;
a `--format` that does not fit the file.

The writers below reproduce each project's own writing code (cited per writer) with real token ids of
the bundled demo policy's tokenizer, or of a byte-level BPE tokenizer trained here offline.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from backend.core.errors import InputError
from backend.ingest import FORMATS, detect_format, formats, import_path
from backend.ingest.tokenize import CONTINUATION, Tokenizer, token_labels
from backend.store import Store
from tests.conftest import run_cli_here, snapshot, write_jsonl

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "sample_runs" / "demo-policy"


def import_cli(path: Path, db: Path, run: str, *extra: str) -> subprocess.CompletedProcess:
    done = run_cli_here("import", path, "--db", db, "--run", run, "--quiet", *extra)
    assert done.returncode == 0, done.stderr
    return done


def estimate_cli(db: Path, run: str, out: Path, *extra: str) -> pd.DataFrame:
    done = run_cli_here("estimate", "--db", db, "--run", run, "--estimator", "grpo", "--out", out, *extra)
    assert done.returncode == 0, done.stderr
    return pd.read_parquet(out)


@pytest.fixture(scope="module")
def demo_tokenizer():
    return AutoTokenizer.from_pretrained(str(DEMO), local_files_only=True)


def read_store(db: Path):
    return Store(db, read_only=True)


# --- NeMo-RL --------------------------------------------------------------------------------------


def write_nemo_rl_step(
    path: Path, tok, step: int, prompts: list[str], group: int, seed: int, dropped: int | None = None
) -> dict:
    """`train_data_step{N}.jsonl` as NeMo-RL writes it.

    Source: NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909:
    - nemo_rl/algorithms/grpo.py: `add_grpo_token_loss_masks_and_generation_logprobs` (mask 1 on
      generated assistant tokens, 0 elsewhere; zero generation logprobs where none),
      `batched_message_log_to_flat_message` (messages concatenated, right-padded with the pad id to a
      multiple of make_sequence_length_divisible_by), the advantage estimator's
      `advantages.expand(mask.shape)`, get_logprobs' convention (position 0 holds 0, position t
      scores token t), and the `log_data` block: agent_ref?, content, rewards, input_lengths,
      token_ids, token_loss_mask, sample_loss_mask, advantages, generation_logprobs, prev_logprobs.
    - nemo_rl/utils/logger.py `log_batched_dict_as_jsonl`: `make_microbatch_iterator(1)` slices every
      field to a batch of one, tensors become nested lists, and each line is
      `json.dumps({**sample, "idx": i}, default=str)`.
    The rollout loop appends an environment message after each assistant turn (experience/rollouts.py).
    Returns what the importer should find, per sample.
    """
    rng = random.Random(seed)
    messages, rewards = [], []
    for p in prompts:
        for _ in range(group):
            answer = "".join(rng.choice("0123456789 +=") for _ in range(rng.randint(3, 9)))
            reward = float(rng.random() < 0.5)
            env = "Environment: correct" if reward else "Environment: wrong"
            messages.append([("user", f"Q: {p}\nA:"), ("assistant", answer), ("environment", env)])
            rewards.append(reward)
    rewards_t = torch.tensor(rewards)
    grouped = rewards_t.view(len(prompts), group)
    # any per-sample numbers do for logged advantages; these are group z-scores
    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)
    flat = []
    for msgs in messages:
        ids, mask, gen = [], [], []
        for role, text in msgs:
            t = tok(text, add_special_tokens=False)["input_ids"]
            ids += t
            mask += [1 if role == "assistant" else 0] * len(t)
            gen += [-rng.random() if role == "assistant" else 0.0 for _ in t]
        flat.append((ids, mask, gen))
    divisible = 8
    width = max(len(f[0]) for f in flat)
    width = -(-width // divisible) * divisible
    pad = tok.pad_token_id
    token_ids = torch.tensor([f[0] + [pad] * (width - len(f[0])) for f in flat])
    token_mask = torch.tensor([f[1] + [0] * (width - len(f[1])) for f in flat])
    gen_lp = torch.tensor([f[2] + [0.0] * (width - len(f[2])) for f in flat], dtype=torch.float32)
    prev_lp = -torch.rand(len(flat), width)
    prev_lp[:, 0] = 0.0
    input_lengths = torch.tensor([len(f[0]) for f in flat], dtype=torch.int32)
    sample_mask = torch.ones(len(flat))
    if dropped is not None:
        sample_mask[dropped] = 0.0  # e.g. overlong filtering
    advantages = adv.unsqueeze(-1).expand(token_mask.shape)
    log_data = {
        "content": [[text for _, text in msgs] for msgs in messages],
        "rewards": rewards_t.tolist(),
        "input_lengths": input_lengths.tolist(),
        "token_ids": token_ids.tolist(),
        "token_loss_mask": token_mask.tolist(),
        "sample_loss_mask": sample_mask.tolist(),
        "advantages": advantages.tolist(),
        "generation_logprobs": gen_lp.tolist(),
        "prev_logprobs": prev_lp.tolist(),
    }
    with open(path, "w") as f:
        for i in range(len(flat)):
            sample = {key: value[i : i + 1] for key, value in log_data.items()}
            f.write(json.dumps({**sample, "idx": i}, default=str) + "\n")
    return {
        "flat": flat,
        "rewards": rewards,
        "adv": adv.tolist(),
        "prev": prev_lp.tolist(),
        "sample_mask": sample_mask.tolist(),
        "messages": messages,
    }


@pytest.mark.slow
def test_nemo_rl_dump_imports_through_the_cli_and_estimates(tmp_path, demo_tokenizer):
    logs = tmp_path / "logs" / "exp_001"
    logs.mkdir(parents=True)
    truth = {}
    for step in (1, 2):
        # two dataset rows with one prompt in step 2: NeMo-RL groups them together (by prompt token ids)
        prompts = ["1+2", "3+4"] if step == 1 else ["5+6", "5+6"]
        truth[step] = write_nemo_rl_step(
            logs / f"train_data_step{step}.jsonl",
            demo_tokenizer,
            step,
            prompts,
            group=4,
            seed=step,
            dropped=2 if step == 1 else None,
        )
    (logs / "val_data_step1.jsonl").write_text("{}\n")  # NeMo-RL's validation log sits beside; not read
    db = tmp_path / "s.duckdb"
    done = import_cli(logs, db, "nemo", "--model", DEMO)
    assert "detected format: nemo-rl" in done.stderr and "imported 16 rollouts" in done.stdout
    with read_store(db) as store:
        (run,) = store.list_runs()
        assert (run["rollouts"], run["groups"], run["steps"], run["channels"]) == (16, 3, 2, ["task"])
        for rid in range(16):
            step, i = (1, rid) if rid < 8 else (2, rid - 8)
            ids, mask, gen = truth[step]["flat"][i]
            start = mask.index(1)
            row = store.rollout("nemo", rid)
            user, answer, env = (text for _, text in truth[step]["messages"][i])
            assert row["step"] == step and row["token_ids"] == ids[start:]
            assert row["prompt"] == user and row["response"] == answer + env  # the env turn stays, masked
            assert row["tokens"] == [demo_tokenizer.decode([t]) for t in ids[start:]]
            assert row["rewards"] == {"task": truth[step]["rewards"][i]}
            kept = truth[step]["sample_mask"][i]
            assert row["loss_mask"] == [bool(m * kept) for m in mask[start:]]
            # the environment turn is its own turn, untrained (issue 44)
            assert [t["role"] for t in row["turns"]] == ["assistant", "environment"]
            assert "loss_mask" not in row["extras"]
            np.testing.assert_allclose(row["logprobs"], truth[step]["prev"][i][start : len(ids)], rtol=1e-6)
            np.testing.assert_allclose(row["extras"]["generation_logprobs"], gen[start:], rtol=1e-6)
            np.testing.assert_allclose(
                row["extras"]["logged_advantage"],
                [truth[step]["adv"][i]] * len(ids[start:]),
                rtol=1e-6,
                atol=1e-7,
            )
            assert row["logged_advantage"] == pytest.approx(truth[step]["adv"][i], abs=1e-6)
            assert row["meta"]["idx"] == i and row["meta"]["sample_loss_mask"] == kept
        groups = store.rollout_index("nemo")["group_id"].tolist()
    assert groups == [0] * 4 + [1] * 4 + [2] * 8
    out = estimate_cli(db, "nemo", tmp_path / "a.parquet")
    lengths = [len(ids) - mask.index(1) for s in (1, 2) for ids, mask, _ in truth[s]["flat"]]
    assert len(out) == sum(lengths) and out["rollout_id"].nunique() == 16
    per_rollout = out.groupby("rollout_id")["advantage"].first()
    rewards = truth[1]["rewards"] + truth[2]["rewards"]
    kept = np.array(truth[1]["sample_mask"] + truth[2]["sample_mask"])
    for g in (range(0, 4), range(4, 8), range(8, 16)):
        r = np.array([rewards[k] for k in g])
        z = (r - r.mean()) / (r.std(ddof=1) + 1e-6) if r.std() > 0 else np.zeros_like(r)
        # a sample NeMo-RL's sample_loss_mask drops is not trained: 0 on every token (issue 44)
        np.testing.assert_allclose(per_rollout[list(g)].to_numpy(), z * kept[list(g)], atol=1e-5)


@pytest.mark.slow
def test_nemo_rl_without_a_model_uses_the_logged_messages(tmp_path, demo_tokenizer):
    path = tmp_path / "train_data_step3.jsonl"
    truth = write_nemo_rl_step(path, demo_tokenizer, 3, ["7+1"], group=2, seed=5)
    db = tmp_path / "s.duckdb"
    import_cli(path, db, "n")
    with read_store(db) as store:
        row = store.rollout("n", 1)
    user, answer, env = (text for _, text in truth["messages"][1])
    ids, mask, _ = truth["flat"][1]
    assert row["step"] == 3 and row["prompt"] == user and row["response"] == answer + env
    assert row["tokens"] == [f"<{t}>" for t in ids[mask.index(1) :]]


def test_nemo_rl_bad_records_name_line_and_field(tmp_path, demo_tokenizer):
    path = tmp_path / "train_data_step1.jsonl"
    write_nemo_rl_step(path, demo_tokenizer, 1, ["1+1"], group=2, seed=0)
    lines = path.read_text().splitlines()
    second = json.loads(lines[1])
    second["rewards"] = second["rewards"][0]  # not a batch of one
    write_jsonl(path, [lines[0], json.dumps(second)])
    with Store(tmp_path / "s.duckdb") as store:
        with pytest.raises(
            InputError,
            match=r"train_data_step1.jsonl: line 2: field 'rewards' must be a "
            r"one-element list",
        ):
            import_path(store, path, "n")
        old = tmp_path / "old" / "train_data_step1.jsonl"  # NeMo-RL before it logged token ids
        old.parent.mkdir()
        write_jsonl(
            old,
            [
                {
                    "content": [["q", "a"]],
                    "rewards": [1.0],
                    "generation_logprobs": [[0.0, -1.0]],
                    "prev_logprobs": [[0.0, -1.1]],
                    "input_lengths": [2],
                    "idx": 0,
                }
            ],
        )
        with pytest.raises(InputError, match="line 1: missing NeMo-RL field 'token_ids' \\(a text-only dump"):
            import_path(store, old, "n")
        assert store.list_runs() == []


# --- prime-rl -------------------------------------------------------------------------------------


def write_prime_rl_step(
    out_dir: Path, tok, step: int, samples: list[dict], ranks: int = 2, stable: bool = True
) -> None:
    """`token_exports/step_<N>/rank_<R>.jsonl` as prime-rl's `TokenExporter.export` writes them.

    Source: PrimeIntellect-ai/prime-rl @ 559b44772e471d1538537b8805cc77f3824a5e64,
    src/prime_rl/trainer/rl/token_export.py: per micro batch, samples are packed into one row
    (`sequence_lengths`); `_export_columns` turns each per-token tensor into a list (floats via float32,
    non-finite -> None, columns not computed -> [None] * len); `_trim_padding` drops trailing tokens with
    an empty env name and no loss mask; a sample is written only if some token has loss_mask, as
    `json.dumps(record, separators=(",", ":"), allow_nan=False)` with the scalar keys first;
    `mark_stable` touches `STABLE` in the step folder once every rank has written.
    Here `DefaultLossConfig` is off (is_masked* are None) and component weights are the defaults (None).
    """
    step_dir = out_dir / "token_exports" / f"step_{step}"
    step_dir.mkdir(parents=True)
    for rank in range(ranks):
        mine = samples[rank::ranks]
        names = (
            "token_ids",
            "position_ids",
            "loss_mask",
            "advantages",
            "inference_logprobs",
            "trainer_logprobs",
            "entropy",
        )
        lengths, cols, env_names = [], {k: [] for k in names}, []
        for s in mine:
            p_ids = tok(s["prompt"], add_special_tokens=False)["input_ids"]
            c_ids = tok(s["completion"], add_special_tokens=False)["input_ids"]
            n = len(p_ids) + len(c_ids)
            lengths.append(n)
            cols["token_ids"] += p_ids + c_ids
            cols["position_ids"] += list(range(n))
            cols["loss_mask"] += [False] * len(p_ids) + [True] * len(c_ids)
            cols["advantages"] += [0.0] * len(p_ids) + [s["advantage"]] * len(c_ids)
            cols["inference_logprobs"] += [0.0] * len(p_ids) + s["inference_logprobs"]
            cols["trainer_logprobs"] += s["trainer_logprobs"]
            cols["entropy"] += s["entropy"]
            env_names += ["math"] * n
        # packing pads the micro batch's end: no env name, no loss mask
        lengths[-1] += 3
        for key, pad in (
            ("token_ids", 0),
            ("position_ids", 0),
            ("loss_mask", False),
            ("advantages", 0.0),
            ("inference_logprobs", 0.0),
            ("trainer_logprobs", -4.6),
            ("entropy", 4.6),
        ):
            cols[key] += [pad] * 3
        env_names += [""] * 3
        f32 = {
            k: np.asarray(cols[k], dtype=np.float32).tolist()
            for k in ("advantages", "inference_logprobs", "trainer_logprobs", "entropy")
        }
        trainer, inference = np.asarray(f32["trainer_logprobs"]), np.asarray(f32["inference_logprobs"])
        log_ratio = (trainer - inference).astype(np.float32)
        columns = {
            "token_ids": cols["token_ids"],
            "position_ids": cols["position_ids"],
            "loss_mask": cols["loss_mask"],
            "advantages": f32["advantages"],
            "inference_logprobs": f32["inference_logprobs"],
            "trainer_logprobs": f32["trainer_logprobs"],
            "entropy": f32["entropy"],
            "mismatch_kl": (np.exp(log_ratio) - log_ratio - 1).astype(np.float32).tolist(),
            "log_importance_ratio": log_ratio.tolist(),
            "importance_ratio": np.exp(log_ratio).tolist(),
            "prob_delta": (np.exp(trainer) - np.exp(inference)).astype(np.float32).tolist(),
            "is_masked": [None] * len(env_names),
            "is_masked_high": [None] * len(env_names),
            "is_masked_low": [None] * len(env_names),
            "rl_weights": [None] * len(env_names),
            "ce_weights": [None] * len(env_names),
            "ref_kl_weights": [None] * len(env_names),
        }
        start = 0
        with open(step_dir / f"rank_{rank}.jsonl", "w", encoding="utf-8") as f:
            for idx, length in enumerate(lengths):
                end = start + length
                while end > start and env_names[end - 1] == "" and not columns["loss_mask"][end - 1]:
                    end -= 1
                record = {
                    "schema_version": 1,
                    "step": step,
                    "rank": rank,
                    "micro_step": 0,
                    "micro_sequence_idx": idx,
                    "export_sequence_idx": idx,
                    "env_name": "math",
                    **{k: list(v[start:end]) for k, v in columns.items()},
                }
                f.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
                start = start + length
    if stable:
        (step_dir / "STABLE").touch()


def prime_rl_samples(tok, step: int, seed: int) -> list[dict]:
    """Two examples x 4 rollouts; GRPO advantage = reward - group mean (orchestrator/algo/grpo.py)."""
    rng = random.Random(seed)
    samples = []
    for example in range(2):
        rewards = [float(rng.random() < 0.5) + 0.25 * k for k in range(4)]
        mean = sum(rewards) / 4
        for r in rewards:
            prompt = f"Q{step}.{example}: 2+{example}="
            completion = "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 6)))
            n_p = len(tok(prompt, add_special_tokens=False)["input_ids"])
            n_c = len(tok(completion, add_special_tokens=False)["input_ids"])
            samples.append(
                {
                    "prompt": prompt,
                    "completion": completion,
                    "reward": r,
                    "advantage": float(np.float32(r - mean)),
                    "inference_logprobs": [-rng.random() for _ in range(n_c)],
                    "trainer_logprobs": [-rng.random() for _ in range(n_p + n_c)],
                    "entropy": [rng.random() for _ in range(n_p + n_c)],
                }
            )
    return samples


@pytest.mark.slow
def test_prime_rl_export_imports_and_grpo_on_its_advantage_equals_grpo_on_rewards(tmp_path, demo_tokenizer):
    out_dir = tmp_path / "outputs"
    steps = {s: prime_rl_samples(demo_tokenizer, s, seed=s) for s in (1, 2, 3)}
    write_prime_rl_step(out_dir, demo_tokenizer, 1, steps[1])
    write_prime_rl_step(out_dir, demo_tokenizer, 2, steps[2])
    write_prime_rl_step(out_dir, demo_tokenizer, 3, steps[3], stable=False)  # still being written
    db = tmp_path / "s.duckdb"
    done = import_cli(out_dir, db, "prime", "--model", DEMO)
    assert "detected format: prime-rl" in done.stderr and "imported 16 rollouts" in done.stdout
    assert "skipped step_3 (no STABLE marker" in done.stderr
    with read_store(db) as store:
        (run,) = store.list_runs()
        assert (run["groups"], run["steps"], run["channels"]) == (4, 2, ["advantage"])
        index = store.rollout_index("prime")
        rows = [store.rollout("prime", rid) for rid in index["rollout_id"]]
    # files are read rank by rank: rank 0 holds samples 0, 2, 4, 6 of a step, rank 1 the others
    order = [(s, i) for s in (1, 2) for rank in (0, 1) for i in range(rank, 8, 2)]
    for row, (s, i) in zip(rows, order, strict=True):
        sample = steps[s][i]
        c_ids = demo_tokenizer(sample["completion"], add_special_tokens=False)["input_ids"]
        assert row["response"] == sample["completion"] and row["prompt"] == sample["prompt"]
        assert row["token_ids"] == c_ids and row["step"] == s
        assert row["loss_mask"] == [True] * len(c_ids)
        assert row["turns"] == [{"role": "assistant", "start": 0, "end": len(c_ids)}]
        assert row["rewards"]["advantage"] == pytest.approx(sample["advantage"], abs=1e-6)
        assert row["extras"]["logged_advantage"] == pytest.approx(
            [sample["advantage"]] * len(c_ids), abs=1e-6
        )
        np.testing.assert_allclose(row["logprobs"], sample["trainer_logprobs"][-len(c_ids) :], rtol=1e-6)
        np.testing.assert_allclose(row["entropies"], sample["entropy"][-len(c_ids) :], rtol=1e-6)
        np.testing.assert_allclose(
            row["extras"]["inference_logprobs"], sample["inference_logprobs"], rtol=1e-6
        )
        assert {"mismatch_kl", "importance_ratio"} <= row["extras"].keys()
        assert "is_masked" not in row["extras"]  # all None: not computed in this run
        assert row["meta"]["env_name"] == "math" and row["meta"]["rank"] in (0, 1)
    groups = {}
    for row, (s, i) in zip(rows, order, strict=True):
        groups.setdefault(row["group_id"], set()).add((s, i // 4))
    assert all(len(v) == 1 for v in groups.values()) and len(groups) == 4
    out = estimate_cli(db, "prime", tmp_path / "a.parquet", "--channel", "advantage")
    per_rollout = out.groupby("rollout_id")["advantage"].first()
    # the same rollouts with their (unexported) rewards, as a native run: GRPO agrees, the shift cancels
    native = [
        {
            "prompt": row["prompt"],
            "response": row["response"],
            "step": row["step"],
            "token_ids": row["token_ids"],
            "rewards": {"task": steps[s][i]["reward"]},
        }
        for row, (s, i) in zip(rows, order, strict=True)
    ]
    import_cli(write_jsonl(tmp_path / "native.jsonl", native), db, "native")
    expected = estimate_cli(db, "native", tmp_path / "b.parquet").groupby("rollout_id")["advantage"].first()
    np.testing.assert_allclose(per_rollout.to_numpy(), expected.to_numpy(), atol=2e-5)
    assert per_rollout.abs().sum() > 1


# --- RL Logging Board -----------------------------------------------------------------------------


def byte_level_bpe(folder: Path):
    """A tiny byte-level BPE (GPT-2 style) trained here, offline, saved as a Hugging Face folder."""
    from tokenizers import Tokenizer as RawTokenizer  # noqa: PLC0415 - only here
    from tokenizers import decoders, models, pre_tokenizers, trainers  # noqa: PLC0415 - only here
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 - heavy, only here

    raw = RawTokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=290,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<PAD>", "<EOD>"],
    )
    raw.train_from_iterator(["the cat sat", "café au lait", "中文 中", "hello world"] * 3, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<PAD>", eos_token="<EOD>")
    hf.save_pretrained(folder)
    return hf


BOARD_TEXTS = [
    ("请续写: 上相生坤位", "中文 café 😀<EOD>", 1.0),
    ("the cat", "sat é 中<EOD>", 0.0),
    ("the cat", "😀😀 hello<EOD>", 0.5),
    ("请续写: 上相生坤位", "中 world<EOD>", 0.25),
]


def write_board_files(folder: Path, hf) -> list[dict]:
    """RL Logging Board `.jsonl` files, one per data-parallel rank, as its README (section 2.1) asks.

    Source: HarderThenHarder/RLLoggingBoard @ cf56d5d97b293eddc75e6474e6607c9ccafc7fd5, README.md (the
    table of keys and the example line: `response_tokens` from `tokenizer.convert_ids_to_tokens()`, one more
    than the per-token lists when a `<PAD>` trails; `token_rewards` = KL penalty plus the reward on the last
    token) and rl_logging_board.py `load_log_file` (every `*.jsonl` of the folder; `int(data['step'])`).
    """
    rng = random.Random(3)
    lines = []
    for k, (prompt, response, reward) in enumerate(BOARD_TEXTS):
        ids = hf(response, add_special_tokens=False)["input_ids"]
        n = len(ids)
        logprobs = [-rng.random() for _ in range(n)]
        ref = [lp - 0.01 * rng.random() for lp in logprobs]
        kl = [-0.05 * (a - b) for a, b in zip(logprobs, ref, strict=True)]
        lines.append(
            {
                "prompt": "<PAD>" + prompt,
                "response": response + "<PAD>",
                "response_tokens": hf.convert_ids_to_tokens(ids) + ["<PAD>"],
                "logprobs": logprobs,
                "ref_logprobs": ref,
                "values": [rng.uniform(-1, 1) for _ in range(n)],
                "token_rewards": kl[:-1] + [kl[-1] + reward],
                "reward": reward,
                "step": 4 + k // 2,
                "ref_response": "参考",
                "ref_reward": 0.0,
            }
        )
    folder.mkdir()
    for rank in (0, 1):
        with open(folder / f"rank{rank}.jsonl", "w", encoding="utf8") as f:
            for line in lines[rank::2]:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return lines


@pytest.mark.slow
def test_rl_logging_board_with_a_byte_level_tokenizer(tmp_path):
    model = tmp_path / "bpe"
    hf = byte_level_bpe(model)
    lines = write_board_files(tmp_path / "board", hf)
    db = tmp_path / "s.duckdb"
    done = import_cli(tmp_path / "board", db, "board", "--model", model)
    assert "detected format: rl-logging-board" in done.stderr and "imported 4 rollouts" in done.stdout
    with read_store(db) as store:
        (run,) = store.list_runs()
        assert (run["rollouts"], run["steps"], run["channels"]) == (4, 2, ["task"])
        rows = [store.rollout("board", rid) for rid in range(4)]
    for row, line in zip(rows, [lines[0], lines[2], lines[1], lines[3]], strict=True):
        n = len(line["logprobs"])
        assert row["token_ids"] == hf.convert_tokens_to_ids(line["response_tokens"][:n])
        assert row["meta"]["response_tokens_cut"] == ["<PAD>"] and row["meta"]["ref_response"] == "参考"
        assert "\ufffd" not in "".join(row["tokens"])
        assert (CONTINUATION in row["tokens"]) == ("😀" in line["response"])  # 😀 is 4 byte tokens here
        text = "".join(t for t in row["tokens"] if t != CONTINUATION)
        assert text == line["response"].removesuffix("<PAD>")
        np.testing.assert_allclose(row["ref_logprobs"], line["ref_logprobs"], rtol=1e-6)
        np.testing.assert_allclose(row["values"], line["values"], rtol=1e-6)
        np.testing.assert_allclose(row["extras"]["logged_token_rewards"], line["token_rewards"], rtol=1e-5)
        assert row["rewards"] == {"task": line["reward"]} and row["step"] == line["step"]
    out = estimate_cli(db, "board", tmp_path / "a.parquet")
    assert len(out) == sum(len(line["logprobs"]) for line in lines)
    assert "\ufffd" not in "".join(out["token"])


def test_rl_logging_board_without_a_model_keeps_the_token_strings(tmp_path):
    hf = byte_level_bpe(tmp_path / "bpe")
    lines = write_board_files(tmp_path / "board", hf)
    db = tmp_path / "s.duckdb"
    import_cli(tmp_path / "board" / "rank0.jsonl", db, "b", "--format", "rl-logging-board")
    with read_store(db) as store:
        row = store.rollout("b", 0)
    assert row["tokens"] == lines[0]["response_tokens"][:-1]
    assert row["prompt"] == lines[0]["prompt"] and row["response"] == lines[0]["response"]


def test_rl_logging_board_length_mismatch_is_named(tmp_path):
    line = {
        "prompt": "p",
        "response": "ab",
        "response_tokens": ["a", "b"],
        "logprobs": [-1.0, -2.0],
        "values": [0.1],
        "reward": 1.0,
        "step": 1,
    }
    path = write_jsonl(tmp_path / "x.jsonl", [line])
    with Store(tmp_path / "s.duckdb") as store:
        with pytest.raises(
            InputError,
            match=r"x.jsonl: line 1: per-token fields disagree in length "
            r"\(logprobs 2, values 1\)",
        ):
            import_path(store, path, "b")


# --- byte-level labels ----------------------------------------------------------------------------


def test_byte_level_labels_are_readable(tmp_path):
    hf = byte_level_bpe(tmp_path / "bpe")
    text = "é 😀 中文 café"
    ids = hf(text, add_special_tokens=False)["input_ids"]
    assert any("\ufffd" in hf.decode([i]) for i in ids)  # the tokenizer does split characters
    labels = token_labels(hf, ids)
    assert "\ufffd" not in "".join(labels) and len(labels) == len(ids)
    assert "".join(t for t in labels if t != CONTINUATION) == text
    assert labels[labels.index("😀") - 3 : labels.index("😀")] == [CONTINUATION] * 3  # 4 bytes, 4 tokens
    # a response cut inside 😀: its bytes stay visible as hex on the tokens holding them
    first_byte = ids.index(hf.convert_tokens_to_ids("ð"))
    assert token_labels(hf, ids[: first_byte + 2])[-2:] == ["<0xF0>", "<0x9F>"]
    # special tokens keep their text; the Tokenizer used by imports gives the same labels
    assert token_labels(hf, [*ids, hf.eos_token_id])[-1] == "<EOD>"
    assert Tokenizer(tmp_path / "bpe").display(ids) == labels
    assert token_labels(hf, [-3, len(hf) + 5]) == ["<-3>", f"<{len(hf) + 5}>"]  # not in the vocabulary


def test_byte_fallback_pieces_are_bytes():
    """SentencePiece byte fallback writes bytes as `<0xE4>` pieces (Llama 2 style vocabularies)."""
    from tokenizers import Tokenizer as RawTokenizer  # noqa: PLC0415 - only here
    from tokenizers import models  # noqa: PLC0415 - only here
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 - heavy, only here

    vocab = {"<unk>": 0, "▁a": 1, "<0xE4>": 2, "<0xB8>": 3, "<0xAD>": 4}
    hf = PreTrainedTokenizerFast(
        tokenizer_object=RawTokenizer(models.WordLevel(vocab, unk_token="<unk>")), unk_token="<unk>"
    )
    assert token_labels(hf, [2, 3, 4, 2]) == [CONTINUATION, CONTINUATION, "中", "<0xE4>"]
    assert token_labels(hf, [3, 1]) == ["<0xB8>", hf.decode([1])]  # a stray continuation byte


# --- formats and mismatches -----------------------------------------------------------------------


def test_format_list_is_the_registry(tmp_path):
    assert FORMATS == formats.names()
    assert {"nemo-rl", "prime-rl", "rl-logging-board"} <= set(FORMATS)
    assert (
        detect_format(
            write_jsonl(
                tmp_path / "a.jsonl", [{"schema_version": 1, "trainer_logprobs": [], "loss_mask": []}]
            )
        )
        == "prime-rl"
    )


@pytest.mark.slow
def test_a_format_that_does_not_fit_says_what_the_file_is(tmp_path, demo_tokenizer):
    db = tmp_path / "s.duckdb"
    trl = tmp_path / "completions_00000.parquet"
    pd.DataFrame(
        {"step": [0], "prompt": ["p"], "completion": ["c"], "r": [1.0], "advantage": [0.0]}
    ).to_parquet(trl)
    nemo = tmp_path / "nemo"
    nemo.mkdir()
    write_nemo_rl_step(nemo / "train_data_step1.jsonl", demo_tokenizer, 1, ["1+1"], group=2, seed=0)
    for path, fmt, message in [
        (
            trl,
            "verl",
            "completions_00000.parquet: this is a Parquet file (TRL completions log); "
            "--format verl reads JSONL",
        ),
        (
            nemo,
            "trl",
            "nemo: this directory has no files that --format trl reads (Parquet TRL "
            "completion logs (completions_*.parquet)); it holds a NeMo-RL train_data dump: "
            "use --format nemo-rl",
        ),
    ]:
        done = run_cli_here("import", path, "--db", db, "--run", "x", "--quiet", "--format", fmt)
        assert done.returncode == 2, done.stdout
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (fmt, lines)
    assert not db.exists()  # nothing written, not even an empty store (`runs` on it: no such store, exit 2)
    assert run_cli_here("runs", "--db", db, "--json").returncode == 2 and not db.exists()
    with Store(db) as store:
        for path, fmt, message in [
            (
                nemo / "train_data_step1.jsonl",
                "trl",
                r"this is a JSONL file \(NeMo-RL train_data dump\); --format trl reads Parquet",
            ),
            (
                nemo / "train_data_step1.jsonl",
                "prime-rl",
                r"this is a JSONL file \(NeMo-RL train_data dump\); --format prime-rl reads JSONL "
                r"prime-rl token exports \(token_exports/step_<N>/rank_<R>.jsonl\); use --format nemo-rl",
            ),
            (nemo, "native", "nemo: this is a directory; --format native reads one JSONL or Parquet file"),
        ]:
            with pytest.raises(InputError, match=message):
                import_path(store, path, "x", fmt=fmt)
        assert store.list_runs() == []


def test_mismatch_checks_write_nothing_into_an_existing_store(tmp_path, store):
    import_path(
        store,
        write_jsonl(tmp_path / "ok.jsonl", [{"prompt": "p", "response": "a", "rewards": {"task": 1.0}}]),
        "keep",
    )
    before = snapshot(store)
    (tmp_path / "bin.jsonl").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError, match="bin.jsonl: this is a binary file; --format nemo-rl reads JSONL"):
        import_path(store, tmp_path / "bin.jsonl", "keep", fmt="nemo-rl")
    (tmp_path / "doc.json").write_text(json.dumps({"prompt": "p"}, indent=2))
    with pytest.raises(
        InputError,
        match=r"doc.json: this is a JSON file \(one document, not one record per "
        r"line\); --format verl reads JSONL",
    ):
        import_path(store, tmp_path / "doc.json", "keep", fmt="verl")
    assert snapshot(store) == before


def test_an_empty_generation_imports_as_an_empty_response(tmp_path, store):
    """A NeMo-RL sample whose assistant message has no tokens: its loss mask keeps nothing."""
    line = {
        "content": [["Q: 1+1\nA:", "", "Environment: wrong"]],
        "rewards": [0.0],
        "input_lengths": [4],
        "token_ids": [[5, 6, 7, 8, 0, 0, 0, 0]],
        "token_loss_mask": [[0] * 8],
        "sample_loss_mask": [1.0],
        "advantages": [[0.0] * 8],
        "generation_logprobs": [[0.0] * 8],
        "prev_logprobs": [[0.0, -1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0]],
        "idx": 0,
    }
    import_path(store, write_jsonl(tmp_path / "train_data_step2.jsonl", [line]), "n")
    row = store.rollout("n", 0)
    assert row["token_ids"] == [] and row["prompt_ids"] == [5, 6, 7, 8] and row["step"] == 2


def test_an_unknown_directory_says_directory(tmp_path, store):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="a directory with no files of a known format"):
        import_path(store, tmp_path, "x")
