"""The vLLM engine's own logic on CPU, without vllm installed: the rules both engines share (sampling
ranges, context building), EOS ids from generation_config.json, the arguments given to vLLM and the
reading of its finished requests. Facts about vLLM are from the source of the vllm 0.33.0 wheel on
PyPI (vllm/_version.py: commit g4ba787ec9): `SamplingParams.__post_init__`/`_verify_args` in
vllm/sampling_params.py (T > 2 refused, 0 < T < 0.01 raised to 0.01, seed -1 read as random),
FINISH_REASON_STRINGS in vllm/v1/engine/__init__.py, `check_stop` in vllm/v1/core/sched/utils.py and
`IncrementalDetokenizer` in vllm/v1/engine/detokenizer.py (the end token stays in the output token ids),
`is_usage_stats_enabled` in vllm/usage/usage_lib.py (VLLM_NO_USAGE_STATS / DO_NOT_TRACK)"""

import json
import math
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from backend.core.errors import InputError
from backend.models.engine import build_context, check_sampling, start_token_id
from backend.models.factory import engine_note, load_engine, resolve_engine, vllm_usable
from backend.models.loading import EngineUnavailable, check_model_dir
from backend.models.transformers_engine import TransformersEngine
from backend.models.vllm_engine import (
    PROMPT_LOGPROB_ARGUMENTS,
    GenerationFailed,
    VLLMEngine,
    checkpoint_dtype,
    llm_arguments,
    parse_completion,
    read_model_info,
    read_prompt_logprobs,
    sampling_arguments,
)
from tests.backend.models.conftest import DEMO_MODEL, ROOT

NO_VLLM = pytest.mark.skipif(vllm_usable(), reason="vLLM and a GPU are present")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=0.0),
        dict(temperature=0.01),
        dict(temperature=2.0),
        dict(temperature=1, top_p=1),
        dict(top_p=1e-6),
        dict(seed=0),
        dict(seed=np.int64(5), n=np.int64(3)),
        dict(seed=2**63 - 8, n=4, n_prefixes=2),
    ],
)
def test_sampling_parameters_both_engines_accept(kwargs):
    args = dict(n=1, max_new_tokens=8, temperature=1.0, top_p=1.0) | kwargs
    check_sampling(**args)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(temperature=2.5), "temperature must be 0 .greedy. or in \\[0.01, 2\\], got 2.5"),
        (dict(temperature=0.005), "temperature must be 0 .greedy. or in \\[0.01, 2\\], got 0.005"),
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=math.nan), "temperature must be a finite number"),
        (dict(temperature="1"), "temperature must be a finite number"),
        (dict(top_p=0.0), "top_p must be in \\(0, 1\\]"),
        (dict(top_p=1.5), "top_p"),
        (dict(seed=-1), "seed must be >= 0.*vLLM reads -1 as a random seed"),
        (dict(seed=2**63 - 7, n=4, n_prefixes=2), "seed must be >= 0 with every per-sample seed"),
        (dict(seed=1.5), "seed must be an integer"),
        (dict(n=0), "samples must be an integer >= 1"),
        (dict(n=True), "samples must be an integer"),
        (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    ],
)
def test_sampling_parameters_out_of_range_are_input_errors(kwargs, message):
    args = dict(n=1, max_new_tokens=8, temperature=1.0, top_p=1.0) | kwargs
    with pytest.raises(InputError, match=message):
        check_sampling(**args)


def test_transformers_engine_applies_the_shared_ranges_and_context_rule(engine):
    prefix = engine.encode("47+85=?\n")
    for bad in (dict(temperature=2.5), dict(temperature=0.005), dict(seed=-1)):
        with pytest.raises(InputError):
            engine.generate([prefix], n=1, max_new_tokens=4, **bad)
    # An empty prefix is the start token alone: the same suffix either way.
    empty = engine.generate([[]], n=2, max_new_tokens=12, seed=4)
    start = engine.generate([[engine.start_id]], n=2, max_new_tokens=12, seed=4)
    assert [s.token_ids for s in empty] == [s.token_ids for s in start]
    with pytest.raises(InputError, match="prefix 1 has 160 tokens, the model takes 160"):
        engine.generate([prefix, [5] * 160], n=1, max_new_tokens=4)
    assert engine.generate([[5] * 159], n=1, max_new_tokens=4, temperature=0)[0].token_ids


