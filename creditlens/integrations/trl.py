"""Record a TRL `GRPOTrainer` run for Credit Lens while it trains: one call in the training script.

    from creditlens.integrations import trl as lens_trl
    trainer = GRPOTrainer(...)
    lens_trl.record(trainer, "runs/my_run")          # entropies=True adds per-token entropies
    trainer.train()

and, in another shell, `creditlens import --follow runs/my_run --run my_run` (docs/trl.md).

The hook: `record` wraps the trainer's `_generate_and_score_completions` on the instance (TRL 1.16,
`trl/trainer/grpo_trainer.py`). That method samples a generation batch, scores it and computes the
advantages; its output dict holds prompt_ids (left-padded) and prompt_mask, completion_ids (right-padded)
and completion_mask, advantages (B,), old_per_token_logps (None when they equal the current policy's),
ref_per_token_logps (when beta > 0) and tool_mask (multi-turn). The rewards per function are appended to
`trainer._logs["rewards"][name]` by the same call, gathered over processes. After each training-mode call
the recorder writes one native Parquet step file (`backend.ingest.native_writer`, atomic):

- prompt / response: the token ids decoded (prompt with special tokens, as the model saw it; response
  without, as TRL logs it); prompt_ids, token_ids: the unpadded ids; tokens: one label per response token;
- logprobs: the sampled tokens' logprobs under the weights that sampled them, from one forward pass
  without gradients (the recorder's main cost, docs/trl.md) with the positions `generate` used (TRL's own
  pass shifts left-padded rows: see `Recorder._score`), at the trainer's precision and temperature;
  ref_logprobs (beta > 0): `trainer.ref_model` scored the same way (TRL's ref_per_token_logps for PEFT runs,
  whose reference is the adapter switched off); entropies (asked for): from the policy's pass;
- rewards: each reward function's score as a channel named like TRL's log columns (NaN: no score);
- logged_advantage: the trainer's advantage (what the `logged` estimator reads);
- step: the training step the batch trains (TRL's numbering: `completions_{step:05d}.parquet`, its logs);
  group: the prompt's group of num_generations rows;
- meta: policy_step (optimizer steps the sampling weights had taken), checkpoint (the folder holding those
  weights, relative to the recording's folder: the initial model folder or
  `output_dir/checkpoint-<policy_step>` when the trainer saved it), reward_weights, scale_rewards and
  advantage_epsilon (TRL's 1e-4: the advantage's normalization, what `creditlens logged-gap` recomputes
  with), temperature; truncated (cut at max_completion_length, as TRL's `completions/clipped_ratio` counts
  it); loss_masked for rows TRL masked (mask_truncated_completions);
  loss_mask per token for multi-turn tool tokens (0: not trained, TRL's tool_mask) and the turns it implies;
- logprobs_after (`after=True`, the default): the same tokens scored again, the same way, once the optimizer
  step(s) that consume the batch are done (TRL trains a generation batch for `steps_per_generation *
  num_iterations` micro-steps): realized Δ log π = logprobs_after − logprobs. The step file is written then,
  one optimizer step later than without it. meta.after_policy_step says after how many optimizer steps it
  was scored and meta.checkpoint_after names `output_dir/checkpoint-<after_policy_step>` when the trainer
  saves one at that step (what `creditlens landed` scores with, the other route to the same numbers).

`record` also writes the trainer's `args` into the folder (`trainer_config.json`); the import keeps them with
the run (`creditlens compare-runs` shows the settings two runs differ by).
"""

from __future__ import annotations

import inspect
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

try:
    from transformers import TrainerCallback
    from trl import GRPOTrainer
    from trl.models.utils import disable_gradient_checkpointing
except ImportError as exc:  # say what to install, not only which module is missing
    raise ImportError(
        f"creditlens.integrations.trl records TRL trainers and needs TRL 1.16 "
        f"(pip install trl==1.16.0): {exc}"
    ) from exc

from backend.core import run_config
from backend.core.turns import spans_from_mask
from backend.ingest.native_writer import StepRecords, write_atomic
from backend.ingest.step_files import step_file_name
from backend.ingest.tokenize import token_labels
from backend.ingest.trl import TRL_EPSILON

__all__ = ["Recorder", "record"]

