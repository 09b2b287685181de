"""A character-level tokenizer for the demo policy, saved in the Hugging Face format.

One token per character (printable ASCII and the newline), plus `<pad>`, `<eos>` and `<unk>`. It is
a `tokenizers` WordLevel model behind a `PreTrainedTokenizerFast`, so `AutoTokenizer` loads it from
the model folder offline. `padding_side="left"` is passed to the constructor because setting the
attribute afterwards is not saved.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ("<pad>", "<eos>", "<unk>")
CHARACTERS = "\n" + "".join(chr(c) for c in range(32, 127))


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS + tuple(CHARACTERS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Every character, newline and space included, is its own pre-token; Fuse joins them back unspaced.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=160,
    )
