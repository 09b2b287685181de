"""TRL's own tool loop on the tool-calling demo policy (sample_runs/demo-tool-policy, `backend.demo.chat`):
TRL accepts its chat format, and one real `GRPOTrainer(tools=[calculator])` step on CPU, recorded by
Credit Lens's recorder, gives records whose `loss_mask` is TRL's `tool_mask` and whose turns are TRL's
messages. When a TRL or transformers release breaks the bundled `agent-trl` run, the failing assertion
names the function whose behaviour changed."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from backend.demo.chat import RESPONSE_TEMPLATE, calculator, episode_messages, rendered_turns
from scripts.record_agent_trl import GENERATIONS, POLICY, trainer_for

pytest.importorskip("trl")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trl-tool-loop")]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer  # noqa: PLC0415 - heavy, only here

    return AutoTokenizer.from_pretrained(POLICY, local_files_only=True)


def test_trl_accepts_the_chat_format(tokenizer):
    from trl import __version__  # noqa: PLC0415 - optional: TRL
    from trl.chat_template_utils import (  # noqa: PLC0415 - optional: TRL
        is_chat_template_prefix_preserving,
        parse_response,
        supports_tool_calling,
    )

    where = f"(trl {__version__})"
    assert supports_tool_calling(tokenizer), (
        f"trl.chat_template_utils.supports_tool_calling refuses it {where}"
    )
    assert is_chat_template_prefix_preserving(tokenizer), (
        f"trl.chat_template_utils.is_chat_template_prefix_preserving refuses it {where}: GRPOTrainer would "
        "swap in get_training_chat_template, which raises for a template it does not know"
    )
    assert tokenizer.response_template == RESPONSE_TEMPLATE, (
        "save_pretrained no longer keeps response_template"
    )
    prompt, pieces = rendered_turns(tokenizer, episode_messages(47, 85), [calculator])
    assert prompt == "tools: calculator\n47+85=?\n>"
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"x": "7+5"}}}
    ids = tokenizer.encode(pieces[0][1], add_special_tokens=False)
    parsed = parse_response(tokenizer, ids, prefix=tokenizer.encode(prompt), tools=[calculator])
    assert parsed.get("tool_calls") == [call], f"trl.chat_template_utils.parse_response gave {parsed} {where}"
    # every marker is characters of the 99-token vocabulary: one token each, `<eos>` the end token
    text = prompt + "".join(piece for _, piece in pieces)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.unk_token_id not in ids and len(ids) == len(text) - 4 * text.count("<eos>")
    assert ids.count(tokenizer.eos_token_id) == text.count("<eos>") == 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """One GRPOTrainer step with tools (one prompt, GENERATIONS completions) recorded by the recorder; the
    output of TRL's `_generate_and_score_completions` and TRL's logged messages kept beside it."""
    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL

    base = tmp_path_factory.mktemp("tool-loop")
    trainer = trainer_for(base / "trainer", steps=1, prompts=1)
    recorder = lens_trl.record(trainer, base / "recorded", entropies=False)
    hooked, seen = trainer._generate_and_score_completions, []

    def keep(inputs):
        output = hooked(inputs)
        seen.append((output, list(trainer._logs["completion"])[-len(output["completion_ids"]) :]))
        return output

    trainer._generate_and_score_completions = keep
    trainer.train()
    recorder.close()
    ((output, messages),) = seen
    table = pq.read_table(recorder.files[0]).to_pylist()
    return {"output": output, "messages": messages, "rows": table, "tokenizer": trainer.processing_class}


def test_the_recorded_loss_mask_is_trls_tool_mask(trained):
    output, rows = trained["output"], trained["rows"]
    assert "tool_mask" in output, "GRPOTrainer._generate_and_score_completions no longer returns tool_mask"
    lengths = output["completion_mask"].sum(1).tolist()
    tool_mask = output["tool_mask"].tolist()
    assert len(rows) == len(lengths) == GENERATIONS
    for row, mask, n in zip(rows, tool_mask, lengths, strict=True):
        assert row["loss_mask"] == [int(m) for m in mask[:n]]
    assert sum(row["loss_mask"].count(0) for row in rows) > 0, "no tool was called: nothing to check"


def test_the_turns_are_trls_messages(trained):
    """Each recorded turn is one of TRL's messages, in order: an assistant turn per assistant message, a
    tool turn per tool message, whose tokens are the tool's answer as the chat template renders it."""
    tokenizer, compared = trained["tokenizer"], 0
    for row, messages in zip(trained["rows"], trained["messages"], strict=True):
        assert [t["role"] for t in row["turns"]] == [m["role"] for m in messages]
        for turn, message in zip(row["turns"], messages, strict=True):
            text = tokenizer.decode(row["token_ids"][turn["start"] : turn["end"]])
            if message["role"] == "tool":
                assert text == f"={message['content']}\n>"
                compared += 1
    assert compared >= GENERATIONS, "fewer tool calls than completions"


def test_the_tool_answers_the_call_before_it(trained):
    """TRL called the calculator with the arguments the response template parsed, or answered with its
    error for a tool name the policy misspelt (`_tool_call_loop`)."""
    for messages in trained["messages"]:
        for call, answer in zip(messages, messages[1:], strict=False):
            if answer["role"] == "tool":
                function = call["tool_calls"][0]["function"]
                if function["name"] == "calculator":
                    assert answer["content"] == calculator(**function["arguments"])
                else:
                    assert answer["content"] == str({"error": f"Tool {function['name']} not found."})
