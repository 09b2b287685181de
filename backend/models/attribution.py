"""First-order attribution of a policy-gradient update: whose credit moved a token.

One gradient step on the surrogate objective J(θ) = Σ_s c_s log π_θ(y_s) (c_s: the token's credit times the
trainer's loss weight, see `loss_weights`) moves θ by η·P·∇J, with P the optimizer's preconditioner (1 for
plain SGD, a diagonal for Adam). To first order the log-prob of a token t then changes by

    Δ log π(y_t) ≈ η · ⟨∇log π(y_t), P ∇J⟩ = Σ_s η · c_s · ⟨∇log π(y_s), P ∇log π(y_t)⟩ = Σ_s share_s

(Ren & Sutherland's step-wise decomposition, "Learning Dynamics of LLM Finetuning", ICLR 2025, taken to
single tokens). A share is positive when s's credit pushes t up. Neither sum needs a per-token gradient: one
backward pass gives ∇log π(y_t) (or ∇J), and one forward-mode pass (a Jacobian-vector product) gives the
inner product of that direction with every token's gradient at once.

Token rows are `(context, response)` id lists, right-padded, each row at positions 0..; every function
returns its per-token values flat, row-major over the response tokens (row 0's tokens first).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.func import functional_call, jvp

from backend.core.errors import InputError
from backend.models.loading import check_model_dir
from backend.models.transformers_engine import pick_device


def load_policy(model_dir: str | os.PathLike, device: str | None = None) -> torch.nn.Module:
    """The policy in float32 with eager attention, in eval mode (no dropout), under the safe-loading rules.

    Eager attention because the forward-mode pass needs every op's derivative, and PyTorch's fused
    scaled-dot-product kernels on CPU have none (torch 2.13: NotImplementedError)."""
    from transformers import AutoModelForCausalLM  # noqa: PLC0415 - ~2 s to import: only when used
    from transformers.utils import logging as hf_logging  # noqa: PLC0415 - idem

    hf_logging.disable_progress_bar()  # the commands' output is theirs
    folder = check_model_dir(model_dir)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder.path,
            local_files_only=True,
            trust_remote_code=False,
            use_safetensors=folder.use_safetensors,
            dtype=torch.float32,
            attn_implementation="eager",
        )
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot load model folder {str(model_dir)!r}: {str(exc).splitlines()[0]}") from exc
    return model.to(pick_device(device)).eval()


LOSS_TYPES = ("dapo", "bnpo", "cispo", "vespo", "grpo", "sapo", "dr_grpo")
"""TRL 1.16's loss types whose normalisation `loss_weights` knows."""


@dataclass(frozen=True)
class TokenRows:
    """input_ids: (N, T) int64, right-padded with 0; attention_mask: (N, T) int64;
    targets: (N, T - 1) bool, True where position j + 1 holds a response token (predicted at position j)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor

    @property
    def n_tokens(self) -> int:
        return int(self.targets.sum())

    def to(self, device) -> TokenRows:
        return TokenRows(self.input_ids.to(device), self.attention_mask.to(device), self.targets.to(device))


def token_rows(contexts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> TokenRows:
    """Rows of `context + response` (a context must hold at least one token: the first response token is
    predicted from it)."""
    rows = [list(map(int, c)) + list(map(int, r)) for c, r in zip(contexts, responses, strict=True)]
    T = max(len(r) for r in rows)
    input_ids = torch.zeros((len(rows), T), dtype=torch.long)
    attention_mask = torch.zeros((len(rows), T), dtype=torch.long)
    targets = torch.zeros((len(rows), T - 1), dtype=torch.bool)
    for i, (row, context) in enumerate(zip(rows, contexts, strict=True)):
        if not len(context):
            raise ValueError(f"row {i}: empty context (a response token needs one before it)")
        input_ids[i, : len(row)] = torch.tensor(row)
        attention_mask[i, : len(row)] = 1
        targets[i, len(context) - 1 : len(row) - 1] = True
    return TokenRows(input_ids, attention_mask, targets)


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The trainable parameters, detached (tied weights once, as `named_parameters` lists them)."""
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def token_logprobs(
    model: torch.nn.Module, params: dict[str, torch.Tensor], rows: TokenRows, temperature: float = 1.0
) -> torch.Tensor:
    """log π(y_t | y_<t): (M,) float32 over the rows' response tokens, row-major."""
    out = functional_call(
        model,
        params,
        (),
        {"input_ids": rows.input_ids, "attention_mask": rows.attention_mask, "use_cache": False},
    )
    logits = out.logits[:, :-1]
    if logits.dtype in (torch.float16, torch.bfloat16):  # a float64 policy (a precision check) keeps float64
        logits = logits.float()
    logits = logits / temperature  # (N, T-1, V)
    picked = torch.log_softmax(logits, dim=-1).gather(-1, rows.input_ids[:, 1:, None])[..., 0]  # (N, T-1)
    return picked[rows.targets]


def _chunks(rows: TokenRows, chunk_rows: int):
    """(row slice, offset of its first token in the flat order) per chunk of rows."""
    offset = 0
    for start in range(0, rows.input_ids.shape[0], chunk_rows):
        part = TokenRows(
            *(x[start : start + chunk_rows] for x in (rows.input_ids, rows.attention_mask, rows.targets))
        )
        yield part, offset
        offset += part.n_tokens


