"""Errors the command line turns into one line on stderr and exit code 2, and the one way a message shows
text taken from the input."""

from __future__ import annotations

import unicodedata


class InputError(ValueError):
    """Bad input: the message names the file, the line or record, and the field, and what would fix it."""


class StoreError(RuntimeError):
    """The store cannot do what was asked (unknown run, locked file, read-only directory)."""


def quoted(text: object) -> str:
    """Text from the input (a field, channel or column name, a column's type, a value) as a message shows it:
    repr-style, in quotes, with control characters escaped. A name such as "\\r" or an ANSI escape printed
    raw would split the one-line error in two or rewrite the terminal; quoted it reads '\\r'."""
    return repr(str(text))


def one_line(message: str) -> str:
    """`message` with every control character escaped as `quoted` escapes it: whatever a message embeds
    raw (a library's error text, a path), the command line still prints one line."""
    return "".join(
        repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in str(message)
    )


def named(text: object) -> str:
    """A name from the input in a summary line (the channels, metrics and meta columns an import made): as
    it is when it holds no control character, else `quoted`."""
    return quoted(text) if has_control(str(text)) else str(text)


def has_control(text: str) -> bool:
    """`text` holds a control character (a line break, a carriage return, an escape, NUL, ...)."""
    return any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)
