"""Registry contract, config validation, input errors, diagnostics and fallbacks."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from backend.core.batch import MODEL_SCORED, BatchError, model_score_needs
from backend.estimators import features, registry
from backend.estimators.reference import reference_advantages
from backend.estimators.tree import build_prefix_tree
from backend.estimators.values import fitted_values

from .helpers import random_batch

REQUIRED = [
    "grpo",
    "dr_grpo",
    "rloo",
    "terminal_gae",
    "recency",
    "early_late",
    "entropy",
    "high_entropy_mask",
    "step_boundary",
    "decaying_trace",
    "entropy_masked_trace",
    "entropy_mix",
    "gtpo",
    "gae",
    "prefix_tree",
    "suffix_mc",
    "token_rm",
    "rudder",
    "ktae",
    "stare",
    "entropy_gate",
    "entropy_drop_mask",
    "aggregation",
]
RENAMED = {
    "trace": "decaying_trace",
    "s_trace": "entropy_masked_trace",
    "hapo": "entropy_mix",
    "tepo_mask": "entropy_drop_mask",
}


def test_every_name_registered_with_frozen_config_and_schema():
    assert set(REQUIRED) <= set(registry.names())
    for name in registry.names():
        spec = registry.get(name)
        config = spec.config_cls()
        with pytest.raises(dataclasses.FrozenInstanceError):
            config.channel = "x"  # type: ignore[misc]
        schema = registry.config_schema(name)
        json.dumps(schema)
        assert schema["description"] and all(f["help"] for f in schema["fields"])


def test_register_twice_and_unknown_name():
    with pytest.raises(ValueError, match="already registered"):
        registry.register("grpo", registry.get("grpo").config_cls, "again")(lambda b, c: None)
    with pytest.raises(KeyError, match="known: .*grpo"):
        registry.get("nope")


@pytest.mark.parametrize(
    "name,key,value",
    [
        ("recency", "kappa", 1.5),
        ("grpo", "epsilon", -1.0),
        ("decaying_trace", "mode", "sideways"),
        ("gae", "value_source", "oracle"),
        ("aggregation", "mode", "sum"),
        ("entropy_mix", "alpha", float("nan")),
    ],
)
def test_bad_config_values_are_quoted(name, key, value):
    quoted = "nan" if value != value else repr(value)
    with pytest.raises(ValueError, match=quoted):
        registry.make_config(name, **{key: value})


def test_make_config_coerces_strings():
    config = registry.make_config("recency", kappa="0.5", then_gae="true", value_source="stored")
    assert config.kappa == 0.5 and config.then_gae is True


@pytest.mark.parametrize("field", ["entropies", "values", "logprobs"])
def test_nan_input_names_field_and_rollout(field):
    batch = random_batch(0)
    bad = getattr(batch, field).clone()
    bad[2, 0] = float("nan")
    batch = dataclasses.replace(batch, **{field: bad})
    with pytest.raises(BatchError, match=f"{field} of rollout {int(batch.rollout_ids[2])}"):
        registry.estimate("entropy", batch)


def test_nan_in_scores_and_inf_in_token_rewards():
    batch = random_batch(0)
    scores = dict(batch.scores)
    scores["task"] = scores["task"].clone()
    scores["task"][1] = float("inf")
    with pytest.raises(BatchError, match=r"scores\[task\] of rollout 101"):
        registry.estimate("grpo", dataclasses.replace(batch, scores=scores))


def test_missing_fields_are_clear():
    batch = dataclasses.replace(random_batch(0), entropies=None, values=None)
    with pytest.raises(BatchError, match="entropies"):
        registry.estimate("entropy", batch)
    with pytest.raises(BatchError, match="stored"):
        registry.estimate("gae", batch, value_source="stored")
    with pytest.raises(BatchError, match="no scores for channel 'safety'"):
        registry.estimate("grpo", batch, channel="safety")
    no_mc = random_batch(0, extras=False)
    with pytest.raises(BatchError, match="resample"):
        registry.estimate("suffix_mc", no_mc)


def test_uniform_fallback_is_reported():
    batch = random_batch(0, n_groups=2, singleton=False, flat_group=False)
    ent = batch.entropies.clone()
    ent[1] = 0.0
    res = registry.estimate("entropy", dataclasses.replace(batch, entropies=ent))
    assert res.diagnostics["fallback"].startswith("uniform fallback on rollouts [101]")
    row = res.advantages[1][batch.response_mask[1]]
    assert torch.allclose(row, res.diagnostics["Z"][1].expand_as(row))


def test_mc_value_fallback_message():
    batch = random_batch(2, extras=False)
    res = registry.estimate("gae", batch, value_source="mc")
    assert "no resampling results" in res.diagnostics["fallback"]
    batch = random_batch(2)
    mm = batch.extras["mc_mask"].clone()
    mm[0] = 0.0
    res = registry.estimate(
        "gae", dataclasses.replace(batch, extras={**batch.extras, "mc_mask": mm}), value_source="mc"
    )
    assert "rollouts [100" in res.diagnostics["fallback"]


def test_fitted_values_are_cross_fitted_by_group():
    batch = random_batch(4, n_groups=6, singleton=False, flat_group=False)
    z = registry.estimate("grpo", batch).diagnostics["Z"]
    v1, diag = fitted_values(batch, z, folds=3)
    assert diag["value_folds"] == 3
    own = batch.group_ids == batch.group_ids[0]
    z2 = torch.where(own, z * -5.0, z)  # change only the first group's outcomes
    v2, _ = fitted_values(batch, z2, folds=3)
    assert torch.equal(v1[own], v2[own])  # a group never informs its own values
    assert not torch.equal(v1[~own], v2[~own])


def test_fitted_values_from_hidden_states():
    batch = random_batch(5, n_groups=5, singleton=False)
    hidden = torch.randn(batch.B, batch.T, 6, generator=torch.Generator().manual_seed(0))
    batch = dataclasses.replace(batch, extras={**batch.extras, "hidden": hidden})
    res = registry.estimate("gae", batch, value_source="fitted")
    assert res.diagnostics["value_features"] == ["hidden"]
    assert res.diagnostics["values"][~batch.response_mask].abs().sum() == 0


def test_prefix_tree_nodes_describe_the_trie():
    batch = random_batch(1, n_groups=2, group_size=5, singleton=False, vocab=2)
    assert "tree" not in registry.estimate("prefix_tree", batch).diagnostics  # opt-in: ~4x the cost
    tree = registry.estimate("prefix_tree", batch, nodes=True).diagnostics["tree"]
    parent, depth = tree["parent"], tree["depth"]
    roots = parent < 0
    assert int(roots.sum()) == 2 and (depth[roots] == 0).all()
    assert (depth[~roots] == depth[parent[~roots]] + 1).all()
    tok = tree["token_node"]
    mask = batch.response_mask
    assert (tok[mask] >= 0).all() and (tok[~mask] == -1).all()
    # tokens with the same node share the whole prefix: same depth and the same group
    assert (tree["group"][tok[mask]] == batch.group_ids[:, None].expand_as(tok)[mask]).all()
    assert (tree["count"] >= 1).all()
    # the value of the root is the group mean of Z
    z = registry.estimate("grpo", batch).diagnostics["Z"]
    for gid in batch.group_ids.unique():
        root = ((tree["group"] == gid) & roots).nonzero()[0, 0]
        assert abs(tree["value"][root].item() - z[batch.group_ids == gid].mean().item()) < 1e-5


def test_prefix_tree_large_group_runs():
    gen = torch.Generator().manual_seed(0)
    G, T = 16, 4096
    tokens = torch.randint(0, 3, (G, T), generator=gen)
    tokens[:, :100] = 1  # a long shared stem
    mask = torch.ones(G, T, dtype=torch.bool)
    tree = build_prefix_tree(tokens, mask, torch.zeros(G, dtype=torch.long), torch.randn(G))
    assert tree.count_before[:, 0].eq(G).all() and tree.count_before[:, 99].eq(G).all()
    assert tree.branch[:, 100].any()


def test_estimator_inputs_unchanged():
    batch = random_batch(3)
    before = {k: v.clone() for k, v in batch.scores.items()}, batch.entropies.clone()
    for name in registry.names():
        registry.estimate(name, batch)
    assert all(
        torch.allclose(before[0][k], batch.scores[k], rtol=0, atol=0, equal_nan=True)  # NaN: missing
        for k in before[0]
    )
    assert torch.equal(before[1], batch.entropies)


def test_ridge_fit_degenerate_batch_and_unchanged_where_regular():
    # The hypothesis example that made torch.linalg.solve fail: two singleton groups, one token each.
    batch = random_batch(0, n_groups=2, group_size=1, max_len=1, vocab=1)
    for name in ("token_rm", "rudder", "gae"):
        res = registry.estimate(name, batch, ridge=0.0)
        assert torch.isfinite(res.advantages).all(), name
    # Where the penalized Gram matrix is regular, the fit is the ordinary ridge solution.
    gen = torch.Generator().manual_seed(0)
    X, y = torch.randn(200, 4, generator=gen), torch.randn(200, generator=gen)
    fold = torch.arange(200) % 3
    W, b = features.ridge_folds(X, y, fold, 3, 0.5)
    X64, y64 = X.double(), y.double()
    mu, sd = X64.mean(0), X64.std(0, unbiased=False)
    for j in range(3):
        keep = fold != j
        Xa = torch.cat([(X64[keep] - mu) / sd, torch.ones(int(keep.sum()), 1, dtype=torch.float64)], 1)
        pen = torch.diag(torch.tensor([0.5] * 4 + [1e-9], dtype=torch.float64))
        coef = torch.linalg.solve(Xa.T @ Xa + pen, Xa.T @ y64[keep])
        torch.testing.assert_close(W[j], (coef[:4] / sd).float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b[j], (coef[4] - (coef[:4] / sd * mu).sum()).float(), atol=1e-5, rtol=1e-5)


def _only(batch, fields):
    """`batch` stripped to the fields named (plus the mask, ids, scores), as a run that has nothing else."""
    full = {
        **{n: getattr(batch, n) for n in ("logprobs", "ref_logprobs", "entropies", "values", "tokens")},
        **batch.extras,
        "old_entropies": batch.entropies * 1.1,
    }
    plain = {
        n: (full[n] if n in fields else None)
        for n in ("logprobs", "ref_logprobs", "entropies", "values", "tokens")
    }
    extras = {n: full[n] for n in fields if n not in plain}
    return dataclasses.replace(batch, **plain, extras=extras)


@pytest.mark.parametrize("name", registry.names())
def test_needs_are_honest(name):
    """Declared needs (and each alternative of needs_one_of) suffice with the defaults; dropping any of
    them raises a BatchError; `supported` agrees."""
    spec = registry.get(name)
    batch = random_batch(3, n_groups=3, singleton=False, flat_group=False)
    sets = [tuple(spec.needs) + alt for alt in spec.needs_one_of] or [tuple(spec.needs)]
    for fields in sets:
        enough = _only(batch, set(fields))
        assert torch.isfinite(registry.estimate(name, enough).advantages).all()
        assert name in registry.supported(enough)
        for dropped in fields:
            lacking = _only(batch, set(fields) - {dropped})
            if spec.unmet(registry.available_fields(lacking)) is None:
                continue  # another alternative still holds
            with pytest.raises(BatchError):
                registry.estimate(name, lacking)
            assert name not in registry.supported(lacking)
    schema = registry.config_schema(name)
    assert schema["needs"] == list(spec.needs) and all(isinstance(n, str) for n in schema["needs"])


def test_needs_metadata():
    drop = registry.get("entropy_drop_mask")
    assert drop.needs == ("entropies", "old_entropies") and drop.model_free and not drop.needs_one_of
    assert registry.get("stare").needs == ("logprobs", "entropies")
    assert registry.get("suffix_mc").needs == registry.MC_NEEDS and not registry.get("suffix_mc").model_free
    assert {n for n in registry.names() if not registry.get(n).model_free} == {"suffix_mc", *MODEL_SCORED}
    for name in MODEL_SCORED:  # cached policy scores: the error names the command that fills them
        assert registry.get(name).needs == model_score_needs(name)
        bare = dataclasses.replace(random_batch(0), extras={})
        with pytest.raises(BatchError, match=f"creditlens model-credit .*--method {name}"):
            registry.estimate(name, bare)
    batch = random_batch(0)
    batch = dataclasses.replace(batch, extras={k: v for k, v in batch.extras.items() if k != "old_entropies"})
    with pytest.raises(BatchError, match="old_entropies"):  # never the logprob-vs-reference stand-in
        registry.estimate("entropy_drop_mask", batch)
    with pytest.raises(TypeError, match="needs_one_of"):
        registry.register("x_needs", registry.get("grpo").config_cls, "x", needs_one_of=((),))(lambda b, c: 0)


@pytest.mark.parametrize("old,new", sorted(RENAMED.items()))
def test_old_names_are_deprecated_aliases_with_the_same_results(old, new, capsys):
    registry._WARNED.discard(old)
    batch = random_batch(2)
    assert old not in registry.names() and registry.aliases()[old] == new
    assert registry.get(old).name == new  # the current estimator, not a copy kept under the old name
    assert f"use {new!r}" in capsys.readouterr().err  # one line on stderr, naming the new name
    registry.get(old)
    assert capsys.readouterr().err == ""  # once per process
    # A link or script with the old name and a parameter as text (`?trace.gamma=0.5`, `--set`) gets the
    # current estimator's config, and the result of the current estimator's loop twin (an implementation
    # of its own): an alias that reached another estimator, or dropped the parameter, would differ.
    field = next(f for f in registry.config_schema(new)["fields"] if f["type"] == "float" and f["high"])
    value = (
        (field["low"] + field["high"]) / 2
        if field["default"] != (field["low"] + field["high"]) / 2
        else field["high"]
    )
    config = registry.make_config(old, **{field["name"]: str(value)})
    assert config == registry.make_config(new, **{field["name"]: value}) != registry.make_config(new)
    torch.testing.assert_close(
        registry.estimate(old, batch, **{field["name"]: str(value)}).advantages,
        reference_advantages(new, batch, config),
        atol=2e-5,
        rtol=1e-4,
    )
    assert registry.config_hash(old, config) == registry.config_hash(new, config)  # one cache entry
    assert old in registry.config_schema(new)["aliases"]
