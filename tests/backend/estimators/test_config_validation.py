"""No `--set` value and no app input produces a traceback: every schema field, walked with bad values,
either builds a valid config or raises ValueError quoting the value (the CLI's exit 2)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.core.batch import RolloutBatch
from backend.estimators import registry


def fields() -> list[tuple[str, dict]]:
    return [(name, f) for name in registry.names() for f in registry.config_schema(name)["fields"]]


def bad_values(f: dict) -> list[str]:
    out = ["", "not-a-value", "nan", "inf", "-inf", "1e999", "None"]
    if f["low"] is not None:
        out.append(repr(f["low"] - 1))
    if f["high"] is not None:
        out.append(repr(f["high"] + 1))
    return out


@pytest.mark.parametrize("name, field", fields(), ids=lambda x: x if isinstance(x, str) else x["name"])
def test_bad_values_raise_value_error_naming_the_field(name, field):
    for value in bad_values(field):
        try:
            config = registry.make_config(name, **{field["name"]: value})
        except ValueError as exc:
            assert field["name"] in str(exc), (name, value, str(exc))
            continue
        # Accepted: then it is a valid value of the field's kind (a string field, a None-able field).
        assert dataclasses.is_dataclass(config)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(fields()), st.text(max_size=12))
def test_any_text_builds_or_raises_value_error(item, text):
    name, field = item
    try:
        registry.make_config(name, **{field["name"]: text})
    except ValueError:
        pass


def test_regex_and_base_fields_are_checked_when_built():
    with pytest.raises(ValueError, match="not a regular expression"):
        registry.make_config("step_boundary", pattern="(")
    with pytest.raises(ValueError, match="not a modifier"):
        registry.make_config("stare", base="aggregation")
    with pytest.raises(ValueError, match="not a modifier"):
        registry.make_config("aggregation", base="nope")


def test_register_requires_a_config_subclass():
    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int = 1

    with pytest.raises(TypeError, match="registry.Config"):
        registry.register("__test_plain", Plain, "not a Config")(lambda batch, config: None)
    assert "__test_plain" not in registry.names()


def test_estimate_rejects_nonzero_padding():
    @dataclasses.dataclass(frozen=True)
    class LeakyConfig(registry.Config):
        pass

    def leaky(batch, config):
        return registry.EstimatorResult(torch.ones(batch.response_mask.shape))

    registry.register("__test_leaky", LeakyConfig, "writes on padding")(leaky)
    try:
        mask = torch.tensor([[True, True], [True, False]])
        batch = RolloutBatch(
            response_mask=mask,
            token_ids=torch.zeros((2, 2), dtype=torch.long),
            group_ids=torch.zeros(2, dtype=torch.long),
            rollout_ids=torch.arange(2),
            steps=torch.zeros(2, dtype=torch.long),
            scores={"task": torch.tensor([0.0, 1.0])},
        )
        with pytest.raises(RuntimeError, match="padding"):
            registry.estimate("__test_leaky", batch)
    finally:
        registry._REGISTRY.pop("__test_leaky")