LOGITS_PER_CHUNK = 1 << 28
"""Rows are scored in chunks of at most this many logits (1 GiB in float32, for the logits and again for
their log-softmax): the batch size, or fewer rows for long completions over large vocabularies (one row of
1024 tokens over a 151,936-token vocabulary is 156 M logits)."""
# Multimodal inputs of TRL's output dict that its logprob function takes as keyword arguments.
FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


@dataclass
class Recorder:
    """The recording of one trainer: what it wrote and what it cost. `close()` unhooks it."""

    trainer: GRPOTrainer
    directory: Path
    entropies: bool
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time spent in the recorder (the extra forward pass, decoding, writing), all steps together."""
    cpu_seconds: float = 0.0
    """The process's CPU time (all threads) spent in the recorder: less moved by other load than `seconds`."""
    unscorable: int = 0
    """Rows left out because no reward function scored them (TRL gives them advantage 0)."""
    after: bool = True
    """Score each batch again once its update is done (`logprobs_after`)."""
    after_seconds: float = 0.0
    """Wall time of those extra forward passes alone (part of `seconds`)."""
    after_cpu_seconds: float = 0.0
    """Their CPU time (part of `cpu_seconds`)."""
    _original: object = None
    _callback: object = None
    _pending: list = field(default_factory=list)
    _groups_done: int = 0
    _parts: dict = field(default_factory=dict)

    def close(self) -> None:
        """Stop recording: the trainer's own method is put back."""
        if self._original is not None:
            self.trainer.__dict__.pop("_generate_and_score_completions", None)
            self._original = None
        if self._callback is not None:
            self.trainer.remove_callback(self._callback)
            self._callback = None

    def _hooked(self, inputs):
        output = self._original(inputs)
        if self.trainer.model.training:  # evaluation batches are not training steps
            start, cpu = time.perf_counter(), time.process_time()
            self._write(output)
            self.seconds += time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu
        return output

    def _write(self, output: dict) -> None:
        trainer = self.trainer
        rank = trainer.accelerator.process_index
        records, n_groups, scoring = self._records(output, rank)
        self._groups_done += n_groups  # the next batch's groups count on from these, written or pending
        if not self.after:
            self._save(records)
            return
        # TRL trains this batch for the next `generate_every` micro-steps (`_prepare_inputs`); `_step` counts
        # the micro-steps done so far.
        generate_every = trainer.args.steps_per_generation * trainer.num_iterations
        self._pending.append((trainer._step + generate_every, records, output, scoring))

    def _land(self, saving: bool, done: bool = False) -> None:
        """Score the pending batches whose update is done (all of them when `done`: the training ended)
        under the current weights and write their step files. `saving`: the trainer saves
        `checkpoint-<global_step>` at this step."""
        trainer = self.trainer
        keep = []
        for due, records, output, (ids, mask, width, lengths) in self._pending:
            if not done and trainer._step < due:
                keep.append((due, records, output, (ids, mask, width, lengths)))
                continue
            start, cpu = time.perf_counter(), time.process_time()
            after, _ = self._score(trainer.model, output, ids, mask, width, False)
            a = after.detach().float().cpu().numpy()
            records.per_token["logprobs_after"] = [a[i, : lengths[i]] for i in range(len(lengths))]
            policy_step = int(trainer.state.global_step)
            folder = Path(trainer.args.output_dir) / f"checkpoint-{policy_step}"
            named = _relative(folder, self.directory) if saving or folder.is_dir() else None
            for meta in records.meta:
                meta.update(after_policy_step=policy_step, checkpoint_after=named)
            self._save(records)
            elapsed = time.perf_counter() - start
            self.after_seconds += elapsed
            self.seconds += elapsed
            self.after_cpu_seconds += time.process_time() - cpu
            self.cpu_seconds += time.process_time() - cpu
        self._pending = keep

    def _save(self, records: StepRecords) -> None:
        trainer = self.trainer
        rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
        table, dropped = records.table(str(self.directory))
        self.unscorable += dropped
        if not table.num_rows:  # nothing scored: no file (an import refuses an empty one)
            return
        part = self._parts.get(records.step, 0)
        self._parts[records.step] = part + 1
        path = self.directory / step_file_name(records.step, part, rank if world > 1 else None)
        if path.exists():
            raise FileExistsError(f"{path}: a step file of this name exists; record into a new directory")
        write_atomic(table, path)
        self.files.append(path)

    def _score(
        self, model, output: dict, ids: torch.Tensor, mask: torch.Tensor, width: int, entropies: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logprobs (B, width) of the last `width` tokens of `ids` (B, P + width) under `model`, and their
        entropies (B, width) when asked: the distribution the tokens were sampled from. Position ids count
        real tokens only, as `generate` counts them for left-padded prompts; TRL's own logprob forward passes
        none, which shifts a padded row's positions (no change for rotary models, a large one for learned
        absolute positions such as GPT-2's). Multimodal batches go through TRL's function."""
        trainer = self.trainer
        temperature = float(trainer.temperature)
        chunk = trainer.args.per_device_train_batch_size
        if any(k in output for k in FORWARD_KEYS):
            kwargs = {k: output[k] for k in FORWARD_KEYS if k in output}
            checkpointing = trainer.args.gradient_checkpointing_kwargs
            with torch.no_grad(), disable_gradient_checkpointing(model, checkpointing):
                logps, ent, _ = trainer._get_per_token_logps_and_entropies(
                    model, ids, mask, width, batch_size=chunk, compute_entropy=entropies, **kwargs
                )
            return logps, ent
        positions = (mask.cumsum(1) - 1).clamp(min=0)  # (B, P + width)
        unwrapped = trainer.accelerator.unwrap_model(model)
        vocab = int(getattr(unwrapped.config, "vocab_size", 0) or 0)
        chunk = max(1, min(chunk, LOGITS_PER_CHUNK // max(1, width * vocab)))  # bounds (b, width, V)
        forward = inspect.signature(unwrapped.forward).parameters
        keep = {"logits_to_keep": width + 1} if "logits_to_keep" in forward else {}  # none for the prompt
        all_logps, all_entropies = [], []
        with torch.no_grad():
            for start in range(0, ids.size(0), chunk):
                rows = slice(start, start + chunk)
                logits = model(
                    input_ids=ids[rows],
                    attention_mask=mask[rows],
                    position_ids=positions[rows],
                    use_cache=False,
                    **keep,
                ).logits[:, -width - 1 : -1]  # (b, width, V)
                logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (b, width, V)
                all_logps.append(logp.gather(-1, ids[rows, -width:, None])[..., 0])  # (b, width)
                if entropies:
                    all_entropies.append(-(logp.exp() * logp).sum(-1))  # (b, width)
        return torch.cat(all_logps), (torch.cat(all_entropies) if entropies else None)

    def _records(self, output: dict, rank: int) -> tuple[StepRecords, int, tuple]:
        trainer = self.trainer
        prompt_ids, prompt_mask = output["prompt_ids"], output["prompt_mask"]  # (B, P)
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]  # (B, C)
        B, C = completion_ids.shape
        lengths = completion_mask.sum(1)  # (B,)
        masked = torch.zeros(B, dtype=torch.bool, device=lengths.device)
        if trainer.mask_truncated_completions:  # TRL zeroes a truncated row's mask: it was cut at C tokens
            masked = lengths == 0
            lengths = torch.where(masked, min(C, trainer.max_completion_length), lengths)
        real = torch.arange(C, device=lengths.device)[None, :] < lengths[:, None]  # (B, C)
        ids = torch.cat([prompt_ids, completion_ids], 1)  # (B, P + C)
        mask = torch.cat([prompt_mask, real.to(prompt_mask.dtype)], 1)  # (B, P + C)
        old, entropies = self._score(trainer.model, output, ids, mask, C, self.entropies)
        ref = output.get("ref_per_token_logps")
        if ref is not None and trainer.ref_model is not None:  # scored like the policy (positions, precision)
            ref, _ = self._score(trainer.ref_model, output, ids, mask, C, False)
        lengths, masked = lengths.cpu().numpy(), masked.cpu().numpy()
        p_mask = prompt_mask.bool().cpu().numpy()
        p_ids = prompt_ids.cpu().numpy()
        c_ids = completion_ids.cpu().numpy()
        prompts = [p_ids[i][p_mask[i]] for i in range(B)]
        responses = [c_ids[i, : lengths[i]] for i in range(B)]

        def rows(t: torch.Tensor | None) -> list[np.ndarray] | None:
            if t is None:
                return None
            a = t.detach().float().cpu().numpy()
            return [a[i, : lengths[i]] for i in range(B)]

        per_token = {"logprobs": rows(old)}
        if ref is not None:
            per_token["ref_logprobs"] = rows(ref)
        if entropies is not None:
            per_token["entropies"] = rows(entropies)
        extras = {}
        loss_mask, turns = _tool_turns(rows(output.get("tool_mask")))
        advantages = output["advantages"].detach().float().cpu()
        if advantages.ndim == 2:  # per-token advantages: kept per token, their mean as the rollout's
            extras["logged_advantage"] = rows(advantages)
            kept = completion_mask.cpu()
            advantages = (advantages * kept).sum(1) / kept.sum(1).clamp(min=1)
        # This call appended the rewards of every process in process order; this process's rows are its slice.
        world = trainer.accelerator.num_processes
        rewards = {}
        for name in trainer.reward_func_names:
            logged = list(trainer._logs["rewards"][name])
            if len(logged) < world * B:
                raise RuntimeError(
                    f"TRL logged {len(logged)} rewards of {name!r} for a batch of {world * B} "
                    "rows (the recorder reads TRL 1.16's GRPOTrainer._logs)"
                )
            rewards[name] = np.asarray(logged[len(logged) - world * B :], np.float64)[
                rank * B : (rank + 1) * B
            ]
        G = trainer.num_generations
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        truncated = _truncated(trainer, c_ids, lengths, masked)
        meta_common = self._meta()
        meta = [
            dict(meta_common, truncated=bool(truncated[i]), **({"loss_masked": True} if masked[i] else {}))
            for i in range(B)
        ]
        records = StepRecords(
            step=int(trainer.state.global_step) + 1,
            prompts=tokenizer.batch_decode(prompts, skip_special_tokens=False),
            responses=tokenizer.batch_decode(responses, skip_special_tokens=True),
            prompt_ids=prompts,
            token_ids=responses,
            tokens=[token_labels(tokenizer, r.tolist()) for r in responses],
            rewards=rewards,
            groups=self._groups_done + (rank * B + np.arange(B)) // G,
            per_token={k: v for k, v in per_token.items() if v is not None},
            extras=extras,
            loss_mask=loss_mask,
            turns=turns,
            logged_advantage=advantages.numpy().astype(np.float64),
            meta=meta,
        )
        return records, (world * B) // G, (ids, mask, C, lengths)

    def _meta(self) -> dict:
        trainer = self.trainer
        policy_step = int(trainer.state.global_step)
        if policy_step == 0:
            folder = Path(str(getattr(trainer.model, "name_or_path", "") or ""))
        else:
            folder = Path(trainer.args.output_dir) / f"checkpoint-{policy_step}"
        checkpoint = _relative(folder, self.directory) if folder.name and folder.is_dir() else None
        return {
            "policy_step": policy_step,
            "checkpoint": checkpoint,
            "reward_weights": [float(w) for w in trainer.reward_weights.tolist()],
            "reward_names": list(trainer.reward_func_names),  # which weight is whose: the recipe's sum
            "scale_rewards": trainer.scale_rewards,
            "advantage_epsilon": TRL_EPSILON,  # with scale_rewards, what `logged-gap` recomputes with
            "temperature": float(trainer.temperature),
        }


class _AfterUpdate(TrainerCallback):
    """Calls the recorder after each optimizer step; runs after the trainer's own flow callback, so
    `control.should_save` already says whether this step's checkpoint will be saved."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def on_step_end(self, args, state, control, **kwargs):
        self.recorder._land(bool(control.should_save))

    def on_train_end(self, args, state, control, **kwargs):
        self.recorder._land(False, done=True)  # a batch cut short by max_steps: as far as it was trained


def record(trainer: GRPOTrainer, path: str | Path, entropies: bool = False, after: bool = True) -> Recorder:
    """Record every training step of `trainer` into the folder `path` (created) as native Parquet step
    files; returns the `Recorder` (its `files`, `seconds`, `close()`).

    `entropies=True` also stores each response token's entropy (the distribution over the vocabulary at
    that position: a forward pass the recorder makes anyway when TRL has no old logprobs, and one more
    softmax over the vocabulary per token; measured in docs/trl.md). `after=True` (the default) scores each
    batch again once the optimizer steps that train it are done and stores `logprobs_after` (one more
    forward pass per batch, measured in docs/trl.md). Raises TypeError for a trainer that
    is not a TRL `GRPOTrainer`, ValueError for a folder that would mix runs."""
    if not isinstance(trainer, GRPOTrainer):
        raise TypeError(f"record() takes a trl.GRPOTrainer, got {type(trainer).__name__}")
    if not isinstance(entropies, bool):
        raise TypeError(f"record(entropies=...) takes True or False, got {entropies!r}")
    if not isinstance(after, bool):
        raise TypeError(f"record(after=...) takes True or False, got {after!r}")
    if "_generate_and_score_completions" in trainer.__dict__:
        raise ValueError("this trainer is already recorded (or its method was replaced); record it once")
    directory = Path(path).expanduser()
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory}: not a folder; record() writes a Parquet file per step into a folder")
    if directory.resolve() == Path(trainer.args.output_dir).expanduser().resolve():
        raise ValueError(
            f"{directory}: this is the trainer's output_dir (checkpoints, TRL's completions/); "
            "record into a folder of its own, e.g. runs/<name>"
        )
    if directory.is_dir() and any(directory.glob("*step_*.parquet")):
        raise ValueError(
            f"{directory}: already holds step files of a recording; record into a new folder "
            "(a resumed run can go to a new folder and be imported into the same run with "
            "`creditlens import --append`)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    _write_config(trainer, directory)
    recorder = Recorder(trainer, directory, entropies, after=after)
    recorder._original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = recorder._hooked
    if after:
        recorder._callback = _AfterUpdate(recorder)
        trainer.add_callback(recorder._callback)
    return recorder


def _write_config(trainer: GRPOTrainer, directory: Path) -> None:
    """The trainer's `args` (`GRPOConfig.to_dict()`: β, learning rate, temperature, num_generations,
    loss_type, scale_rewards, ...) as `trainer_config.json` beside the step files: the import keeps it with
    the run, and `creditlens compare-runs` shows the keys two runs differ by. Written atomically."""
    text = json.dumps(trainer.args.to_dict(), indent=1, sort_keys=True, default=str)
    target = directory / run_config.CONFIG_FILE
    partial = directory / f".{run_config.CONFIG_FILE}.tmp"
    partial.write_text(text + "\n")
    os.replace(partial, target)


def _truncated(trainer: GRPOTrainer, completion_ids: np.ndarray, lengths: np.ndarray, masked: np.ndarray):
    """(B,) bool: the completion was cut at `max_completion_length`, counted as TRL 1.16 counts its
    `completions/clipped_ratio` (`_generate_and_score_completions`): its last token is neither an end token
    nor padding. A row that `mask_truncated_completions` emptied was truncated by that same rule.
    completion_ids: (B, C) right-padded; lengths: (B,) real tokens per row (the end token included)."""
    stops = {int(t) for t in trainer.eos_token_ids} | {trainer._tokenizer.pad_token_id}
    last = completion_ids[np.arange(len(lengths)), np.maximum(lengths - 1, 0)]  # (B,)
    cut = np.array([int(t) not in stops for t in last], dtype=bool) & (lengths > 0)
    return cut | masked


def _relative(folder: Path, directory: Path) -> str:
    """`folder` relative to the recording's folder (POSIX separators), so the recording and its
    checkpoints read the same from a copy elsewhere (the import resolves it against the step file's
    folder); absolute where no relative path exists (another drive)."""
    try:
        return Path(os.path.relpath(folder.resolve(), directory.resolve())).as_posix()
    except ValueError:
        return str(folder.resolve())


def _tool_turns(
    tool_mask: list[np.ndarray] | None,
) -> tuple[list[np.ndarray] | None, list[list[dict]] | None]:
    """TRL's multi-turn `tool_mask` rows (1 on the policy's tokens, 0 on the tools' outputs) as the records'
    `loss_mask` and the turns it implies (trained runs `assistant`, untrained ones `tool`); None without."""
    if tool_mask is None:
        return None, None
    loss_mask = [(m > 0.5).astype(np.int8) for m in tool_mask]
    return loss_mask, [spans_from_mask(m.tolist(), "tool") for m in loss_mask]
