"""TRL conversational logs of a tool-calling run -> turns and loss mask (issue 44 item 1).

The fixture is written the way TRL 1.16 writes it: `GRPOTrainer.log` builds
`{"step", "prompt", "completion", <reward function>..., "advantage"}` from `self._logs` and calls
`pd.DataFrame(table).to_parquet(<output_dir>/completions/completions_<step:05d>.parquet)`; a tool-calling
completion is the message list `_tool_call_loop` builds: the assistant's `parse_response` dicts
(`{role, content, tool_calls: [{type: "function", function: {name, arguments}}]}`) and after each call
`{"role": "tool", "name": name, "content": str(result)}` (trl/trainer/grpo_trainer.py in that release).
The log holds no token ids and no `tool_mask`, so the importer tokenizes message by message.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from backend.ingest import import_path
from backend.ingest.tokenize import Tokenizer
from backend.ingest.trl_turns import completion_fields
from backend.store import Store
from tests.backend.ingest.trl_logs import DEMO_POLICY

# ChatML-like, with tool calls, prefix-preserving (TRL's tool loop requires that); `<eos>` is the demo
# tokenizer's EOS token, so an assistant turn ends with it as TRL's generated ids do.
TOOL_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] or '' }}"
    "{% for c in m.get('tool_calls') or [] %}<call>{{ c['function']['name'] }} "
    "{{ c['function']['arguments'] | tojson }}</call>{% endfor %}<eos>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _rollout(a: int, b: int, answer: int) -> list[dict]:
    """One completion of TRL's tool loop: a call, the tool's answer, the final answer."""
    return [
        {"role": "assistant", "content": "Let me add.", "tool_calls": [_call("add", a=a, b=b)]},
        {"role": "tool", "name": "add", "content": str(a + b)},
        {"role": "assistant", "content": f"It is {answer}."},
    ]


def write_tool_log(output_dir: Path) -> Path:
    """Two steps of a tool-calling run's completion log, as TRL's `GRPOTrainer.log` writes them."""
    (output_dir / "completions").mkdir(parents=True)
    for step in (1, 2):
        prompts = [[{"role": "user", "content": f"{3 * step}+4=?"}]] * 2 + [
            [{"role": "user", "content": "hi"}]
        ] * 2
        completions = [
            _rollout(3 * step, 4, 3 * step + 4),
            _rollout(3 * step, 4, 99),
            [{"role": "assistant", "content": "hello"}],  # no tool call: one assistant message
            [
                {"role": "assistant", "content": "hey", "tool_calls": [_call("add", a=1, b=1)]},
                {"role": "tool", "name": "add", "content": "2"},
            ],  # the loop stopped after the tool's answer
        ]
        table = {
            "step": [step] * len(prompts),
            "prompt": prompts,
            "completion": completions,
            "correct": [1.0, 0.0, 0.0, 1.0],
            "advantage": [0.7, -0.7, -0.7, 0.7],
        }
        pd.DataFrame(table).to_parquet(
            os.path.join(output_dir, "completions", f"completions_{step:05d}.parquet")
        )
    return output_dir / "completions"


@pytest.fixture
def tool_log(tmp_path) -> Path:
    return write_tool_log(tmp_path / "run")


def _model(tmp_path: Path, chat_template: str) -> Path:
    """The demo policy's tokenizer with `chat_template`, saved as a model folder for --model."""
    from transformers import AutoTokenizer  # noqa: PLC0415 - heavy, only here

    tokenizer = AutoTokenizer.from_pretrained(DEMO_POLICY, local_files_only=True)
    tokenizer.chat_template = chat_template
    folder = tmp_path / "model"
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def template_model(tmp_path) -> Path:
    return _model(tmp_path, TOOL_TEMPLATE)


def _turn_texts(row: dict) -> list[tuple[str, str]]:
    return [(t["role"], "".join(row["tokens"][t["start"] : t["end"]])) for t in row["turns"]]


