"""Whose credit moved a token, on a stored run: `attribute(handle, run, rollout, pos)`.

For token `pos` of a rollout of step k, every token s of its group (or of the whole step) gets its
first-order share lr · c_s · ⟨∇log π_s, ∇log π_t⟩ of the change the update on step k's batch made to
log π(y_t) (`backend.models.attribution`), with the gradients of the checkpoint that sampled step k. What the
trainer did is read from the run's kept config (`trainer_setup`):

- c_s = w_s · (A_s − dKL_s): A_s the credit (the trainer's own advantage, as trained, by default; any
  estimator on request), w_s the weight of the token's term in the loss (TRL's `loss_type`, counted over
  the step's whole batch, so a group's shares are its part of the step's update), dKL_s the slope of the KL
  term in the loss (TRL's β > 0 with reference logprobs), 0 on untrained tokens;
- lr: the run's `learning_rate` (the schedule's first value), else 1 (shares per unit learning rate).

The approximation: one plain SGD step from the sampling checkpoint. Adam's per-parameter scaling and its
momentum, gradient clipping, several optimizer steps per batch and the schedule's decay are not modelled
(the run keeps no optimizer state); docs/estimators.md measures what that costs on the bundled run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from backend.core import run_config
from backend.core.errors import InputError
from backend.credit import as_trained
from backend.credit.estimates import estimate_rollouts
from backend.credit.token_rows import estimate_config
from backend.models import attribution
from backend.models.attribution import load_policy
from backend.models.engine import start_token_id
from backend.models.transformers_engine import cpu_threads
from backend.store import StoreHandle, checkpoints
from backend.store.model_credit_queries import rollout_tokens

SCOPES = ("group", "step")
DEFAULT_LOSS_TYPE = "dapo"


@dataclass(frozen=True)
class TrainerSetup:
    """What one update did, as far as the run's config says; `notes` say where each number came from."""

    lr: float
    loss_type: str
    max_completion_length: int | None
    kl_beta: float
    kl_bias_correction: bool
    temperature: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {
            "lr": self.lr,
            "loss_type": self.loss_type,
            "max_completion_length": self.max_completion_length,
            "kl_beta": self.kl_beta,
            "kl_bias_correction": self.kl_bias_correction,
            "temperature": self.temperature,
            "notes": list(self.notes),
        }


def trainer_setup(config: dict, lr: float | None = None) -> TrainerSetup:
    """The update's settings from a run's flattened config (TRL's GRPOConfig keys); `lr` overrides."""
    notes = []
    if lr is None and isinstance(config.get("learning_rate"), (int, float)):
        lr = float(config["learning_rate"])
        notes.append(f"lr {lr:g}: the run's learning_rate (the schedule's first value; decay ignored)")
    elif lr is None:
        lr = 1.0
        notes.append("lr 1: the run states no learning_rate, so shares are per unit learning rate")
    else:
        notes.append(f"lr {lr:g}: given")
    loss_type = config.get("loss_type")
    if loss_type not in attribution.LOSS_TYPES:
        why = "states none" if loss_type is None else f"has loss_type {loss_type!r}, not one modelled"
        notes.append(
            f"loss: the run {why}; each token weighs 1 / (trained tokens of the step), as TRL's dapo"
        )
        loss_type = DEFAULT_LOSS_TYPE
    else:
        notes.append(f"loss_type {loss_type!r}: the run's")
    beta = float(config.get("beta") or 0.0)
    if beta:
        notes.append(f"KL in the loss, β = {beta:g}: its slope is part of each token's coefficient")
    max_len = config.get("max_completion_length")
    return TrainerSetup(
        lr=float(lr),
        loss_type=str(loss_type),
        max_completion_length=int(max_len) if isinstance(max_len, (int, float)) else None,
        kl_beta=beta,
        kl_bias_correction=bool(config.get("use_bias_correction_kl", True)),
        temperature=float(config.get("temperature") or 1.0),
        notes=tuple(notes),
    )


