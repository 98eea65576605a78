"""The server's streamed text: the pieces, joined, are the whole output decoded at once,
however the tokens arrive, while each update decodes only a short window."""
import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from engine.model.model import smollm2_dir
from engine.server.text import TextStream


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    return AutoTokenizer.from_pretrained(smollm2_dir())


def metaspace_tokenizer():
    """A SentencePiece-style tokenizer ("▁" for a space, dropped at the start of a decode),
    the kind Llama 2 and Mistral use: a window decoded alone loses its leading space."""
    words = ["▁the", "▁cat", "▁sat", "on", "▁mat", ".", "▁a", "b", "<s>"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<s>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>")


def streamed(tokenizer, ids, rng, stop=()):
    """The pieces TextStream sends when `ids` arrive in random-sized groups."""
    stream, pieces, i = TextStream(tokenizer, stop), [], 0
    while i < len(ids):
        n = rng.randint(1, 3)
        pieces.append(stream.add(ids[i:i + n], final=i + n >= len(ids)))
        i += n
    return pieces, stream


def test_pieces_join_to_the_whole_decode_with_split_characters(smollm2_tokenizer):
    tok = smollm2_tokenizer
    # CJK, accents and emoji take two or more byte-level tokens: halves arrive alone
    text = "Hello there, naïve café 你好世界 🙂🚀 and plain words, then more text. " * 3
    ids = tok.encode(text, add_special_tokens=False)
    rng = random.Random(0)
    for _ in range(20):
        pieces, _ = streamed(tok, ids, rng)
        assert "".join(pieces) == tok.decode(ids, skip_special_tokens=True)
        assert not any("\ufffd" in p for p in pieces)       # no half character is ever sent


def test_random_token_ids_join_to_the_whole_decode(smollm2_tokenizer):
    tok = smollm2_tokenizer
    rng = random.Random(1)
    for _ in range(30):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randint(1, 60))]
        pieces, _ = streamed(tok, ids, rng)
        assert "".join(pieces) == tok.decode(ids, skip_special_tokens=True)


def test_a_window_keeps_the_space_a_sentencepiece_decoder_drops_at_its_start():
    tok = metaspace_tokenizer()
    ids = tok.convert_tokens_to_ids(["▁the", "▁cat", "▁sat", "on", "▁the", "▁mat", ".", "▁a", "b"])
    whole = tok.decode(ids, skip_special_tokens=True)
    assert whole == "the cat saton the mat. ab"
    rng = random.Random(2)
    for _ in range(20):
        assert "".join(streamed(tok, ids, rng)[0]) == whole
    one_by_one = TextStream(tok)
    assert [one_by_one.add([i]) for i in ids] == ["the", " cat", " sat", "on", " the", " mat", ".", " a", "b"]


def test_stop_strings_end_the_text_before_them(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = tok.encode("one two three STOP four five", add_special_tokens=False)
    rng = random.Random(3)
    for _ in range(10):
        pieces, stream = streamed(tok, ids, rng, stop=("STOP",))
        assert "".join(pieces) == "one two three " and stream.stopped


def test_each_update_decodes_a_window_not_the_whole_output(smollm2_tokenizer):
    """The cost of an update must not grow with the output: 400 tokens in, each decode
    still sees only a few ids. (Decoding everything each time fails this.)"""
    tok = smollm2_tokenizer
    seen = []

    class Counting:
        def decode(self, ids, **kw):
            seen.append(len(ids))
            return tok.decode(ids, **kw)

    ids = tok.encode("word " * 400, add_special_tokens=False)
    stream = TextStream(Counting())
    for i in ids:
        stream.add([i])
    assert len(ids) >= 400 and max(seen) <= 4
