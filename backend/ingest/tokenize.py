"""Turning response text into token ids when a file has none.

With `--model DIR` the run's own Hugging Face tokenizer is used. Without one, Credit Lens falls back
to the documented *simple tokenization*: the text is cut into pieces matching
`\\s*\\w+|\\s*[^\\w\\s]|\\s+` (a word or one punctuation mark, with its leading whitespace), each
piece's id is `crc32(piece) & 0x7fffffff`. Equal pieces get equal ids, so group prefix trees still
work; the ids do not match any model's vocabulary, so model scoring needs real ids.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

from backend.errors import InputError

SIMPLE_PATTERN = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")


def simple_tokenize(text: str) -> tuple[list[int], list[str]]:
    pieces = SIMPLE_PATTERN.findall(text)
    return [zlib.crc32(p.encode("utf-8")) & 0x7FFFFFFF for p in pieces], pieces


class Tokenizer:
    """Either a local Hugging Face tokenizer (`model_dir`) or the simple fallback."""

    def __init__(self, model_dir: str | Path | None = None):
        self.model_dir = str(model_dir) if model_dir else None
        self.hf = None
        if model_dir is not None:
            path = Path(model_dir)
            if not path.is_dir():
                raise InputError(f"{model_dir}: --model must be a local Hugging Face folder")
            from transformers import AutoTokenizer

            try:
                self.hf = AutoTokenizer.from_pretrained(
                    str(path), local_files_only=True, trust_remote_code=False
                )
            except (OSError, ValueError) as exc:
                raise InputError(
                    f"{model_dir}: cannot load its tokenizer ({str(exc).splitlines()[0]})"
                ) from None

    @property
    def name(self) -> str:
        return f"hf:{self.model_dir}" if self.hf is not None else "simple"

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        if self.hf is None:
            return simple_tokenize(text)
        ids = self.hf(text, add_special_tokens=False)["input_ids"]
        return ids, self.display(ids)

    def display(self, ids: list[int]) -> list[str]:
        """Display text per token id (what the heatmap cells show)."""
        if self.hf is None:
            return [f"<{i}>" for i in ids]
        return [self.hf.decode([i]) for i in ids]
