"""Per-token scores that need the policy itself: OAR-P, OAR-G and GCPO (`creditlens model-credit`).

- **OAR-P** (Li et al. 2026, arXiv 2601.07408, official code Valsure/Outcome-Grounded-Advantage-Reshaping
  `OAR-main.py`, `calculate_token_importance_perturbation`, pfinal_mode "answer_joint"): each reasoning
  token in turn is replaced by the pad token; the score is the drop of the final answer's mean token
  log-probability, `phi(y) - phi(y with y_t padded)`.
- **OAR-G** (same code, `calculate_token_importance_gradient`, "answer_joint"): one backward pass of
  `J = phi_0 - phi(noisy embeddings)` (Gaussian noise of std `noise_std` on the reasoning embeddings);
  the score is `|sum_h grad_h * embedding_h|` per reasoning token.
- **GCPO** (Li et al. 2026, arXiv 2605.29198, official code jacklishufan/gcpo `dp_actor.py`
  `compute_importance_weights`): the response's per-token log-probabilities under the rollout prompt
  and under a negative prompt (by default the official "wrong_answer" instruction); the cached score is
  `delta_t = log p_neg(y_t) - log p_pos(y_t)`.

The response splits at the answer regex as the official code splits reasoning / conclude / answer:
tokens before the match are the reasoning (scored), tokens of the match before its first group are the
fixed "conclude" text, the group is the answer. Scores are NaN on tokens a method does not score, and on
every token of a response without an answer (OAR). The estimators in `backend.estimators.methods.model_based`
turn the cached scores into advantages; everything here is the expensive, model-bound half.
Batched functions run through the engines (`Engine.score`, chunked, with progress and cancel); each has
a slow twin (`*_loop`) that calls the model one perturbation or one token at a time, for the tests.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from backend.core.errors import InputError
from backend.models.engine import Cancel, Engine, Progress, build_context
from backend.models.transformers_engine import cpu_threads

ANSWER_REGEX = r"####\s*(\S(?:.*\S)?)\s*$"
"""The bundled task's final line `#### 142`: group 1 is the answer, `#### ` the conclude text."""
NEGATIVE_TEMPLATE = "{prompt}, but generate the wrong answer"
"""The official code's built-in negative prompt (negative_prompt_type "wrong_answer")."""


@dataclass(frozen=True)
class RolloutTokens:
    """What a method needs of one rollout: its prompt (ids and text) and response token ids and labels."""

    rollout_id: int
    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]
    tokens: list[str]


def answer_span(tokens: Sequence[str], regex: str = ANSWER_REGEX) -> tuple[int, int, int] | None:
    """(reasoning_end, answer_start, answer_end) token indices of the last match of `regex` (group 1 is the
    answer) in the joined token labels, or None when nothing matches or no reasoning token precedes it."""
    text = "".join(tokens)
    ends = np.cumsum([len(t) for t in tokens])  # token k covers [ends[k] - len, ends[k])
    matches = list(re.finditer(regex, text, flags=re.S))
    match = matches[-1] if matches else None
    if match is None or match.lastindex is None:
        return None
    begin, (g0, g1) = match.start(), match.span(1)
    reasoning_end = int(np.searchsorted(ends, begin, side="right"))  # tokens ending at or before it
    a0 = int(np.searchsorted(ends, g0, side="right"))
    a1 = int(np.searchsorted(ends, g1, side="left")) + 1
    if reasoning_end == 0 or a1 <= a0:
        return None
    return reasoning_end, a0, min(a1, len(tokens))


def pad_token(engine: Engine) -> int:
    """The id OAR-P puts in place of a token: the engine's pad id (the transformers engine's rule: the
    tokenizer's pad token, else the smallest end token, else 0)."""
    pad = getattr(engine, "pad_id", None)
    if pad is None:
        pad = getattr(engine.tokenizer, "pad_token_id", None)
    if pad is None:
        pad = min(engine.eos_ids) if engine.eos_ids else 0
    return int(pad)


def _phi(logprobs: np.ndarray, a0: int, a1: int) -> float:
    """The answer's mean token log-probability (the official "answer_joint" phi)."""
    return float(np.mean(logprobs[a0:a1], dtype=np.float64))


def _nan_scores(n: int) -> np.ndarray:
    return np.full(n, np.nan, dtype=np.float32)


