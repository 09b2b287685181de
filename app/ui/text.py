"""Untrusted text (token text, run names, error messages) made safe for Streamlit markdown."""

from __future__ import annotations


def plain(text: str) -> str:
    """Untrusted text for markdown, shown as written: every markdown, LaTeX and HTML control character
    backslash-escaped (`\\<` is a literal `<` in CommonMark, so no tag can start; `\\&` no entity), never
    an HTML entity, which markdown would show as `&#x27;`."""
    escaped = str(text)
    for ch in "\\`*_{}[]()#+-.!|$~><&":  # the backslash first: later escapes are not escaped again
        escaped = escaped.replace(ch, "\\" + ch)
    return escaped


def with_code(text: str) -> str:
    """Untrusted text for markdown whose `backtick` spans show as code (a command, a field name): the text
    between them through `plain`, the spans as inline code (nothing inside a code span is markdown or
    HTML). Unpaired backticks: all of it through `plain`."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:
        return plain(text)
    return "".join(plain(p) if i % 2 == 0 else f"`{p}`" if p else "" for i, p in enumerate(parts))
