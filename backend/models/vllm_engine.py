"""`VLLMEngine`: in-process `vllm.LLM` for sampling at scale on a CUDA GPU.

vLLM is imported only when this engine is built, so the rest of Credit Lens never needs it. Prompts go
in as token ids (`TokensPrompt`), one request per sample with its own seed, and vLLM batches them.
Logprobs are requested for the drawn token only; vLLM's default `raw_logprobs` mode reports them
from the raw model distribution, the same convention as `TransformersEngine`. vLLM does not return
full distributions, so sampled-token entropies are not available here (reported as nan), and
`score` (teacher forcing with entropies) runs through a `TransformersEngine` on the same device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from backend.models.engine import (
    Cancel,
    Engine,
    Progress,
    Sample,
    Scored,
    check_sampling,
    sample_in_chunks,
    sampling_jobs,
)
from backend.models.loading import EngineUnavailable, check_model_dir


class VLLMEngine(Engine):
    name = "vllm"

    def __init__(
        self,
        model_dir: str | os.PathLike,
        allow_pickle: bool = False,
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        dtype: str = "auto",
        max_batch: int = 4096,
        device: str | None = None,
        **llm_kwargs,
    ):
        folder = check_model_dir(model_dir, allow_pickle=allow_pickle)
        try:
            import vllm
        except ImportError as exc:
            raise EngineUnavailable(
                "the vLLM engine needs the `vllm` package, which is not installed here "
                "(pip install -r requirements-gpu.txt on a machine with a CUDA GPU); "
                "or use --engine transformers"
            ) from exc
        import torch

        if not torch.cuda.is_available():
            raise EngineUnavailable(
                "the vLLM engine needs a CUDA GPU and none is visible; use --engine transformers"
            )
        from transformers import AutoConfig, AutoTokenizer

        self.model_dir = str(model_dir)
        self.device = "cuda"
        self.max_batch = max_batch
        self._allow_pickle = allow_pickle
        self._scorer = None
        self.config = AutoConfig.from_pretrained(folder.path, local_files_only=True, trust_remote_code=False)
        self.tokenizer = AutoTokenizer.from_pretrained(
            folder.path, local_files_only=True, trust_remote_code=False
        )
        max_len = getattr(self.config, "max_position_embeddings", None) or getattr(
            self.config, "n_positions", None
        )
        kwargs = dict(
            model=str(folder.path),
            tokenizer=str(folder.path),
            trust_remote_code=False,
            seed=seed,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            load_format="safetensors" if folder.use_safetensors else "auto",
        )
        if max_len:
            kwargs["max_model_len"] = int(max_len)
        kwargs.update(llm_kwargs)
        self.llm = vllm.LLM(**kwargs)
        self._vllm = vllm

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
        check_sampling(n, max_new_tokens, temperature, top_p)
        eos = self.eos_ids
        return sample_in_chunks(
            sampling_jobs(len(prefixes), n, seed, prefix_seeds),
            self.max_batch,
            lambda chunk: self._generate_chunk(chunk, prefixes, eos, max_new_tokens, temperature, top_p),
            progress,
            cancel,
        )

    def _generate_chunk(self, chunk, prefixes, eos, max_new_tokens, temperature, top_p) -> list[Sample]:
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(prefixes[i])) for i, _, _ in chunk]
        params = [
            self._vllm.SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p,
                max_tokens=max_new_tokens,
                seed=row_seed,
                logprobs=0,
                detokenize=False,
            )
            for _, _, row_seed in chunk
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        samples = []
        for (i, j, row_seed), out in zip(chunk, outputs, strict=True):
            completion = out.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = (
                [float(completion.logprobs[k][t].logprob) for k, t in enumerate(token_ids)]
                if completion.logprobs is not None
                else [float("nan")] * len(token_ids)
            )
            finished = completion.finish_reason == "stop"
            if token_ids and token_ids[-1] in eos:
                token_ids, logprobs, finished = token_ids[:-1], logprobs[:-1], True
            samples.append(
                Sample(i, j, row_seed, token_ids, logprobs, [float("nan")] * len(token_ids), finished)
            )
        return samples

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
        """Teacher forcing through transformers on the GPU (vLLM has no full distributions to give)."""
        if self._scorer is None:
            from backend.models.transformers_engine import TransformersEngine

            self._scorer = TransformersEngine(self.model_dir, device="cuda", allow_pickle=self._allow_pickle)
        return self._scorer.score(
            prompts,
            responses,
            chunk_size=chunk_size,
            return_hidden=return_hidden,
            progress=progress,
            cancel=cancel,
        )
