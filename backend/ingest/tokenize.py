"""Turning response text into token ids when a file has none, and token ids into display labels.

With `--model DIR` the run's own Hugging Face tokenizer is used. Without one, Credit Lens falls back
to the documented *simple tokenization*: the text is cut into pieces matching
`\\s*\\w+|\\s*[^\\w\\s]|\\s+` (a word or one punctuation mark, with its leading whitespace), each
piece's id is `crc32(piece) & 0x7fffffff`. Equal pieces get equal ids, so group prefix trees still
work; the ids do not match any model's vocabulary, so model scoring needs real ids.

Token labels (what a heatmap cell shows) come from `token_labels`. Byte-level BPE vocabularies (GPT-2,
Llama 3, Qwen) and byte-fallback vocabularies (`<0xE4>` pieces) split characters outside ASCII across
tokens, and decoding such a token alone gives `\ufffd`. The rule: a character is shown by the token
that completes it (so `中` split as E4 B8 | AD labels the second token `中`); a token all of whose
bytes belong to a character completed later is labelled `·`; bytes that never complete a character
(a response cut mid-character, invalid UTF-8) are shown as `<0xE4>` on the token that holds them.
An id outside the tokenizer's vocabulary is labelled `<id>`, as without a tokenizer.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from pathlib import Path

from tokenizers import decoders

from backend.core.errors import InputError

SIMPLE_PATTERN = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")
CONTINUATION = "\u00b7"  # `·`: the label of a token whose bytes a later token's character completes
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


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
            from transformers import AutoTokenizer  # noqa: PLC0415 - heavy (~2 s); only with --model

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
        """Display text per token id (what the heatmap cells show); see `token_labels`."""
        if self.hf is None:
            return [f"<{i}>" for i in ids]
        return token_labels(self.hf, ids)


def _byte_level_alphabet() -> dict[str, int]:
    """The printable stand-in character of each byte in byte-level BPE vocabularies -> the byte.

    Bytes that are printable Latin-1 stand for themselves; the others (controls, space, a few
    Latin-1 gaps) are shifted to code points 256, 257, ... in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


_BYTE_LEVEL = _byte_level_alphabet()


def _token_bytes_fn(hf):
    """A function id -> the token's bytes for vocabularies that store bytes, else None.

    None (per id, or for the whole tokenizer) means the token is whole characters and its label is
    the tokenizer's own decoding of it: added/special tokens, WordLevel or SentencePiece pieces."""
    backend = getattr(hf, "backend_tokenizer", None)
    byte_level = backend is not None and isinstance(backend.decoder, decoders.ByteLevel)
    added = set(getattr(hf, "added_tokens_decoder", {}) or {})

    def token_bytes(token_id: int) -> bytes | None:
        if token_id in added:
            return None
        piece = hf.convert_ids_to_tokens(token_id)
        if not isinstance(piece, str):
            return None
        if byte_level:
            if all(ch in _BYTE_LEVEL for ch in piece):
                return bytes(_BYTE_LEVEL[ch] for ch in piece)
            return None
        byte = _BYTE_PIECE.fullmatch(piece)
        return bytes([int(byte.group(1), 16)]) if byte else None

    return token_bytes


def token_labels(hf, ids: Sequence[int], skip_special_tokens: bool = False) -> list[str]:
    """One readable label per token id (the rule is in the module docstring; no space clean-up).

    `hf`: a Hugging Face tokenizer. Tokens that are whole characters keep `hf.decode([id])`; tokens
    holding raw bytes are labelled by walking the bytes with one pending buffer of an unfinished
    character, each byte remembering the token it came from."""
    token_bytes = _token_bytes_fn(hf)
    labels: list[str] = []
    pending: list[tuple[int, int]] = []  # (byte, index of the token holding it) of an unfinished char

    def show_bytes(held: list[tuple[int, int]]) -> None:
        for byte, owner in held:
            labels[owner] = (labels[owner] if labels[owner] != CONTINUATION else "") + f"<0x{byte:02X}>"

    def give_up_pending() -> None:
        show_bytes(pending)
        pending.clear()

    vocab_size = len(hf)
    for k, token_id in enumerate(ids):
        if not 0 <= int(token_id) < vocab_size:  # not in this vocabulary: the id itself, as without a model
            give_up_pending()
            labels.append(f"<{int(token_id)}>")
            continue
        raw = token_bytes(int(token_id))
        if raw is None:
            give_up_pending()
            labels.append(
                hf.decode(
                    [int(token_id)],
                    skip_special_tokens=skip_special_tokens,
                    clean_up_tokenization_spaces=False,
                )
            )
            continue
        labels.append("")
        stream = pending + [(b, k) for b in raw]
        pending = []
        data = bytes(b for b, _ in stream)
        start = 0
        while start < len(data):
            try:
                text = data[start:].decode("utf-8")
            except UnicodeDecodeError as exc:
                text = data[start : start + exc.start].decode("utf-8")
                labels[k] += text
                bad_from, bad_to = start + exc.start, start + exc.end
                if exc.reason == "unexpected end of data":  # an unfinished character: wait for more bytes
                    pending = stream[bad_from:]
                    break
                show_bytes(stream[bad_from:bad_to])  # bytes that can never form a character
                start = bad_to
                continue
            labels[k] += text
            break
        if not labels[k] and pending and any(owner == k for _, owner in pending):
            labels[k] = CONTINUATION
    give_up_pending()
    return labels