def oar_p_scores(
    engine: Engine,
    rollouts: Sequence[RolloutTokens],
    regex: str = ANSWER_REGEX,
    chunk_size: int = 64,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> dict[int, np.ndarray] | None:
    """OAR-P scores (L,) per rollout id, NaN outside the reasoning. Every perturbed response of every
    rollout is one row of batched `engine.score` calls. None when cancelled."""
    prompts, responses, owners = [], [], []
    spans = {}
    pad = pad_token(engine)
    for k, r in enumerate(rollouts):
        span = answer_span(r.tokens, regex)
        if span is None:
            continue
        spans[k] = span
        prompts.append(r.prompt_ids)
        responses.append(list(r.token_ids))
        owners.append((k, -1))
        for j in range(span[0]):
            masked = list(r.token_ids)
            masked[j] = pad
            prompts.append(r.prompt_ids)
            responses.append(masked)
            owners.append((k, j))
    scored = engine.score(prompts, responses, chunk_size=chunk_size, progress=progress, cancel=cancel)
    if any(s is None for s in scored):
        return None
    out = {r.rollout_id: _nan_scores(len(r.token_ids)) for r in rollouts}
    base: dict[int, float] = {}
    for (k, j), s in zip(owners, scored, strict=True):
        _, a0, a1 = spans[k]
        phi = _phi(s.logprobs, a0, a1)
        if j < 0:
            base[k] = phi
        else:
            out[rollouts[k].rollout_id][j] = base[k] - phi  # the unperturbed row comes first
    return out


def oar_p_scores_loop(
    engine: Engine, rollout: RolloutTokens, regex: str = ANSWER_REGEX, positions: Sequence[int] | None = None
) -> np.ndarray:
    """The slow twin of `oar_p_scores` for one rollout: one model call per perturbation (and `positions`,
    default every reasoning token)."""
    out = _nan_scores(len(rollout.token_ids))
    span = answer_span(rollout.tokens, regex)
    if span is None:
        return out
    reasoning_end, a0, a1 = span
    pad = pad_token(engine)
    base = _phi(engine.score([rollout.prompt_ids], [rollout.token_ids], chunk_size=1)[0].logprobs, a0, a1)
    for j in positions if positions is not None else range(reasoning_end):
        masked = list(rollout.token_ids)
        masked[j] = pad
        out[j] = base - _phi(engine.score([rollout.prompt_ids], [masked], chunk_size=1)[0].logprobs, a0, a1)
    return out


def _torch_model(engine: Engine):
    model = getattr(engine, "model", None)
    if not isinstance(model, torch.nn.Module):
        raise InputError(
            f"OAR-G needs gradients through the model; the {engine.name} engine gives none: "
            "use --engine transformers"
        )
    return model


def _noise(rollout_id: int, n: int, width: int, std: float, seed: int) -> torch.Tensor:
    """(n, H) Gaussian noise for a rollout's reasoning embeddings, from its own seed (batch-independent)."""
    generator = torch.Generator().manual_seed(int(seed) + int(rollout_id))
    return torch.randn((n, width), generator=generator, dtype=torch.float32) * std


def _answer_phi(logits: torch.Tensor, ids: torch.Tensor, start: int, a0: int, a1: int) -> torch.Tensor:
    """phi of one row: mean log p of answer tokens start+a0 .. start+a1-1 (logits (T, V), ids (T,))."""
    logp = torch.log_softmax(logits[start + a0 - 1 : start + a1 - 1].float(), dim=-1)
    return logp.gather(-1, ids[start + a0 : start + a1, None])[:, 0].mean()


def oar_g_scores(
    engine: Engine,
    rollouts: Sequence[RolloutTokens],
    regex: str = ANSWER_REGEX,
    noise_std: float = 1e-3,
    seed: int = 0,
    chunk_size: int = 16,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> dict[int, np.ndarray] | None:
    """OAR-G scores (L,) per rollout id, NaN outside the reasoning: `chunk_size` rollouts per forward and
    backward pass (right-padded; rows do not interact, so the summed objective gives each row its own
    gradient). None when cancelled."""
    model = _torch_model(engine)
    out = {r.rollout_id: _nan_scores(len(r.token_ids)) for r in rollouts}
    todo = [(r, span) for r in rollouts if (span := answer_span(r.tokens, regex)) is not None]
    embed = model.get_input_embeddings()
    for begin in range(0, len(todo), chunk_size):
        if cancel is not None and cancel():
            return None
        chunk = todo[begin : begin + chunk_size]
        contexts = [build_context(r.prompt_ids, engine.start_id, None, 0) for r, _ in chunk]
        rows = [c + list(r.token_ids) for c, (r, _) in zip(contexts, chunk, strict=True)]
        T = max(len(row) for row in rows)
        ids = torch.full((len(rows), T), pad_token(engine), dtype=torch.long)
        attention = torch.zeros((len(rows), T), dtype=torch.long)
        for k, row in enumerate(rows):
            ids[k, : len(row)] = torch.tensor(row)
            attention[k, : len(row)] = 1
        ids, attention = ids.to(engine.device), attention.to(engine.device)
        with torch.enable_grad(), cpu_threads(getattr(engine, "cpu_threads", None)):
            clean = embed(ids).detach()  # (C, T, H)
            noise = torch.zeros_like(clean)
            for k, (r, (reasoning_end, _, _)) in enumerate(chunk):
                s = len(contexts[k])
                row_noise = _noise(r.rollout_id, reasoning_end, clean.shape[-1], noise_std, seed)
                noise[k, s : s + reasoning_end] = row_noise.to(clean.device, clean.dtype)
            with torch.no_grad():
                logits0 = model(inputs_embeds=clean, attention_mask=attention).logits
            leaf = clean.clone().requires_grad_(True)
            logits = model(inputs_embeds=leaf + noise, attention_mask=attention).logits
            objective = sum(
                _answer_phi(logits0[k], ids[k], len(contexts[k]), a0, a1).detach()
                - _answer_phi(logits[k], ids[k], len(contexts[k]), a0, a1)
                for k, (_, (_, a0, a1)) in enumerate(chunk)
            )
            (grad,) = torch.autograd.grad(objective, leaf)
        saliency = (grad * clean).sum(-1).abs()  # (C, T)
        for k, (r, (reasoning_end, _, _)) in enumerate(chunk):
            s = len(contexts[k])
            out[r.rollout_id][:reasoning_end] = saliency[k, s : s + reasoning_end].float().cpu().numpy()
        if progress is not None:
            progress(min(begin + chunk_size, len(todo)), len(todo))
    return out


def oar_g_scores_loop(
    engine: Engine,
    rollout: RolloutTokens,
    regex: str = ANSWER_REGEX,
    noise_std: float = 1e-3,
    seed: int = 0,
    positions: Sequence[int] | None = None,
) -> np.ndarray:
    """The slow twin of `oar_g_scores` for one rollout, unpadded: one forward and backward pass per token,
    each with the gradient taken at that token's embedding alone."""
    model = _torch_model(engine)
    out = _nan_scores(len(rollout.token_ids))
    span = answer_span(rollout.tokens, regex)
    if span is None:
        return out
    reasoning_end, a0, a1 = span
    context = build_context(rollout.prompt_ids, engine.start_id, None, 0)
    s = len(context)
    ids = torch.tensor(context + list(rollout.token_ids), device=engine.device)
    embed = model.get_input_embeddings()
    with torch.enable_grad():
        clean = embed(ids[None]).detach()[0]  # (T, H)
        noise = torch.zeros_like(clean)
        noise[s : s + reasoning_end] = _noise(
            rollout.rollout_id, reasoning_end, clean.shape[-1], noise_std, seed
        ).to(clean.device, clean.dtype)
        with torch.no_grad():
            phi0 = _answer_phi(model(inputs_embeds=clean[None]).logits[0], ids, s, a0, a1)
        for j in positions if positions is not None else range(reasoning_end):
            token = clean[s + j].clone().requires_grad_(True)
            rows = torch.cat([clean[: s + j], token[None], clean[s + j + 1 :]]) + noise
            phi = _answer_phi(model(inputs_embeds=rows[None]).logits[0], ids, s, a0, a1)
            (grad,) = torch.autograd.grad(phi0 - phi, token)
            out[j] = float((grad * clean[s + j]).sum().abs())
    return out


def negative_prompt(prompt: str, template: str = NEGATIVE_TEMPLATE) -> str:
    """`template` with `{prompt}` replaced by the prompt without its trailing whitespace, which is put back
    after (the demo's prompt ends in the newline its responses follow)."""
    core = prompt.rstrip()
    return template.replace("{prompt}", core) + prompt[len(core) :]


def gcpo_deltas(
    engine: Engine,
    rollouts: Sequence[RolloutTokens],
    template: str = NEGATIVE_TEMPLATE,
    chunk_size: int = 64,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> dict[int, np.ndarray] | None:
    """GCPO's delta_t = log p(y_t | negative prompt, y_<t) - log p(y_t | prompt, y_<t), (L,) per rollout id:
    two batched `engine.score` passes. None when cancelled."""
    n = len(rollouts)
    responses = [list(r.token_ids) for r in rollouts]

    def part(offset: int):
        return None if progress is None else (lambda done, total: progress(offset + done, 2 * n))

    positive = engine.score(
        [r.prompt_ids for r in rollouts], responses, chunk_size=chunk_size, progress=part(0), cancel=cancel
    )
    if any(s is None for s in positive):
        return None
    negative_ids = [engine.encode(negative_prompt(r.prompt, template)) for r in rollouts]
    negative = engine.score(negative_ids, responses, chunk_size=chunk_size, progress=part(n), cancel=cancel)
    if any(s is None for s in negative):
        return None
    return {
        r.rollout_id: (neg.logprobs - pos.logprobs).astype(np.float32)
        for r, pos, neg in zip(rollouts, positive, negative, strict=True)
    }


def gcpo_deltas_loop(
    engine: Engine,
    rollout: RolloutTokens,
    template: str = NEGATIVE_TEMPLATE,
    positions: Sequence[int] | None = None,
) -> np.ndarray:
    """The slow twin of `gcpo_deltas` for one rollout: token t scored alone, as the last token of the
    prefix y_<=t, under each prompt (NaN at positions not asked)."""
    out = _nan_scores(len(rollout.token_ids))
    negative_ids = engine.encode(negative_prompt(rollout.prompt, template))
    for t in positions if positions is not None else range(len(rollout.token_ids)):
        prefix = list(rollout.token_ids[: t + 1])
        pos = engine.score([rollout.prompt_ids], [prefix], chunk_size=1)[0].logprobs[t]
        neg = engine.score([negative_ids], [prefix], chunk_size=1)[0].logprobs[t]
        out[t] = neg - pos
    return out
