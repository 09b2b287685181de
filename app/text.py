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
