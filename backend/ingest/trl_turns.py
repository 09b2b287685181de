"""A TRL conversational completion with tool calls as an agent's turns: the logged messages
placed on tokens, with the turns and the loss mask they imply.

What TRL's log holds (TRL 1.16, `GRPOTrainer.log` writes `completions/completions_<step>.parquet` from
`self._logs`, which `_generate_and_score_completions` fills): per rollout `completion`, the message list
of the tool loop — the assistant's messages as `parse_response` decoded them (`{role, content,
tool_calls}`) and each tool's answer as `_tool_call_loop` appended it (`{role: "tool", name, content}`).
What it does not hold: the completion's token ids and the `tool_mask` TRL trained with (`_tool_call_loop`
builds both; neither is logged). So the tokens are made again from the messages: each message's text is
tokenized on its own and the pieces concatenated, as TRL concatenates the generated ids, the tool suffix
ids and the next generated ids without re-tokenizing. Every message then sits on whole tokens: `turns` are
their token spans and `loss_mask` is 1 on the assistant's tokens, 0 on the tools'.

A message's text: with `--model`'s chat template, the template's own rendering cut where TRL cuts (an
assistant turn ends at its EOS token; a tool turn also holds the next assistant header, as TRL's
`_get_tool_suffix_ids` renders tool messages with the generation prompt). Without a template, or with one
that rewrites earlier turns when a turn is added (TRL swaps such a template for its own training template,
`get_training_chat_template`, which is not reproduced here), the plain rendering: the assistant's content,
then each tool call as JSON on its own line; any other message as a `role: content` line. The tokens are
what this rendering tokenizes to, not necessarily TRL's ids.
"""

from __future__ import annotations

import json

from backend.core.turns import POLICY_ROLE, ROLES
from backend.ingest.tokenize import Tokenizer

PLAIN_NOTE = (
    "turns: tool-calling completions placed on tokens from their messages, rendered without a chat "
    "template (the assistant's content and its tool calls as JSON, `tool: content` lines); TRL's log has "
    "no token ids or tool_mask"
)
TEMPLATE_NOTE = (
    "turns: tool-calling completions placed on tokens from their messages, rendered with the chat "
    "template and cut where TRL cuts; TRL's log has no token ids or tool_mask, so the tokens are these, "
    "tokenized message by message"
)
REWRITING_NOTE = (
    "turns: the chat template rewrites earlier turns when a message is added (TRL's tool loop trains "
    "with its own training template then), so tool-calling completions were rendered without it"
)


def has_other_roles(messages: list[dict]) -> bool:
    """Whether a logged completion holds a message the policy did not write (a tool's answer)."""
    return any(m.get("role") != POLICY_ROLE for m in messages)


def _role(message: dict) -> str:
    role = str(message.get("role"))
    return role if role in ROLES else "environment"  # not the policy's, and no role Credit Lens names


def content_text(content: object) -> str:
    """A message's content as text (multimodal parts: their text; other values as JSON)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: their text
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def _plain_call(call: dict) -> str:
    """A tool call as `{"name": ..., "arguments": {...}}` (Parquet fills arguments a call lacks with
    null: those are left out)."""
    function = call.get("function") or {}
    call = {"name": function.get("name"), "arguments": _plain_args(function)}
    return json.dumps(call, ensure_ascii=False, default=str)


def plain_segments(messages: list[dict]) -> list[tuple[str, str]]:
    """(role, text) per message without a chat template."""
    segments = []
    for m in messages:
        role = _role(m)
        if role == POLICY_ROLE:
            calls = [_plain_call(c) for c in m.get("tool_calls") or [] if isinstance(c, dict)]
            text = content_text(m.get("content")) + "".join(f"\n{c}\n" for c in calls)
        else:
            text = f"{role}: {content_text(m.get('content'))}\n"
        segments.append((role, text))
    return segments


def _clean(message: dict) -> dict:
    """A message as the template reads it: the keys Parquet filled with null for other messages dropped."""
    out = {k: v for k, v in message.items() if v is not None}
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": _plain_args(c["function"])}}
            for c in out["tool_calls"]
            if isinstance(c, dict) and isinstance(c.get("function"), dict)
        ]
    return out


def _plain_args(function: dict) -> dict:
    return {k: v for k, v in (function.get("arguments") or {}).items() if v is not None}


def template_segments(hf, prompt: list[dict], messages: list[dict]) -> list[tuple[str, str]] | None:
    """(role, text) per message as the chat template renders the conversation, cut where TRL's tool loop
    cuts; None when the template rewrites what it rendered before (the renderings are not prefixes)."""
    prompt = [_clean(m) for m in prompt]
    messages = [_clean(m) for m in messages]

    def render(n: int, generation: bool) -> str:
        return hf.apply_chat_template(prompt + messages[:n], tokenize=False, add_generation_prompt=generation)

    texts = [render(0, True)]
    for k, m in enumerate(messages):
        after = messages[k + 1].get("role") if k + 1 < len(messages) else None
        # a tool's answer ends with the next assistant header, as TRL's tool suffix ids do
        texts.append(render(k + 1, m.get("role") != POLICY_ROLE and after == POLICY_ROLE))
        if not texts[-1].startswith(texts[-2]):
            return None
    full = texts[-1]
    ends = [len(t) for t in texts]
    eos = getattr(hf, "eos_token", None)
    for k, m in enumerate(messages):  # TRL generates up to the EOS; what the template adds after it is not
        piece = full[ends[k] : ends[k + 1]]
        if m.get("role") == POLICY_ROLE and eos and eos in piece:
            ends[k + 1] = ends[k] + piece.rindex(eos) + len(eos)
    return [(_role(m), full[ends[k] : ends[k + 1]]) for k, m in enumerate(messages)]


def completion_fields(prompt: object, messages: list[dict], tokenizer: Tokenizer) -> tuple[dict, str]:
    """The native fields of a tool-calling completion (response, token_ids, tokens, turns, loss_mask and
    `tokenized_with`, the tokenization) and the note that says how its messages were placed."""
    hf = tokenizer.hf
    segments, note = None, PLAIN_NOTE
    if hf is not None and getattr(hf, "chat_template", None) and isinstance(prompt, list):
        try:
            segments = template_segments(hf, prompt, messages)
        except Exception:  # noqa: BLE001 - a template that rejects these messages: the plain rendering
            segments = None
        note = TEMPLATE_NOTE if segments is not None else REWRITING_NOTE
    if segments is None:
        segments = plain_segments(messages)
    text, token_ids, tokens, turns = [], [], [], []
    for role, piece in segments:
        ids, labels = tokenizer.encode(piece) if piece else ([], [])
        if not ids:
            continue
        turns.append({"role": role, "start": len(token_ids), "end": len(token_ids) + len(ids)})
        text.append(piece)
        token_ids += ids
        tokens += labels
    mask = [0] * len(token_ids)
    for turn in turns:
        if turn["role"] == POLICY_ROLE:
            mask[turn["start"] : turn["end"]] = [1] * (turn["end"] - turn["start"])
    fields = {
        "response": "".join(text),
        "token_ids": token_ids,
        "tokens": tokens,
        "turns": turns,
        "loss_mask": mask,
        "tokenized_with": tokenizer.name,
    }
    return fields, note
