"""Tiny causal LMs and character tokenizers built in code, for tests, examples and the CPU demo.

No hub can be reached on the machines this project targets, so every model and tokenizer the
project runs without a user checkpoint is built here, with the ecosystem's own classes
(`tokenizers` + `PreTrainedTokenizerFast`, `transformers.Qwen2Config`).

>>> tok = char_tokenizer("0123456789+=")          # doctest: +SKIP
>>> model = tiny_qwen2(tok, hidden_size=64)       # doctest: +SKIP
"""

from __future__ import annotations

import string
from typing import Any

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
# The first characters keep the ids they had when this was the whole alphabet; the rest of printable
# ASCII (and tab) follows, so text with [ ] ' # { } \ and the like no longer maps to <unk>.
_FIRST = string.digits + string.ascii_letters + " +-*/=().,:;?!\n"
DEFAULT_ALPHABET = _FIRST + "".join(ch for ch in string.printable if ch not in _FIRST and ch not in "\r\x0b\x0c")


def char_tokenizer(alphabet: str = DEFAULT_ALPHABET, *, model_max_length: int = 1024) -> Any:
    """A character-level ``PreTrainedTokenizerFast``: one token per character, plus pad/bos/eos/unk.

    Ids: pad, bos, eos, unk are 0-3, then ``alphabet`` in order (duplicates dropped). The default
    alphabet covers printable ASCII, tab and newline. The main job passes its task's own alphabet
    (:func:`costaware.experiments.policy.build_policy`), so its vocabulary does not depend on this
    default. Padding is on the left, as generation with a decoder-only model expects.

    >>> tok = char_tokenizer()                            # doctest: +SKIP
    >>> tok.decode(tok("a[1]#'{x}'")["input_ids"])        # doctest: +SKIP
    "a[1]#'{x}'"
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list(dict.fromkeys(alphabet))  # de-duplicated, order kept
    if not chars:
        raise ValueError("alphabet must not be empty")
    vocab = {t: i for i, t in enumerate([PAD, BOS, EOS, UNK, *chars])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        model_max_length=model_max_length,
    )
    return tok


def tiny_qwen2(
    tokenizer: Any,
    *,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 1024,
    seed: int = 0,
) -> Any:
    """A small randomly initialised Qwen2 causal LM whose vocabulary matches ``tokenizer``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def load_char_tokenizer(path: str) -> Any:
    """Load a tokenizer saved from :func:`char_tokenizer`.

    Use this, not ``AutoTokenizer``: next to a Qwen2 ``config.json``, transformers 5's
    ``AutoTokenizer`` picks ``Qwen2Tokenizer``, which swaps in its byte-level pre-tokenizer and
    silently drops spaces and newlines from a character vocabulary.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path)