@dataclass
class Attribution:
    """One token's attribution: `shares` has one row per token of the scope (rollout_id, pos, token,
    trained, advantage, coefficient, inner, share); `predicted` = Σ share, the first-order Δ log π of the
    target."""

    run: str
    rollout: int
    pos: int
    step: int
    token: str
    scope: str
    estimator: str
    model: dict
    setup: TrainerSetup
    shares: pd.DataFrame
    predicted: float

    def to_json(self) -> dict:
        return {
            "run": self.run,
            "rollout": self.rollout,
            "pos": self.pos,
            "step": self.step,
            "token": self.token,
            "scope": self.scope,
            "estimator": self.estimator,
            "model": self.model,
            "setup": self.setup.as_dict(),
            "predicted_delta": self.predicted,
            "shares": self.shares.to_dict(orient="records"),
        }


@dataclass
class StepInputs:
    """What one step's update is built from, for the rows shown (a group, or the whole step): the policy that
    sampled it, the token rows, and per token (flat, row-major) its credit, coefficient c_s and mask."""

    step: int
    estimator: str
    choice: checkpoints.ModelChoice
    setup: TrainerSetup
    policy: torch.nn.Module
    rows: attribution.TokenRows
    ids: list[int]
    lengths: list[int]
    tokens: list[list[str]]
    advantage: torch.Tensor
    coefficients: torch.Tensor
    trained: torch.Tensor

    def frame(self) -> pd.DataFrame:
        """rollout_id, pos, token, trained, advantage, coefficient: one row per token shown."""
        return pd.DataFrame(
            {
                "rollout_id": np.repeat(self.ids, self.lengths),
                "pos": np.concatenate([np.arange(L) for L in self.lengths]),
                "token": [t for row in self.tokens for t in row],
                "trained": self.trained.numpy().astype(bool),
                "advantage": self.advantage.numpy(),
                "coefficient": self.coefficients.numpy(),
            }
        )


def step_inputs(
    handle: StoreHandle,
    run: str,
    step: int,
    *,
    group: int | None = None,
    estimator: str | None = None,
    model: str | None = None,
    device: str | None = None,
    lr: float | None = None,
) -> StepInputs:
    """The inputs of step `step`'s update for the rollouts of `group` (None: every rollout of the step), the
    loss weights counted over the whole step (see the module docstring)."""
    estimator = as_trained.chosen_estimator(handle, run, estimator)
    name, config = estimate_config(handle, run, estimator, {})
    with handle.read() as store:
        if int(step) not in set(store.rollout_keys(run)["step"]):
            raise InputError(f"run {run!r} has no step {step}")
        choice = checkpoints.choices_for(store, run, [int(step)], model)[int(step)]
        setup = trainer_setup(run_config.flatten(store.run_info(run)["meta"].get(run_config.CONFIG_KEY)), lr)
        batch = store.load_batch(run, steps=[int(step)], fields=("ref_logprobs", "tokens"))
        texts = rollout_tokens(store, run, [int(r) for r in batch.rollout_ids]).set_index("rollout_id")
    all_ids = [int(r) for r in batch.rollout_ids]
    shown = [i for i in range(len(all_ids)) if group is None or int(batch.group_ids[i]) == int(group)]
    ids, lengths = [all_ids[i] for i in shown], [int(batch.lengths[i]) for i in shown]
    credit = estimate_rollouts(handle, run, name, config, ids, save=False).advantages
    policy = load_policy(choice.model_dir, device)
    responses = [texts.loc[r, "token_ids"] for r in ids]
    rows = attribution.token_rows(_contexts(texts, ids, policy), responses).to(
        next(policy.parameters()).device
    )
    trained_mask = batch.trained_mask
    weights = attribution.loss_weights(
        lengths,
        setup.loss_type,
        batch_rows=len(all_ids),
        batch_tokens=int(trained_mask.sum()),
        max_completion_length=setup.max_completion_length,
    )
    advantage = torch.from_numpy(np.concatenate([np.asarray(credit[r], dtype=np.float32) for r in ids]))
    trained = torch.cat([trained_mask[i, : lengths[k]] for k, i in enumerate(shown)]).float()
    with cpu_threads(1 if rows.input_ids.device.type == "cpu" else None), torch.no_grad():
        own = attribution.token_logprobs(
            policy, attribution.parameters(policy), rows, setup.temperature
        ).cpu()
    slope = torch.zeros_like(own)
    if setup.kl_beta and batch.ref_logprobs is not None:
        ref = torch.cat([batch.ref_logprobs[i, : lengths[k]] for k, i in enumerate(shown)])
        slope = attribution.kl_slope(own, ref, setup.kl_beta, setup.kl_bias_correction)
    tokens = [
        list(batch.tokens[i]) if batch.tokens is not None else [""] * lengths[k] for k, i in enumerate(shown)
    ]
    return StepInputs(
        step=int(step),
        estimator=name,
        choice=choice,
        setup=setup,
        policy=policy,
        rows=rows,
        ids=ids,
        lengths=lengths,
        tokens=tokens,
        advantage=advantage,
        coefficients=weights * (advantage - slope) * trained,
        trained=trained,
    )


