"""TransformersEngine on the bundled demo policy: determinism, padding, teacher forcing, safe loading."""

import json
import shutil

import numpy as np
import pytest
import torch

from backend.core.errors import InputError
from backend.models import load_engine, vllm_usable
from backend.models.loading import EngineUnavailable, check_model_dir
from backend.models.transformers_engine import draw
from tests.backend.models.conftest import DEMO_MODEL

PROMPTS = ["47+85=?\n", "147+285=?\n7+5=12 carry 1\n", "9+9=?\n"]


def encode_all(engine):
    return [engine.encode(p) for p in PROMPTS]


def test_same_seed_same_samples_other_seed_differs(engine):
    prefixes = encode_all(engine)
    a = engine.generate(prefixes, n=4, max_new_tokens=40, seed=11)
    b = engine.generate(prefixes, n=4, max_new_tokens=40, seed=11)
    c = engine.generate(prefixes, n=4, max_new_tokens=40, seed=12)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.logprobs for s in a] == [s.logprobs for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]
    assert [(s.prefix_index, s.sample_index, s.seed) for s in a[:5]] == [
        (0, 0, 11),
        (0, 1, 12),
        (0, 2, 13),
        (0, 3, 14),
        (1, 0, 15),
    ]


def test_a_left_padded_row_samples_what_it_samples_alone(engine):
    # The short prefix shares a batch with a long one (left padding); alone it has no padding.
    prefixes = encode_all(engine)
    batched = engine.generate(prefixes, n=3, max_new_tokens=48, seed=5)
    for s in batched:
        alone = engine.generate([prefixes[s.prefix_index]], n=1, max_new_tokens=48, seed=s.seed)[0]
        assert alone.token_ids == s.token_ids
        np.testing.assert_allclose(alone.logprobs, s.logprobs, atol=2e-5)


def test_teacher_forced_scores_match_sampling(engine):
    prefixes = encode_all(engine)
    samples = engine.generate(prefixes, n=4, max_new_tokens=48, seed=3)
    scored = engine.score(
        [prefixes[s.prefix_index] for s in samples],
        [s.token_ids for s in samples],
        chunk_size=5,
        return_hidden=True,
    )
    for s, sc in zip(samples, scored, strict=True):
        np.testing.assert_allclose(sc.logprobs, s.logprobs, atol=2e-5)
        np.testing.assert_allclose(sc.entropies, s.entropies, atol=2e-5)
        assert sc.hidden.shape == (len(s.token_ids), engine.config.n_embd)
    assert any(s.finished for s in samples)
    assert all(engine.eos_ids.isdisjoint(s.token_ids) for s in samples)


def test_samples_follow_the_task(engine):
    prefixes = encode_all(engine)[:1]
    texts = [engine.decode(s.token_ids) for s in engine.generate(prefixes, n=8, max_new_tokens=64, seed=0)]
    assert sum("####" in t for t in texts) >= 4, texts


def test_draw_greedy_top_p_and_inverse_cdf():
    logp = torch.log_softmax(torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 3), dim=-1)
    u = torch.tensor([0.0, 0.5, 0.999], dtype=torch.float64)
    assert draw(logp, u, temperature=0.0, top_p=1.0).tolist() == [0, 0, 0]
    assert draw(logp, u, temperature=1.0, top_p=0.01).tolist() == [0, 0, 0]  # nucleus of one token
    assert draw(logp, u, temperature=1.0, top_p=1.0).tolist() == [0, 0, 3]


def test_score_cancel_and_bounds(engine):
    prefixes = encode_all(engine)
    out = engine.score(prefixes, [[5, 6]] * 3, cancel=lambda: True)
    assert out == [None, None, None]
    with pytest.raises(InputError, match="the model takes"):
        engine.score([[5] * 200], [[5]])
    with pytest.raises(InputError, match="samples must be"):
        engine.generate(prefixes, n=0)


def test_pickle_weights_refused_unless_allowed(tmp_path, engine):
    folder = tmp_path / "pickled"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEMO_MODEL / name, folder / name)
    torch.save(engine.model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(InputError, match="pickle.*--allow-pickle"):
        load_engine(folder, engine="transformers")
    assert check_model_dir(folder, allow_pickle=True).use_safetensors is False


def test_only_local_folders_are_loaded(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_engine("openai-community/gpt2", engine="transformers")
    with pytest.raises(InputError, match="URL"):
        load_engine("https://huggingface.co/gpt2", engine="transformers")
    with pytest.raises(InputError, match="is a file"):
        load_engine(DEMO_MODEL / "config.json", engine="transformers")
    custom = tmp_path / "custom"
    custom.mkdir()
    config = json.loads((DEMO_MODEL / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Evil"}
    (custom / "config.json").write_text(json.dumps(config))
    shutil.copy(DEMO_MODEL / "model.safetensors", custom / "model.safetensors")
    with pytest.raises(InputError, match="custom code"):
        load_engine(custom, engine="transformers")
    with pytest.raises(InputError, match="unknown engine"):
        load_engine(DEMO_MODEL, engine="tensorrt")


@pytest.mark.skipif(vllm_usable(), reason="vLLM and a GPU are present")
def test_vllm_missing_is_a_clear_error():
    with pytest.raises(EngineUnavailable, match="vLLM engine needs"):
        load_engine(DEMO_MODEL, engine="vllm")
    assert load_engine(DEMO_MODEL, engine="auto", device="cpu").name == "transformers"