def test_tool_calls_become_turns_without_a_template(tool_log, tmp_path):
    with Store(tmp_path / "runs.duckdb") as store:
        summary = import_path(store, tool_log, "tools", fmt="trl")
        assert summary.tokenization == "simple"
        assert any(
            "placed on tokens from their messages, rendered without a chat template" in n
            for n in summary.notes
        )
        row = store.rollout("tools", 0)
        assert _turn_texts(row) == [
            ("assistant", 'Let me add.\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n'),
            ("tool", "tool: 7\n"),
            ("assistant", "It is 7."),
        ]
        assert row["response"] == "".join(text for _, text in _turn_texts(row))
        first, tool, last = row["turns"]
        assert row["loss_mask"] == [1] * first["end"] + [0] * (tool["end"] - tool["start"]) + [1] * (
            last["end"] - last["start"]
        )
        assert [r for r, _ in _turn_texts(store.rollout("tools", 3))] == ["assistant", "tool"]
        plain = store.rollout("tools", 2)  # one assistant message: the response is its content, no turns
        assert plain["response"] == "hello" and plain["turns"] is None and plain["loss_mask"] is None
        batch = store.load_batch("tools")
        assert int((batch.response_mask & ~batch.loss_mask).sum()) == sum(
            t["end"] - t["start"]
            for i in range(8)
            for t in (store.rollout("tools", i)["turns"] or [])
            if t["role"] == "tool"
        )


def test_with_a_chat_template_the_tool_turn_is_trls_tool_suffix(tool_log, template_model, tmp_path):
    """With --model's chat template, each assistant turn ends at its EOS and the tool turn is the text of
    the ids TRL's `_get_tool_suffix_ids` makes (the ids its tool_mask sets to 0), run here on the same
    tokenizer: the official function, on a minimal trainer holding what it reads."""
    from transformers import AutoTokenizer  # noqa: PLC0415 - heavy, only here
    from trl import GRPOTrainer  # noqa: PLC0415 - heavy, only here

    hf = AutoTokenizer.from_pretrained(template_model, local_files_only=True)
    trainer = SimpleNamespace(
        processing_class=hf, _tokenizer=hf, chat_template=None, chat_template_kwargs={}, _is_vlm=False
    )
    with Store(tmp_path / "runs.duckdb") as store:
        summary = import_path(store, tool_log, "tools", fmt="trl", model_dir=str(template_model))
        assert any("rendered with the chat template and cut where TRL cuts" in n for n in summary.notes)
        row = store.rollout("tools", 0)
        tool_message = [{"role": "tool", "name": "add", "content": "7"}]
        suffix = GRPOTrainer._get_tool_suffix_ids(trainer, tool_message)
        first, tool, last = row["turns"]
        assert [first["role"], tool["role"], last["role"]] == ["assistant", "tool", "assistant"]
        assert row["token_ids"][tool["start"] : tool["end"]] == suffix
        assert _turn_texts(row) == [
            ("assistant", 'Let me add.<call>add {"a": 3, "b": 4}</call><eos>'),
            ("tool", "\n<|tool|>\n7<eos>\n<|assistant|>\n"),
            ("assistant", "It is 7.<eos>"),
        ]
        assert row["prompt"] == "<|user|>\n3+4=?<eos>\n<|assistant|>\n"  # the turns go on where it ends
        assert sum(row["loss_mask"]) == first["end"] + last["end"] - last["start"]


def test_a_template_that_rewrites_history_falls_back_to_the_plain_rendering(tmp_path):
    """A template that renders an earlier turn differently once another follows (as Qwen3's drops earlier
    reasoning) is not prefix-preserving, so it cannot be cut where TRL cuts: the plain rendering, with a
    note that says why."""
    rewriting = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] if loop.last else '...' }}<eos>\n"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    tokenizer = Tokenizer(_model(tmp_path, rewriting))
    fields, note = completion_fields([{"role": "user", "content": "q"}], _rollout(1, 2, 3), tokenizer)
    assert "rewrites earlier turns" in note
    assert [t["role"] for t in fields["turns"]] == ["assistant", "tool", "assistant"]
    assert (
        fields["response"] == 'Let me add.\n{"name": "add", "arguments": {"a": 1, "b": 2}}\ntool: 3\nIt is 3.'
    )
