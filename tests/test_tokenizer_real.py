"""Tokenizers of the real checkpoints (Gemma 3 270M: SentencePiece-style BPE; Qwen2.5-Coder-0.5B: byte-level BPE
with the qwen2 pre-tokenizer) against references made offline by tests/fixtures/make_tokenizer_reference.py
(transformers building the tokenizer from the same GGUF; for Gemma also the sentencepiece library), on a corpus
of several hundred strings; plus the SentencePiece algorithm on a small hand-made vocabulary. Pure CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cera_web.tools import assets
from cera_web.errors import GGUFFormatError
from cera_web.gguf import open_gguf
from cera_web.tokenizer import BYTE, CONTROL, NORMAL, USER_DEFINED, StreamDecoder, Tokenizer

FIXTURE = Path(__file__).parent / "fixtures" / "tokenizer_real.json"


@pytest.fixture(scope="module")
def reference():
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def real_tokenizer(name):
    path = assets.asset_path(name)
    if not assets.is_installed(name):
        pytest.skip(f"{path.name} is not fetched: python -m cera_web.tools.assets --models (tests/run.py does)")
    return Tokenizer.from_gguf(open_gguf(path))


@pytest.fixture(scope="module")
def gemma():
    return real_tokenizer("gemma3-270m")


@pytest.fixture(scope="module")
def qwen():
    return real_tokenizer("qwen2.5-coder-0.5b")


def test_gemma3_matches_transformers_except_whitespace_runs_longer_than_its_tokens(gemma, reference):
    ref = reference["models"]["gemma3-270m"]
    assert gemma.model == "llama" and gemma.add_bos and not gemma.add_space_prefix
    differ = [t for t, ids in zip(reference["corpus"], ref["ids"]) if gemma.encode(t) != ids]
    # transformers' GGUF conversion merges Gemma's user-defined whitespace tokens (up to 31 long) pairwise as BPE
    # pieces; SentencePiece and llama.cpp take the longest first (checked against sentencepiece below).
    assert differ == [" " * 40]
    assert gemma.encode(" " * 40) == [2, 167, 145]  # 31 + 9 spaces
    for text, ids, decoded in zip(reference["corpus"], ref["ids"], ref["decoded"]):
        assert gemma.decode(ids) == decoded, text


def test_gemma3_matches_sentencepiece_on_the_whole_corpus(gemma, reference):
    ref = reference["models"]["gemma3-270m"]
    assert len(reference["corpus"]) >= 400
    for text, ids in zip(reference["corpus"], ref["sentencepiece_ids"]):
        assert gemma.encode(text, add_special=False, parse_special=False) == ids, text


def test_gemma3_specials_bytes_and_streaming(gemma):
    turn = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    ids = gemma.encode(turn)
    assert ids[:2] == [2, 105] and gemma.decode(ids) == "<bos>" + turn
    assert gemma.token_to_id("<end_of_turn>") in gemma.eot_ids and 1 in gemma.eot_ids
    assert gemma.encode("\x00", add_special=False) == [gemma.token_to_id("<0x00>")]
    text = "naïve 日本語 🤗👍🏽\t\tx  y"
    ids = gemma.encode(text, add_special=False)
    dec = StreamDecoder(gemma)
    assert "".join(dec.push(i) for i in ids) + dec.flush() == text


def test_qwen25_matches_transformers_on_the_whole_corpus(qwen, reference):
    ref = reference["models"]["qwen2.5-coder-0.5b"]
    assert qwen.pre == "qwen2" and not qwen.add_bos
    for text, ids, decoded in zip(reference["corpus"], ref["ids"], ref["decoded"]):
        assert qwen.encode(text) == ids, text
        assert qwen.decode(ids) == decoded, text


# ----------------------------------------------------------------------------- the algorithm on a small vocabulary


def small_spm(**kw):
    tokens = ["<unk>", "<s>", "</s>", "<0x41>", "<0xC3>", "<0xA9>", "a", "b", "c", "▁", "ab", "bc", "cab",
              "▁a", "▁ab", "  ", "<t>"]
    scores = [0, 0, 0, 0, 0, 0, -1, -2, -3, -4, -10, -5, -20, -6, -30, 0, 0]
    types = [CONTROL, CONTROL, CONTROL, BYTE, BYTE, BYTE] + [NORMAL] * 9 + [USER_DEFINED, CONTROL]
    return Tokenizer(tokens, [], types, model="llama", scores=scores, bos_id=1, eos_id=2, unk_id=0, **kw)


def test_spm_merges_the_highest_score_first_then_falls_back_to_bytes():
    tok = small_spm()
    ids = lambda text, **k: [tok.id_to_token(i) for i in tok.encode(text, add_special=False, **k)]
    assert ids("abc") == ["a", "bc"]  # "bc" (-5) beats "ab" (-10); "a"+"bc" is no token
    assert ids("ab") == ["ab"]
    assert ids("ab ab") == ["ab", "▁ab"]
    assert ids("a  b") == ["a", "  ", "b"]  # user-defined, matched before merging
    assert ids("a▁▁b") == ["a", "  ", "b"]  # ... also when written as "▁▁", as SentencePiece matches it
    assert ids("é") == ["<0xC3>", "<0xA9>"]  # byte fallback
    assert ids("Ç") == ["<0xC3>", "<unk>"]  # 0x87 has no <0xNN> token
    assert ids("a<t>b") == ["a", "<t>", "b"]
    assert ids("A<t>", parse_special=False) == ["<0x41>", "<unk>", "<unk>", "<unk>"]
    assert tok.encode("ab") == [1, 10]  # BOS by default for SentencePiece models
    assert tok.decode(tok.encode("ab ab  é", add_special=False)) == "ab ab  é"
    pre = small_spm(add_space_prefix=True)
    assert [pre.id_to_token(i) for i in pre.encode("ab<t>a", add_special=False)] == ["▁ab", "<t>", "▁a"]


def test_spm_metadata_errors_are_clear():
    with pytest.raises(GGUFFormatError, match="tokenizer.ggml.scores is missing"):
        Tokenizer(["a"], [], model="llama", add_bos=False)
    with pytest.raises(GGUFFormatError, match="scores has 1 entries but tokenizer.ggml.tokens has 2"):
        Tokenizer(["a", "b"], [], model="llama", scores=[0.0], add_bos=False)
