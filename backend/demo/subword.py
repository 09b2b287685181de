"""A subword-tokenized copy of the bundled demo run: a byte-level BPE trained here, offline, with the
`tokenizers` library on the demo responses, so views can be checked on tokens that are words and word
pieces ("␣carry", "14", "\\n##") rather than characters.

The records keep the demo run's prompts, groups, steps and rewards; token ids and display text come
from the trained tokenizer (each token decoded on its own, so the pieces join back to the response).
Per-token logprobs are not carried over: the demo's are per character.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

DEMO_RUN = Path(__file__).resolve().parents[2] / "sample_runs" / "demo_run.jsonl"


def train_byte_bpe(texts: list[str], vocab_size: int = 320) -> Tokenizer:
    """A byte-level BPE (GPT-2 style pre-tokenization) trained on `texts`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def subword_records(
    path: Path = DEMO_RUN, groups: int | None = None, long_response: int = 0, vocab_size: int = 320
) -> list[dict]:
    """The demo run's records re-tokenized with a byte-level BPE trained on its responses.

    groups: keep only the first N groups; long_response: if > 0, the first response of group 0 is the
    group's responses joined until it has at least that many tokens (a long response for windowing)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if groups is not None:
        records = [r for r in records if int(r["group"]) < groups]
    tok = train_byte_bpe([r["response"] for r in records], vocab_size)
    if long_response > 0 and records:
        texts = [r["response"] for r in records if r["group"] == records[0]["group"]]
        joined = ""
        while len(tok.encode(joined).ids) < long_response:
            joined += "\n".join(texts) + "\n"
        records[0] = {**records[0], "response": joined}
    out = []
    for r in records:
        ids = tok.encode(r["response"]).ids
        out.append(
            {
                "prompt": r["prompt"],
                "response": r["response"],
                "group": r["group"],
                "step": r.get("step", 0),
                "token_ids": ids,
                "tokens": [tok.decode([i]) for i in ids],
                "rewards": r["rewards"],
                "meta": r.get("meta", {}),
            }
        )
    return out