def test_context_rule():
    assert build_context([], start_id=1, max_positions=160, index=0) == [1]
    assert build_context((4, 5), start_id=1, max_positions=None, index=0) == [4, 5]
    assert build_context([7] * 159, start_id=1, max_positions=160, index=0) == [7] * 159
    with pytest.raises(InputError, match="generate: prefix 3 has 160 tokens, the model takes 160"):
        build_context([7] * 160, start_id=1, max_positions=160, index=3)
    assert start_token_id(2, {1, 9}) == 2
    assert start_token_id(None, {9, 1}) == 1
    assert start_token_id(None, set()) == 0


def _model_copy(tmp_path, config_edits=None, generation_config=None):
    folder = tmp_path / "model"
    shutil.copytree(DEMO_MODEL, folder)
    if config_edits is not None:
        config = json.loads((folder / "config.json").read_text())
        for key, value in config_edits.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        (folder / "config.json").write_text(json.dumps(config))
    if generation_config is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation_config))
    return folder


def _engine_from_info(folder) -> VLLMEngine:
    """The metadata half of `VLLMEngine.__init__` (everything before `vllm.LLM` is built)."""
    info = read_model_info(check_model_dir(folder))
    engine = VLLMEngine.__new__(VLLMEngine)
    engine.config, engine.tokenizer, engine.generation_config = (
        info.config,
        info.tokenizer,
        info.generation_config,
    )
    engine.start_id = start_token_id(getattr(info.config, "bos_token_id", None), engine.eos_ids)
    engine.max_positions = info.max_positions
    return engine


def test_eos_ids_include_generation_config_in_both_engines(tmp_path, engine):
    # The demo's config.json and tokenizer say eos 1; generation_config.json adds "#" (the demo
    # policy writes "####" before its answer), as vLLM reads it.
    hash_id = engine.encode("#")[0]
    folder = _model_copy(tmp_path, generation_config={"bos_token_id": 1, "eos_token_id": [1, hash_id]})
    vllm_side = _engine_from_info(folder)
    assert vllm_side.eos_ids == {1, hash_id}
    assert sampling_arguments(1.0, 1.0, 16, 3, vllm_side.eos_ids)["stop_token_ids"] == sorted({1, hash_id})
    transformers_side = TransformersEngine(folder, device="cpu")
    assert transformers_side.eos_ids == {1, hash_id}
    # "#" now ends a suffix: no sample carries it, and most samples end there.
    prefix = [transformers_side.encode("47+85=?\n")]
    samples = transformers_side.generate(prefix, n=16, max_new_tokens=64, seed=0)
    assert all(hash_id not in s.token_ids and 1 not in s.token_ids for s in samples)
    assert sum(s.finished for s in samples) >= 8
    plain = engine.generate(prefix, n=16, max_new_tokens=64, seed=0)
    assert sum(hash_id in s.token_ids for s in plain) >= 8
    # Without generation_config.json the ids come from config.json and the tokenizer.
    (folder / "generation_config.json").unlink()
    assert _engine_from_info(folder).eos_ids == {1}


def test_vllm_generate_checks_parameters_and_contexts_before_any_vllm_call():
    engine = _engine_from_info(DEMO_MODEL)
    with pytest.raises(InputError, match="temperature"):
        engine.generate([[4, 5]], temperature=3.0)
    with pytest.raises(InputError, match="seed"):
        engine.generate([[4, 5]], seed=-1)
    with pytest.raises(InputError, match="prefix 1 has 200 tokens, the model takes 160"):
        engine.generate([[4, 5], [4] * 200])


def test_checkpoint_dtype_is_what_both_engines_load(tmp_path):
    assert read_model_info(check_model_dir(DEMO_MODEL)).dtype == "float32"
    older = _model_copy(tmp_path / "a", {"dtype": None, "torch_dtype": "bfloat16"})
    assert read_model_info(check_model_dir(older)).dtype == "bfloat16"
    unnamed = _model_copy(tmp_path / "b", {"dtype": None})
    assert read_model_info(check_model_dir(unnamed)).dtype == "float32"
    with pytest.raises(ValueError, match="dtype 'int8'"):
        checkpoint_dtype(type("Config", (), {"dtype": "int8"})())


def test_llm_arguments_name_the_dtype_and_leave_the_length_to_vllm():
    folder = check_model_dir(DEMO_MODEL)
    kwargs = llm_arguments(
        folder, "float32", seed=3, gpu_memory_utilization=0.4, extra={"enforce_eager": True}
    )
    assert kwargs["dtype"] == "float32"
    assert "max_model_len" not in kwargs
    assert kwargs["trust_remote_code"] is False
    assert kwargs["load_format"] == "safetensors"
    assert kwargs["model"] == kwargs["tokenizer"] == str(folder.path)
    assert kwargs["enforce_eager"] is True and kwargs["seed"] == 3
    assert llm_arguments(folder, "float32", 0, 0.4, {"max_model_len": 64})["max_model_len"] == 64