def weighted_gradient(
    model: torch.nn.Module,
    rows: TokenRows,
    coefficients: torch.Tensor,
    temperature: float = 1.0,
    chunk_rows: int = 16,
) -> dict[str, torch.Tensor]:
    """∇θ Σ_m coefficients_m · log π(y_m): one backward pass per chunk of rows. coefficients: (M,)."""
    params = {k: v.clone().requires_grad_(True) for k, v in parameters(model).items()}
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    dtype = next(iter(params.values())).dtype
    coefficients = coefficients.to(rows.input_ids.device, dtype)
    for part, offset in _chunks(rows, chunk_rows):
        weights = coefficients[offset : offset + part.n_tokens]
        if not bool(weights.any()):
            continue  # a chunk without weight adds nothing (the target token's row is often alone)
        objective = (token_logprobs(model, params, part, temperature) * weights).sum()
        grads = torch.autograd.grad(objective, list(params.values()), allow_unused=True)
        for (name, _), g in zip(params.items(), grads, strict=True):
            if g is not None:
                total[name] += g
    return total


def directional_logprobs(
    model: torch.nn.Module,
    rows: TokenRows,
    direction: dict[str, torch.Tensor],
    temperature: float = 1.0,
    chunk_rows: int = 16,
) -> torch.Tensor:
    """⟨∇log π(y_m), direction⟩ for every response token m: (M,), one forward-mode pass per chunk."""
    params = parameters(model)
    tangents = {k: direction[k].to(v.dtype) for k, v in params.items()}
    out = []
    for part, _ in _chunks(rows, chunk_rows):
        _, derivative = jvp(
            lambda p, part=part: token_logprobs(model, p, part, temperature), (params,), (tangents,)
        )
        out.append(derivative.detach())
    return torch.cat(out)


def _precondition(gradient: dict[str, torch.Tensor], preconditioner: dict[str, torch.Tensor] | None) -> dict:
    if preconditioner is None:
        return gradient
    return {k: g * preconditioner[k].to(g.device, g.dtype) for k, g in gradient.items()}


def token_shares(
    model: torch.nn.Module,
    rows: TokenRows,
    target: int,
    coefficients: torch.Tensor,
    lr: float,
    *,
    preconditioner: dict[str, torch.Tensor] | None = None,
    temperature: float = 1.0,
    chunk_rows: int = 16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's first-order share of the change of token `target` (its flat index):
    (shares (M,) = lr · c_s · ⟨∇log π_s, P ∇log π_target⟩, inner (M,) = ⟨∇log π_s, P ∇log π_target⟩).
    The shares sum to `predicted_change(...)[target]`."""
    onehot = torch.zeros(rows.n_tokens, dtype=torch.float64)
    onehot[int(target)] = 1.0
    gradient = weighted_gradient(model, rows, onehot, temperature, chunk_rows)
    inner = directional_logprobs(
        model, rows, _precondition(gradient, preconditioner), temperature, chunk_rows
    )
    return lr * coefficients.to(inner.device, inner.dtype) * inner, inner


def predicted_change(
    model: torch.nn.Module,
    rows: TokenRows,
    coefficients: torch.Tensor,
    lr: float,
    *,
    preconditioner: dict[str, torch.Tensor] | None = None,
    temperature: float = 1.0,
    chunk_rows: int = 16,
) -> torch.Tensor:
    """First-order Δ log π of every token after one step θ += lr · P · ∇J: (M,)."""
    gradient = weighted_gradient(model, rows, coefficients, temperature, chunk_rows)
    return lr * directional_logprobs(
        model, rows, _precondition(gradient, preconditioner), temperature, chunk_rows
    )


def loss_weights(
    lengths: Sequence[int],
    loss_type: str,
    *,
    batch_rows: int,
    batch_tokens: int,
    max_completion_length: int | None,
) -> torch.Tensor:
    """The weight of each token's term in the trainer's loss (TRL 1.16's `loss_type`): (Σ lengths,) float32.

    dapo, bnpo, cispo, vespo: 1 / (trained tokens of the step's batch); grpo, sapo: 1 / (L_i · rows of the
    batch), each sequence's mean then the mean over sequences; dr_grpo: 1 / (rows · max_completion_length).
    `lengths` are the rows shown (a group), `batch_rows` / `batch_tokens` the whole batch that one optimizer
    step consumed, so a group's weights are its part of that step."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r} is not one of {', '.join(LOSS_TYPES)}")
    parts = []
    for L in lengths:
        if loss_type in ("grpo", "sapo"):
            w = 1.0 / (max(int(L), 1) * batch_rows)
        elif loss_type == "dr_grpo":
            if not max_completion_length:
                raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
            w = 1.0 / (batch_rows * max_completion_length)
        else:
            w = 1.0 / max(batch_tokens, 1)
        parts.append(torch.full((int(L),), w, dtype=torch.float32))
    return torch.cat(parts) if parts else torch.zeros(0)


def kl_slope(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, beta: float, bias_correction: bool = True):
    """d(β · KL_t)/d log π_t of TRL's per-token KL term at the sampling policy (ratio 1): (M,).

    KL_t = e^{ref − log π} − (ref − log π) − 1; with `use_bias_correction_kl` TRL multiplies it by the ratio
    π/π_old, whose slope at ratio 1 adds KL_t itself, and the sum is log π − ref."""
    if bias_correction:
        return beta * (logprobs - ref_logprobs)
    return beta * (1.0 - torch.exp(ref_logprobs - logprobs))
