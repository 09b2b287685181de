"""`TransformersEngine`: any local causal LM through `AutoModelForCausalLM`, on CPU or CUDA.

Generation is our own short loop over the model's KV cache rather than `model.generate`, because the
loop gives every row its own seed (a suffix can be regenerated alone) and returns the raw logprob and
entropy of each drawn token without a second pass. Prefixes are left-padded, with position ids
counted from each row's first real token, so a padded row sees exactly what it would see alone.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from backend.core.errors import InputError
from backend.models.engine import (
    Cancel,
    Engine,
    Progress,
    Sample,
    Scored,
    build_context,
    check_sampling,
    sample_in_chunks,
    sampling_jobs,
    start_token_id,
)
from backend.models.loading import check_model_dir

SMALL_MODEL_PARAMETERS = 50_000_000


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """Run torch CPU ops on `n` threads for the duration, then restore (None: leave as is)."""
    if n is None or n == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _on_engine_threads(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with cpu_threads(self.cpu_threads):
            return method(self, *args, **kwargs)

    return wrapper


def pick_device(device: str | None) -> str:
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked but no CUDA device is visible; use --device cpu")
    return str(device)


class TransformersEngine(Engine):
    name = "transformers"

    def __init__(
        self,
        model_dir: str | os.PathLike,
        device: str | None = None,
        allow_pickle: bool = False,
        dtype: torch.dtype | None = None,
        max_batch: int = 256,
        cpu_threads: int | None | str = "auto",
    ):
        # transformers takes ~2 s to import: only when a model is opened
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415
        from transformers.utils import logging as hf_logging  # noqa: PLC0415

        hf_logging.disable_progress_bar()  # our commands draw their own progress on stderr

        folder = check_model_dir(model_dir, allow_pickle=allow_pickle)
        self.model_dir = str(model_dir)
        self.device = pick_device(device)
        if dtype is None:
            dtype = torch.float32 if self.device == "cpu" else "auto"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                folder.path, local_files_only=True, trust_remote_code=False
            )
            self.model = AutoModelForCausalLM.from_pretrained(
                folder.path,
                local_files_only=True,
                trust_remote_code=False,
                use_safetensors=folder.use_safetensors,
                dtype=dtype,
            )
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(
                f"cannot load model folder {self.model_dir!r}: {str(exc).splitlines()[0]}"
            ) from exc
        self.model.to(self.device).eval()
        self.config = self.model.config
        self.generation_config = getattr(self.model, "generation_config", None)
        self.max_batch = max_batch
        # A small model's ops are too short to share across threads: on a busy two-core machine one
        # thread was 5-15x faster than two. Larger models keep torch's default.
        if cpu_threads == "auto":
            small = sum(p.numel() for p in self.model.parameters()) < SMALL_MODEL_PARAMETERS
            cpu_threads = 1 if small and self.device == "cpu" else None
        self.cpu_threads = cpu_threads
        self.max_positions = getattr(self.config, "max_position_embeddings", None) or getattr(
            self.config, "n_positions", None
        )
        params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (min(self.eos_ids) if self.eos_ids else 0))
        self.start_id = start_token_id(getattr(self.config, "bos_token_id", None), self.eos_ids)

    # scoring -------------------------------------------------------------------------------------
    @_on_engine_threads
    @torch.inference_mode()
    def score(
        self,
        prompts: Sequence[Sequence[int]],
        responses: Sequence[Sequence[int]],
        *,
        chunk_size: int = 16,
        return_hidden: bool = False,
        progress: Progress | None = None,
        cancel: Cancel | None = None,
    ) -> list[Scored]:
        """Teacher-forced logprobs and entropies of each response given its prompt.

        Rows are scored `chunk_size` at a time (right-padded), longest first, so memory stays bounded
        by one chunk's logits. A cancelled call returns the rows finished so far in a shorter list
        only if it is cancelled before the first chunk; otherwise `Scored` for every row done, in input
        order, with `None` left for rows not reached.
        """
        if len(prompts) != len(responses):
            raise InputError(f"score: {len(prompts)} prompts but {len(responses)} responses")
        rows = [self._context(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
        starts = [len(self._context(p)) for p in prompts]
        for i, row in enumerate(rows):
            if self.max_positions and len(row) > self.max_positions:
                raise InputError(
                    f"score: row {i} has {len(row)} tokens, the model takes {self.max_positions}"
                )
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        results: list[Scored | None] = [None] * len(rows)
        for begin in range(0, len(order), chunk_size):
            if cancel is not None and cancel():
                break
            chunk = order[begin : begin + chunk_size]
            T = max(len(rows[i]) for i in chunk)
            input_ids = torch.full((len(chunk), T), self.pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), T), dtype=torch.long)
            for k, i in enumerate(chunk):
                input_ids[k, : len(rows[i])] = torch.tensor(rows[i])
                attention_mask[k, : len(rows[i])] = 1
            input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                use_cache=False,
                output_hidden_states=return_hidden,
            )
            logp = torch.log_softmax(out.logits.float(), dim=-1)  # (C, T, V)
            for k, i in enumerate(chunk):
                s, L = starts[i], len(rows[i]) - starts[i]
                step_logp = logp[k, s - 1 : s - 1 + L]  # (L, V): distributions that predict y_0..y_{L-1}
                target = input_ids[k, s : s + L]
                token_logp = step_logp.gather(-1, target[:, None])[:, 0]
                entropy = -(step_logp.exp() * step_logp).sum(-1)
                hidden = None
                if return_hidden:
                    hidden = out.hidden_states[-1][k, s - 1 : s - 1 + L].float().cpu().numpy()
                results[i] = Scored(
                    token_logp.cpu().numpy().astype(np.float32),
                    entropy.cpu().numpy().astype(np.float32),
                    hidden,
                )
            if progress is not None:
                progress(min(begin + chunk_size, len(order)), len(order))
        return results

    def _context(self, prompt: Sequence[int]) -> list[int]:
        # A response needs at least one token before it to be predicted from (the rule of generate).
        return build_context(prompt, self.start_id, None, 0)

    # sampling ------------------------------------------------------------------------------------
    @_on_engine_threads
    @torch.inference_mode()
    def generate(
        self,
        prefixes: Sequence[Sequence[int]],
        n: int = 1,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        *,
        progress: Progress | None = None,
        cancel: Cancel | None = None,
        prefix_seeds: Sequence[int] | None = None,
    ) -> list[Sample]:
        """Sample `n` suffixes for every prefix, all rows batched `max_batch` at a time.

        Returns the samples of every finished chunk, ordered by (prefix_index, sample_index); when
        `cancel()` turns true the chunks done so far are returned.
        """
        check_sampling(n, max_new_tokens, temperature, top_p, seed, len(prefixes))
        jobs = sampling_jobs(len(prefixes), n, seed, prefix_seeds)
        contexts = [build_context(p, self.start_id, self.max_positions, i) for i, p in enumerate(prefixes)]
        # Similar lengths share a chunk, which keeps left padding short.
        jobs.sort(key=lambda job: (len(contexts[job[0]]), job[0], job[1]))
        return sample_in_chunks(
            jobs,
            self.max_batch,
            lambda chunk: self._generate_chunk(chunk, contexts, max_new_tokens, temperature, top_p),
            progress,
            cancel,
        )

    def _generate_chunk(self, chunk, contexts, max_new_tokens, temperature, top_p) -> list[Sample]:
        B = len(chunk)
        lengths = [len(contexts[i]) for i, _, _ in chunk]
        P = max(lengths)
        if self.max_positions:
            max_new_tokens = max(1, min(max_new_tokens, self.max_positions - P))
        input_ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((B, P), dtype=torch.long)
        for k, (i, _, _) in enumerate(chunk):
            input_ids[k, P - lengths[k] :] = torch.tensor(contexts[i])
            attention_mask[k, P - lengths[k] :] = 1
        # One uniform per row and step from the row's own generator: a row's draws do not depend on
        # which other rows share its batch.
        uniforms = torch.stack(
            [
                torch.rand(
                    max_new_tokens, generator=torch.Generator().manual_seed(row_seed), dtype=torch.float64
                )
                for _, _, row_seed in chunk
            ]
        ).to(self.device)  # (B, N)
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P)
        eos = torch.tensor(sorted(self.eos_ids) or [-1], device=self.device)

        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True
        )
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        next_pos = position_ids[:, -1:] + 1  # (B, 1)
        tokens = torch.zeros((B, max_new_tokens), dtype=torch.long, device=self.device)
        token_logp = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=self.device)
        token_entropy = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=self.device)
        finished = torch.zeros(B, dtype=torch.bool, device=self.device)
        lengths_out = torch.full((B,), max_new_tokens, dtype=torch.long, device=self.device)
        logits = out.logits[:, -1].float()  # (b, V), b = rows still in the batch
        rows = torch.arange(B, device=self.device)  # (b,) batch row -> chunk row
        can_shrink = hasattr(cache, "batch_select_indices")
        for t in range(max_new_tokens):
            logp = torch.log_softmax(logits, dim=-1)  # (b, V)
            choice = draw(logp, uniforms[rows, t], temperature, top_p)  # (b,)
            tokens[rows, t] = choice
            token_logp[rows, t] = logp.gather(-1, choice[:, None])[:, 0]
            token_entropy[rows, t] = -(logp.exp() * logp).sum(-1)
            ended = torch.isin(choice, eos) & ~finished[rows]  # (b,)
            lengths_out[rows[ended]] = t
            finished[rows[ended]] = True
            if bool(finished.all()) or t == max_new_tokens - 1:
                break
            live = ~finished[rows]  # (b,)
            # Finished rows would keep decoding for nothing: once half the batch is done, drop them from
            # the batch and the KV cache. Each row's draws come from its own uniforms, so this changes
            # no sample.
            if can_shrink and int(live.sum()) <= len(rows) // 2:
                keep = live.nonzero()[:, 0]
                cache.batch_select_indices(keep)
                rows, choice = rows[keep], choice[keep]
                attention_mask, next_pos = attention_mask[keep], next_pos[keep]
            attention_mask = torch.cat(
                [attention_mask, torch.ones((len(rows), 1), dtype=attention_mask.dtype, device=self.device)],
                dim=1,
            )
            step = self.model(
                input_ids=choice[:, None],
                attention_mask=attention_mask,
                position_ids=next_pos,
                use_cache=True,
                **{self._cache_kwarg: cache},
            )
            cache = getattr(step, "cache", None) or getattr(step, "past_key_values", None)
            next_pos = next_pos + 1
            logits = step.logits[:, -1].float()
        tokens, token_logp, token_entropy = tokens.cpu(), token_logp.cpu(), token_entropy.cpu()
        lengths_out, finished = lengths_out.cpu().tolist(), finished.cpu().tolist()
        return [
            Sample(
                prefix_index=i,
                sample_index=j,
                seed=row_seed,
                token_ids=tokens[k, : lengths_out[k]].tolist(),
                logprobs=token_logp[k, : lengths_out[k]].tolist(),
                entropies=token_entropy[k, : lengths_out[k]].tolist(),
                finished=bool(finished[k]),
            )
            for k, (i, j, row_seed) in enumerate(chunk)
        ]


def draw(logp: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Inverse-CDF sampling from softmax(logp / temperature) truncated to the top-p nucleus.

    logp: (B, V) float32 raw log-probabilities; uniforms: (B,) float64 in [0, 1). Returns (B,) int64.
    Temperature 0 is greedy.
    """
    if temperature == 0:
        return logp.argmax(-1)
    probs = torch.softmax(logp / temperature, dim=-1).double()  # (B, V)
    sorted_probs, sorted_ids = probs.sort(dim=-1, descending=True)  # (B, V)
    if top_p < 1:
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass strictly above each token
        sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    cdf = sorted_probs.cumsum(-1)  # (B, V)
    target = uniforms[:, None] * cdf[:, -1:]  # (B, 1)
    index = torch.searchsorted(cdf, target, right=True).clamp(max=probs.shape[-1] - 1)  # (B, 1)
    return sorted_ids.gather(-1, index)[:, 0]
