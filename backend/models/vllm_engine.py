"""`VLLMEngine`: in-process `vllm.LLM` for sampling at scale on a CUDA GPU.

vLLM is imported only when this engine is built, so the rest of Credit Lens never needs it (it lives
in its own environment: requirements-gpu.txt and docs/models-and-gpu.md, section GPU). Prompts go in as token
ids (`TokensPrompt`), one request per sample with its own seed, and vLLM batches them. Logprobs are
requested for the drawn token only; vLLM's default `raw_logprobs` mode reports them from the raw
model distribution, the same convention as `TransformersEngine`. vLLM does not return full
distributions, so sampled-token entropies are not available here (reported as nan), and `score`
(teacher forcing with entropies) runs through a `TransformersEngine` on the same device and dtype.

Everything that is not a vLLM call — the model's metadata, the arguments given to `LLM` and
`SamplingParams`, and the reading of a finished request — is a plain function here, tested on CPU
without vLLM (tests/backend/models/test_vllm_engine.py). API facts were read in the source of the
vllm 0.33.0 wheel from PyPI (vllm/_version.py: commit g4ba787ec9): entrypoints/llm.py (LLM arguments,
`model_config`), sampling_params.py (ranges, seed -1, generation_config EOS ids), config/model.py
(`dtype="auto"` downcasts float32; `logprobs_mode="raw_logprobs"`), v1/engine/input_processor.py
(empty and too-long prompts), v1/core/sched/utils.py and v1/engine/detokenizer.py (the stop token stays
in `token_ids`), v1/engine/__init__.py (finish reasons), usage/usage_lib.py and envs.py (opt-out).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from backend.models.engine import (
    Cancel,
    Engine,
    Job,
    Progress,
    Sample,
    Scored,
    build_context,
    check_sampling,
    sample_in_chunks,
    sampling_jobs,
    start_token_id,
)
from backend.models.loading import EngineUnavailable, ModelFolder, check_model_dir
from backend.models.transformers_engine import TransformersEngine

OFFLINE_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
"""vLLM reports usage statistics to its own server unless one of these is set; the project is offline
by policy, so both are set before vLLM is imported (vllm/usage/usage_lib.py reads them)."""

DTYPES = ("float32", "float16", "bfloat16")


def set_offline_environment() -> None:
    """Set `OFFLINE_ENV` (overriding any other value: sending statistics is never wanted)."""
    os.environ.update(OFFLINE_ENV)


set_offline_environment()


class GenerationFailed(RuntimeError):
    """vLLM ended a request for a reason other than an end token or the length cap."""


def checkpoint_dtype(config) -> str:
    """The dtype the checkpoint was saved in (`dtype`, or the older `torch_dtype`, of config.json).

    vLLM's `dtype="auto"` runs a float32 checkpoint in half precision (bfloat16 on recent GPUs),
    while scoring runs in the checkpoint's dtype; both engines are given this one instead. A config
    that names none is float32 (what transformers loads it as).
    """
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(value).removeprefix("torch.") if value is not None else "float32"
    if name not in DTYPES:
        raise ValueError(f"config.json: dtype {name!r} is not one of {', '.join(DTYPES)}")
    return name


@dataclass
class ModelInfo:
    """What the engine reads from a model folder with transformers, before vLLM starts."""

    config: object
    tokenizer: object
    generation_config: object | None
    dtype: str
    max_positions: int | None


def read_model_info(folder: ModelFolder) -> ModelInfo:
    """Config, tokenizer and generation_config.json of a checked folder (local files only).

    vLLM stops on the EOS ids of generation_config.json as well as the tokenizer's, so the engine
    must know them to strip the end token and to mark a sample finished.
    """
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig  # noqa: PLC0415 - heavy, on use

    config = AutoConfig.from_pretrained(folder.path, local_files_only=True, trust_remote_code=False)
    tokenizer = AutoTokenizer.from_pretrained(folder.path, local_files_only=True, trust_remote_code=False)
    generation_config = None
    if (Path(folder.path) / "generation_config.json").is_file():
        generation_config = GenerationConfig.from_pretrained(folder.path, local_files_only=True)
    max_positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return ModelInfo(config, tokenizer, generation_config, checkpoint_dtype(config), max_positions)


def llm_arguments(
    folder: ModelFolder, dtype: str, seed: int, gpu_memory_utilization: float, extra: dict
) -> dict:
    """Keyword arguments of `vllm.LLM` (vllm/entrypoints/llm.py).

    `max_model_len` is left to vLLM to derive from the config unless the caller passes one: forcing
    the config's positions is refused for models where vLLM derives a smaller length.
    """
    kwargs = dict(
        model=str(folder.path),
        tokenizer=str(folder.path),
        trust_remote_code=False,
        seed=seed,
        dtype=dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        load_format="safetensors" if folder.use_safetensors else "auto",
    )
    kwargs.update(extra)
    return kwargs


def sampling_arguments(
    temperature: float, top_p: float, max_new_tokens: int, seed: int, eos_ids: set[int]
) -> dict:
    """Keyword arguments of one request's `vllm.SamplingParams` (vllm/sampling_params.py).

    `logprobs=0` returns the drawn token's logprob only; `detokenize=False` keeps token ids as drawn;
    `stop_token_ids` makes vLLM stop on exactly the end tokens this engine strips (it adds the
    tokenizer's EOS and generation_config.json's on its own).
    """
    return dict(
        n=1,
        temperature=float(temperature),
        top_p=float(top_p),
        max_tokens=int(max_new_tokens),
        seed=int(seed),
        logprobs=0,
        detokenize=False,
        stop_token_ids=sorted(eos_ids),
    )


def parse_completion(
    job: Job,
    token_ids: Sequence[int],
    logprobs: Sequence[float] | None,
    finish_reason: str | None,
    eos_ids: set[int],
) -> Sample:
    """One finished vLLM completion as a `Sample`.

    finish_reason (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS): "stop" — an end token was drawn
    (vLLM keeps it in `token_ids`; it is dropped here); "length" — cut at max_tokens or at the model's
    length; anything else ("abort", "error", "repetition", or none) raises `GenerationFailed` rather
    than passing a broken suffix off as a length-capped one.
    """
    prefix_index, sample_index, seed = job
    token_ids = [int(t) for t in token_ids]
    values = [float(v) for v in logprobs] if logprobs is not None else [float("nan")] * len(token_ids)
    if len(values) != len(token_ids):
        raise GenerationFailed(
            f"vLLM returned {len(values)} logprobs for {len(token_ids)} tokens "
            f"(prefix {prefix_index}, sample {sample_index}, seed {seed})"
        )
    if finish_reason == "stop":
        finished = True
        if token_ids and token_ids[-1] in eos_ids:
            token_ids, values = token_ids[:-1], values[:-1]
    elif finish_reason == "length":
        finished = False
    else:
        raise GenerationFailed(
            f"vLLM ended the request for prefix {prefix_index}, sample {sample_index} (seed {seed}) with "
            f"finish_reason {finish_reason!r}; only 'stop' and 'length' are results"
        )
    return Sample(
        prefix_index, sample_index, seed, token_ids, values, [float("nan")] * len(token_ids), finished
    )


PROMPT_LOGPROB_ARGUMENTS = {"max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0}
"""`SamplingParams` of a teacher-forced pass through vLLM: `prompt_logprobs=0` returns, for each prompt
position but the first, the logprob of the prompt's own token there (vllm/sampling_params.py); one token is
drawn and thrown away."""


def read_prompt_logprobs(prompt_logprobs: Sequence, token_ids: Sequence[int], start: int) -> np.ndarray:
    """The logprobs (L,) float32 of `token_ids` (the response), which begin at position `start` of the
    request, from its `RequestOutput.prompt_logprobs` (a list over positions, None at 0, each a dict token id
    -> Logprob that holds the position's own token)."""
    entries = prompt_logprobs[start : start + len(token_ids)]
    return np.array([entry[int(t)].logprob for entry, t in zip(entries, token_ids, strict=True)], np.float32)


class VLLMEngine(Engine):
    name = "vllm"
    reports_entropies = False

    def __init__(
        self,
        model_dir: str | os.PathLike,
        allow_pickle: bool = False,
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        dtype: str | None = None,
        max_batch: int = 4096,
        device: str | None = None,
        **llm_kwargs,
    ):
        """dtype: None takes the checkpoint's (`checkpoint_dtype`), for sampling and scoring alike."""
        folder = check_model_dir(model_dir, allow_pickle=allow_pickle)
        set_offline_environment()
        try:
            import vllm  # noqa: PLC0415 - optional GPU dependency, imported only when this engine opens
        except ImportError as exc:
            raise EngineUnavailable(
                "the vLLM engine needs the `vllm` package, which is not installed here "
                "(set up the GPU environment of docs/models-and-gpu.md: pip install -r "
                "requirements-gpu.txt); or use --engine transformers"
            ) from exc
        if not torch.cuda.is_available():
            raise EngineUnavailable(
                "the vLLM engine needs a CUDA GPU and none is visible; use --engine transformers"
            )
        info = read_model_info(folder)
        self.model_dir = str(model_dir)
        self.device = "cuda"
        self.max_batch = max_batch
        self._allow_pickle = allow_pickle
        self._scorer = None
        self.config, self.tokenizer = info.config, info.tokenizer
        self.generation_config = info.generation_config
        self.dtype = dtype or info.dtype
        if self.dtype not in DTYPES:
            raise EngineUnavailable(f"dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        self.start_id = start_token_id(getattr(self.config, "bos_token_id", None), self.eos_ids)
        self.llm = vllm.LLM(**llm_arguments(folder, self.dtype, seed, gpu_memory_utilization, llm_kwargs))
        self._vllm = vllm
        model_config = getattr(self.llm.llm_engine, "model_config", None)
        self.max_positions = getattr(model_config, "max_model_len", None) or info.max_positions

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
        check_sampling(n, max_new_tokens, temperature, top_p, seed, len(prefixes))
        contexts = [build_context(p, self.start_id, self.max_positions, i) for i, p in enumerate(prefixes)]
        eos = self.eos_ids
        return sample_in_chunks(
            sampling_jobs(len(prefixes), n, seed, prefix_seeds),
            self.max_batch,
            lambda chunk: self._generate_chunk(chunk, contexts, eos, max_new_tokens, temperature, top_p),
            progress,
            cancel,
        )

    def prompt_logprobs(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
    ) -> list[np.ndarray]:
        """Teacher-forced logprobs of each response given its prompt from vLLM itself (`prompt_logprobs`),
        at temperature 1 from the raw distribution, like `TransformersEngine.score`'s (which `score` runs
        here, for its entropies); the context is built as that engine builds it."""
        from vllm.inputs import TokensPrompt  # noqa: PLC0415 - optional GPU dependency

        contexts = [build_context(p, self.start_id, None, 0) for p in prompts]
        requests = [
            TokensPrompt(prompt_token_ids=c + list(r)) for c, r in zip(contexts, responses, strict=True)
        ]
        params = self._vllm.SamplingParams(**PROMPT_LOGPROB_ARGUMENTS)
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return [
            read_prompt_logprobs(o.prompt_logprobs, r, len(c))
            for o, c, r in zip(outputs, contexts, responses, strict=True)
        ]

    def _generate_chunk(self, chunk, contexts, eos, max_new_tokens, temperature, top_p) -> list[Sample]:
        from vllm.inputs import TokensPrompt  # noqa: PLC0415 - optional GPU dependency

        prompts = [TokensPrompt(prompt_token_ids=contexts[i]) for i, _, _ in chunk]
        params = [
            self._vllm.SamplingParams(**sampling_arguments(temperature, top_p, max_new_tokens, row_seed, eos))
            for _, _, row_seed in chunk
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        samples = []
        for job, out in zip(chunk, outputs, strict=True):
            completion = out.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = None
            if completion.logprobs is not None:  # one {token id: Logprob} per drawn token
                # zip stops at the shorter list; parse_completion then refuses the length mismatch
                logprobs = [step[t].logprob for step, t in zip(completion.logprobs, token_ids, strict=False)]
            samples.append(parse_completion(job, token_ids, logprobs, completion.finish_reason, eos))
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
        """Teacher forcing through transformers on the GPU in the sampling dtype (vLLM has no full
        distributions to give)."""
        if self._scorer is None:
            self._scorer = TransformersEngine(
                self.model_dir,
                device="cuda",
                allow_pickle=self._allow_pickle,
                dtype=getattr(torch, self.dtype),
            )
        return self._scorer.score(
            prompts,
            responses,
            chunk_size=chunk_size,
            return_hidden=return_hidden,
            progress=progress,
            cancel=cancel,
        )
