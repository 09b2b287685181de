"""Untrusted text (token text, run names, error messages) made safe for Streamlit markdown."""

from __future__ import annotations

import html

import streamlit as st

# A monospace block that keeps line breaks and wraps long lines, like st.code without its highlighter.
BLOCK_STYLE = (
    "font-family: 'Source Code Pro', monospace; font-size: 0.85rem; white-space: pre-wrap; "
    "overflow-wrap: anywhere; margin: 0 0 0.5rem; padding: 0.6rem 0.9rem; border-radius: 0.5rem; "
    "background: rgba(151, 166, 195, 0.12)"
)


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


def block_html(text: str) -> str:
    """Untrusted text as an HTML block that shows it as written (every `<`, `>`, `&` and quote escaped)."""
    return f'<pre class="cl-text-block" style="{BLOCK_STYLE}">{html.escape(str(text))}</pre>'


def text_block(text: str) -> None:
    """Show untrusted text (a prompt, a response, a derivation, a command line) as written, in monospace.

    Not st.code: that element loads Streamlit's syntax highlighter even with `language=None` and even inside
    a collapsed expander, about 0.7 s of the browser's CPU on a fresh page load (a CPU profile of a Rollout
    load, docs/benchmarks.md). st.html puts this block in the page itself (it also sanitizes what it is
    given)."""
    st.html(block_html(text))


def text_blocks(parts: list[tuple[str | None, str]]) -> None:
    """Several `text_block`s, each under its own bold title (None: none), as one element: a view that
    draws a dozen derivations sends and mounts one block, not a dozen (each element is a React subtree the
    browser builds on a fresh load; docs/benchmarks.md). Titles and texts are escaped."""
    st.html(
        "".join(
            ("" if title is None else f'<p style="margin: 0 0 0.25rem"><b>{html.escape(str(title))}</b></p>')
            + block_html(body)
            for title, body in parts
        )
    )
