"""The demo policy's chat format for TRL's tool loop: a chat template, a response template and the calculator.

What TRL 1.16's `GRPOTrainer(tools=[...])` asks of a tokenizer (read in `trl/trainer/grpo_trainer.py` and
`trl/chat_template_utils.py`):
- `supports_tool_calling`: the chat template renders user -> assistant (tool_calls) -> tool with the call's
  name, its argument key and value and the tool's content all in the text; else `__init__` raises "The
  provided chat template does not support tool calling".
- `is_chat_template_prefix_preserving`: a conversation's rendering is a prefix of the rendering with a tool
  message and the generation prompt added; else TRL swaps in `get_training_chat_template`, which knows only
  its own templates and raises for ours.
- a response template (`tokenizer.response_template`, transformers >= 5.13) for `parse_response`: TRL decodes
  each generated turn with it (`_generate`, `_tool_call_loop`) and calls the tools in its `tool_calls`;
  `add_response_schema` would raise "Unrecognized chat template" for a template it does not know, so the
  tokenizer carries its own (saved in tokenizer_config.json by `save_pretrained`).
- `_get_tool_suffix_ids`: a tool's tokens are the rendering with the tool message and the generation prompt
  minus the rendering up to the assistant's last EOS token; they are concatenated after the generated ids
  without re-tokenizing and get `tool_mask` 0. So an assistant turn ends with the EOS token.

The demo tokenizer is one token per character (`backend.demo.tokenizer`) and the policy has 160 positions,
so every marker is one or two characters of its vocabulary and nothing is added to it; `<eos>` is its
end-of-sequence token. A two-digit sum renders as (the generation prompt is `\\n>`; `|` marks where TRL cuts
the completion into assistant (trained) and tool (untrained) tokens):

    tools: calculator
    47+85=?
    >|@calculator x=7+5
    <eos>|=12
    >|@calculator x=4+8+1
    <eos>|=13
    >|#### 132<eos>
"""

from __future__ import annotations

import re

from backend.demo.task import worked_lines

# One line, newlines as expressions: transformers compiles templates with trim_blocks, which would eat a
# newline written after a block tag.
CHAT_TEMPLATE = (
    "{%- if tools %}tools:{% for tool in tools %} {{ (tool.function or tool).name }}{% endfor %}{{ '\\n' }}"
    "{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}>{{ message.content or '' }}"
    "{%- for call in message.tool_calls or [] %}@{{ call.function.name }}"
    "{%- if call.function.arguments is mapping %}"
    "{%- for key, value in call.function.arguments.items() %} {{ key }}={{ value }}{% endfor %}"
    "{%- else %} {{ call.function.arguments }}{% endif %}{{ '\\n' }}{% endfor %}{{ eos_token }}"
    "{%- elif message.role == 'tool' %}={{ message.content }}{{ '\\n' }}"
    "{%- else %}{{ message.content }}{{ '\\n' }}{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}>{% endif %}"
)
ASSISTANT_START = "\n>"
"""Where an assistant turn starts (the generation prompt after a user or tool line)."""
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": ASSISTANT_START,
    "fields": {
        "tool_calls": {
            "open_pattern": r"@(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
            "close_pattern": r"\n",
            "repeats": True,
            "content": "kv-lines",
            "content_args": {"line_sep": " ", "kv_sep": "="},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": r"<eos>", "content": "text"},
    },
}
"""transformers' response template (`utils/chat_parsing`): `@name key=value ...` up to the newline is a tool
call (kv-lines split on spaces), the rest up to `<eos>` is the content."""
SUM = re.compile(r"^\d+(?:\+\d+)*$")


def calculator(x: str = "") -> str:
    """Add up a sum of whole numbers.

    Args:
        x: the sum, such as 7+5+1
    """
    # A default and no exception: TRL would put the error's long text into the context of a 160-position model
    return str(sum(int(n) for n in x.split("+"))) if SUM.match(x.strip()) else "error"


def with_chat(tokenizer):
    """The tokenizer with the chat template and the response template set (both saved by save_pretrained)."""
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def episode_messages(a: int, b: int) -> list[dict]:
    """The worked tool-calling episode of `a+b=?`: a user message, one calculator call per column (carry
    added), each tool answer, and the answer turn `#### a+b`."""
    messages = [{"role": "user", "content": f"{a}+{b}=?"}]
    for line in worked_lines(a, b):
        terms = line.split("=")[0]
        call = {"type": "function", "function": {"name": "calculator", "arguments": {"x": terms}}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "name": "calculator", "content": calculator(terms)})
    messages.append({"role": "assistant", "content": f"#### {a + b}"})
    return messages


def rendered_turns(tokenizer, messages: list[dict], tools: list) -> tuple[str, list[tuple[str, str]]]:
    """The prompt (the first message with the generation prompt) and (role, text) per later message, cut as
    TRL's tool loop cuts: an assistant turn runs to its EOS, a tool turn holds the next generation prompt."""

    def render(n: int, generation: bool) -> str:
        return tokenizer.apply_chat_template(
            messages[:n], tools=tools, tokenize=False, add_generation_prompt=generation
        )

    prompt = render(1, True)
    done, pieces = prompt, []
    for k in range(1, len(messages)):
        role = messages[k]["role"]
        text = render(k + 1, role != "assistant")
        if not text.startswith(done):
            raise ValueError(f"the chat template is not prefix-preserving at message {k}")
        pieces.append((role, text[len(done) :]))
        done = text
    return prompt, pieces
