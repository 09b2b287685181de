"""Untrusted text (token text, run names, error messages) made safe for Streamlit markdown."""

from __future__ import annotations

import html


def plain(text: str) -> str:
    """Untrusted text for markdown: HTML-escaped and markdown/LaTeX control characters neutralized."""
    escaped = html.escape(str(text))
    for ch in "\\`*_{}[]()#+-.!|$~>":
        escaped = escaped.replace(ch, "\\" + ch)
    return escaped