def test_sampling_arguments():
    kwargs = sampling_arguments(0.7, 0.9, 32, 11, {9, 1})
    assert kwargs == dict(
        n=1,
        temperature=0.7,
        top_p=0.9,
        max_tokens=32,
        seed=11,
        logprobs=0,
        detokenize=False,
        stop_token_ids=[1, 9],
    )


def test_parse_completion_finish_reasons_and_end_token():
    eos = {1, 7}
    stopped = parse_completion((2, 3, 40), [5, 6, 7], [-0.1, -0.2, -0.3], "stop", eos)
    assert (stopped.prefix_index, stopped.sample_index, stopped.seed) == (2, 3, 40)
    assert stopped.token_ids == [5, 6] and stopped.logprobs == [-0.1, -0.2] and stopped.finished
    assert len(stopped.entropies) == 2 and all(math.isnan(e) for e in stopped.entropies)
    capped = parse_completion((0, 0, 0), [5, 6, 8], [-0.1, -0.2, -0.3], "length", eos)
    assert capped.token_ids == [5, 6, 8] and not capped.finished
    # A stop that left the end token out of token_ids still counts as finished.
    assert parse_completion((0, 0, 0), [5], [-0.1], "stop", eos).token_ids == [5]
    only_end = parse_completion((0, 0, 0), [1], [-0.5], "stop", eos)
    assert only_end.token_ids == [] and only_end.logprobs == [] and only_end.finished
    no_logprobs = parse_completion((0, 0, 0), [5, 6], None, "length", eos)
    assert all(math.isnan(v) for v in no_logprobs.logprobs)
    for reason in ("abort", "error", "repetition", None):
        with pytest.raises(
            GenerationFailed, match=f"prefix 4, sample 1 .seed 9. with finish_reason {reason!r}"
        ):
            parse_completion((4, 1, 9), [5, 6], [-0.1, -0.2], reason, eos)
    with pytest.raises(GenerationFailed, match="2 logprobs for 3 tokens"):
        parse_completion((0, 0, 0), [5, 6, 8], [-0.1, -0.2], "length", eos)


def test_importing_the_engine_turns_vllm_usage_statistics_off():
    env = {k: v for k, v in os.environ.items() if k != "VLLM_NO_USAGE_STATS"} | {"DO_NOT_TRACK": "0"}
    code = (
        "import os, backend.models.vllm_engine; "
        "print(os.environ['VLLM_NO_USAGE_STATS'], os.environ['DO_NOT_TRACK'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["1", "1"]


@NO_VLLM
def test_auto_engine_choice_is_stated_and_entropy_users_get_transformers():
    assert resolve_engine("auto") == "transformers"
    assert resolve_engine("auto", device="cpu") == "transformers"
    assert resolve_engine("vllm", need_entropies=False) == "vllm"
    assert resolve_engine("auto", need_entropies=True) == "transformers"
    assert engine_note("auto").startswith("auto → transformers here")
    assert "no" in engine_note("vllm") and "entropy" in engine_note("vllm")
    with pytest.raises(InputError, match="unknown engine"):
        resolve_engine("tensorrt")
    with pytest.raises(InputError, match="reports no entropies"):
        load_engine(DEMO_MODEL, engine="vllm", need_entropies=True)
    with pytest.raises(EngineUnavailable, match="vLLM engine needs"):
        VLLMEngine(DEMO_MODEL)
    assert load_engine(DEMO_MODEL, engine="auto", need_entropies=True).reports_entropies


def test_read_prompt_logprobs_takes_each_response_token_own_entry():
    """vLLM's prompt_logprobs: None at position 0, then per position a dict token id -> Logprob holding the
    position's own token (and, with prompt_logprobs=0, nothing else): the response starts at `start`."""
    entries = [
        None,
        {5: SimpleNamespace(logprob=-0.1)},
        {7: SimpleNamespace(logprob=-0.2), 3: SimpleNamespace(logprob=-9.0)},
        {3: SimpleNamespace(logprob=-0.3)},
    ]
    np.testing.assert_allclose(read_prompt_logprobs(entries, [7, 3], 2), [-0.2, -0.3])
    assert PROMPT_LOGPROB_ARGUMENTS["prompt_logprobs"] == 0 and PROMPT_LOGPROB_ARGUMENTS["temperature"] == 1.0
