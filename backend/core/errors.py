"""Errors the command line turns into one line on stderr and exit code 2."""


class InputError(ValueError):
    """Bad input: the message names the file, the line or record, and the field, and what would fix it."""


class StoreError(RuntimeError):
    """The store cannot do what was asked (unknown run, locked file, read-only directory)."""