def attribute(
    handle: StoreHandle,
    run: str,
    rollout: int,
    pos: int,
    *,
    scope: str = "group",
    estimator: str | None = None,
    model: str | None = None,
    device: str | None = None,
    lr: float | None = None,
) -> Attribution:
    """Each token of the rollout's group (scope "group") or step ("step") with its first-order share of the
    change of token `pos` of `rollout` (see the module docstring). `model`: a folder used on purpose instead
    of the step's checkpoint (marked off-policy)."""
    if scope not in SCOPES:
        raise InputError(f"--scope {scope!r}: expected one of {', '.join(SCOPES)}")
    with handle.read() as store:
        keys = store.rollout_keys(run).set_index("rollout_id")
    if int(rollout) not in keys.index:
        raise InputError(f"run {run!r} has no rollout {rollout}")
    step, group = int(keys.loc[int(rollout), "step"]), int(keys.loc[int(rollout), "group_id"])
    inputs = step_inputs(
        handle,
        run,
        step,
        group=group if scope == "group" else None,
        estimator=estimator,
        model=model,
        device=device,
        lr=lr,
    )
    row = inputs.ids.index(int(rollout))
    if not 0 <= int(pos) < inputs.lengths[row]:
        raise InputError(
            f"run {run!r}: rollout {rollout} has {inputs.lengths[row]} tokens; --pos {pos} is outside"
        )
    target = sum(inputs.lengths[:row]) + int(pos)
    with cpu_threads(1 if inputs.rows.input_ids.device.type == "cpu" else None):
        shares, inner = attribution.token_shares(
            inputs.policy,
            inputs.rows,
            target,
            inputs.coefficients,
            inputs.setup.lr,
            temperature=inputs.setup.temperature,
        )
    frame = inputs.frame().assign(inner=inner.cpu().numpy(), share=shares.cpu().numpy())
    return Attribution(
        run=run,
        rollout=int(rollout),
        pos=int(pos),
        step=step,
        token=str(inputs.tokens[row][int(pos)]),
        scope=scope,
        estimator=inputs.estimator,
        model={**inputs.choice.to_json(), "label": inputs.choice.label},
        setup=inputs.setup,
        shares=frame,
        predicted=float(shares.sum()),
    )


def predicted_step(
    handle: StoreHandle,
    run: str,
    step: int,
    *,
    estimator: str | None = None,
    model: str | None = None,
    device: str | None = None,
    lr: float | None = None,
) -> pd.DataFrame:
    """The first-order Δ log π of every token of step `step` after the step's update (one plain SGD step, as
    `attribute`): rollout_id, pos, token, trained, advantage, coefficient, predicted. Beside a recorded
    `logprobs_after − logprobs` it says how much of the realized change the credit explains."""
    inputs = step_inputs(handle, run, step, estimator=estimator, model=model, device=device, lr=lr)
    with cpu_threads(1 if inputs.rows.input_ids.device.type == "cpu" else None):
        predicted = attribution.predicted_change(
            inputs.policy,
            inputs.rows,
            inputs.coefficients,
            inputs.setup.lr,
            temperature=inputs.setup.temperature,
        )
    return inputs.frame().assign(predicted=predicted.cpu().numpy())


def _contexts(texts: pd.DataFrame, ids: list[int], policy) -> list[list[int]]:
    """Each rollout's prompt ids (an empty prompt: the model's start token, as the engines do)."""
    config = policy.config
    start = start_token_id(
        getattr(config, "bos_token_id", None), {getattr(config, "eos_token_id", None) or 0}
    )
    out = []
    for r in ids:
        prompt = texts.loc[r, "prompt_ids"]
        if prompt is None or not isinstance(prompt, (list, np.ndarray)):
            raise InputError(
                f"rollout {r}: no prompt_ids stored; attribution needs the token ids the policy saw "
                "(import the run with them, or with --model so the prompt is tokenized)"
            )
        out.append([int(t) for t in prompt] or [start])
    return out
