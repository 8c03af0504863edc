"""Tokenizers built from GGUF metadata: byte-level BPE (`tokenizer.ggml.model == "gpt2"`) and
SentencePiece-style BPE (`"llama"`, e.g. Gemma 3).

Encoding a string, in order (lone UTF-16 surrogates, which UTF-8 cannot carry, first become U+FFFD, as a
browser's TextEncoder does):
1. split out special tokens written in the text (control tokens only when `parse_special`;
   user-defined tokens always), leftmost match first and, among matches starting at the same place,
   the longest one;
2. pre-tokenize each ordinary stretch with the model's regex stages (`tokenizer.ggml.pre`): each
   stage splits every piece of the previous stage into its matches and the gaps between them;
3. map each piece's UTF-8 bytes to the GPT-2 "byte-level" alphabet (256 printable characters);
4. apply BPE merges to each piece: repeatedly merge the adjacent pair with the lowest merge rank
   (leftmost on ties), then look the symbols up in the vocabulary. Results are cached per piece.

Metadata of the wrong kind (a token that is not a string, an id that is not an integer, ...) is a GGUFFormatError
naming the key; ids passed to decode() that are not integers in the vocabulary are an InputError.

Decoding maps normal tokens back through the byte-level alphabet to bytes and then to UTF-8 text;
control / user-defined tokens decode to their own text (control ones can be skipped).

Pre-tokenizers (names as llama.cpp's `tokenizer.ggml.pre`, aliases grouped as llama.cpp groups them):
- gpt2 style: GPT-2's regex. "default" and a missing `tokenizer.ggml.pre` map here too (note:
  llama.cpp uses a different fallback regex set for "default"; GGUF converters do not write it for
  current models, and GPT-2 splitting is what byte-level BPE vocabularies were trained with).
- smollm style (also starcoder, refact, codeshell, command-r, exaone, minerva-7b): every number
  character is split off on its own first (`\\p{N}`, like HF `Digits(individual_digits=True)`),
  then GPT-2's regex runs on each remaining piece.
- llama3 style (llama-bpe, llama3, llama-v3, falcon3, pixtral, lfm2): the Llama 3 regex (numbers in
  groups of up to 3 digits); a piece that is already a whole vocabulary token skips the merges
  (`ignore_merges`), and BOS is added by default. llama.cpp maps "lfm2" to exactly this.
  "dbrx" and "smaug-bpe" use the same regex without those two defaults.
- qwen2 style (qwen2, deepseek-r1-qwen, stablelm2, megrez): the Llama 3 regex with single digits.
Not supported: WordPiece, Unigram and other `tokenizer.ggml.model` values, and pre-tokenizers with
hand-made character ranges (deepseek-llm, deepseek-coder, ...).

SentencePiece-style BPE (`tokenizer.ggml.model == "llama"`: tokens, `tokenizer.ggml.scores`, no merges) first
turns every space into "▁" (as SentencePiece's normalizer does, so a user-defined token of spaces also matches a
written "▁▁"), splits out special tokens as in step 1 (Gemma's user-defined tokens include runs of up to 31
spaces, tabs and newlines and some HTML tags; leftmost-longest), then encodes each ordinary stretch without
pre-tokenization ("▁" is put in front of a stretch that starts the text or follows a special token when
`tokenizer.ggml.add_space_prefix`): the stretch starts as one
symbol per character, and the adjacent pair whose concatenation is a normal or user-defined token with the
highest score is merged (leftmost on ties) until no pair is a token. A symbol left that is no token (a character
outside the vocabulary) becomes its UTF-8 bytes as `<0xNN>` tokens. Decoding maps "▁" back to a space and
`<0xNN>` tokens to their byte.

Regexes run on the third-party `regex` module when it is importable, otherwise on the stdlib `re`
module through exact translations of `\\p{L}`, `\\p{N}` and `\\s` (see unicode_classes.py). Both
treat `\\s` as Unicode White_Space, like HF `tokenizers` and llama.cpp.
"""

from __future__ import annotations

import codecs
import functools
import heapq
import operator
import re

from .errors import GGUFFormatError, InputError, UnsupportedModelError
from .unicode_classes import translate

__all__ = ["Tokenizer", "StreamDecoder", "PRE_TOKENIZERS", "EOG_TEXTS"]

# GGUF token types (tokenizer.ggml.token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# --- pre-tokenizer regexes (the tokenizers / tokenizer.json dialect) -----------------------------
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
DIGIT_PATTERN = r"\p{N}"


class _PreSpec:
    """How one family of pre-tokenizers splits text, plus the defaults llama.cpp gives it."""

    def __init__(self, stages, ignore_merges=False, add_bos=False):
        self.stages = stages  # regex patterns, applied one after another
        self.ignore_merges = ignore_merges  # a piece that is a whole token skips BPE
        self.add_bos = add_bos  # default when the GGUF has no tokenizer.ggml.add_bos_token


_GPT2 = _PreSpec((GPT2_PATTERN,))
_SMOLLM = _PreSpec((DIGIT_PATTERN, GPT2_PATTERN))
_LLAMA3 = _PreSpec((LLAMA3_PATTERN,), ignore_merges=True, add_bos=True)
_LLAMA3_PLAIN = _PreSpec((LLAMA3_PATTERN,))
_QWEN2 = _PreSpec((QWEN2_PATTERN,))

PRE_TOKENIZERS: dict[str, _PreSpec] = {}
for _names, _spec in (
    (("gpt2", "gpt-2", "default", "mpt", "olmo", "phi-2"), _GPT2),
    (("smollm", "starcoder", "refact", "codeshell", "command-r", "exaone", "minerva-7b"), _SMOLLM),
    (("llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral", "lfm2"), _LLAMA3),
    (("dbrx", "smaug-bpe"), _LLAMA3_PLAIN),
    (("qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"), _QWEN2),
):
    for _name in _names:
        PRE_TOKENIZERS[_name] = _spec

# Token texts that end a turn or a generation, besides EOS (the texts llama.cpp looks for).
EOG_TEXTS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>",
             "<|end_of_text|>", "<EOT>", "<end_of_utterance>", "<｜end▁of▁sentence｜>")


def _byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character map: printable Latin-1 bytes stand for themselves,
    the other 68 bytes (controls, space, DEL, NBSP, soft hyphen) take U+0100 onwards in order."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(0x100 + extra))
            extra += 1
    return out


BYTE_TO_CHAR = _byte_alphabet()
CHAR_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
# str.translate table: the Latin-1 decoding of a byte (a code point < 256) -> its alphabet character
_LATIN1_TO_ALPHABET = {b: c for b, c in enumerate(BYTE_TO_CHAR)}


def _have_regex_module() -> bool:
    try:
        import regex  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=32)
def _compile(pattern: str, engine: str):
    if engine == "regex":
        import regex
        return regex.compile(translate(pattern, keep_properties=True))
    return re.compile(translate(pattern))


@functools.lru_cache(maxsize=256)
def _special_regex(texts: tuple[str, ...]):
    # Alternation tries alternatives in order, so longest first gives leftmost-longest matching.
    return re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))


def _meta_list(value, key: str = "tokenizer metadata") -> list:
    if hasattr(value, "tolist"):  # numpy array
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise GGUFFormatError(f"{key} should be an array, found {_describe(value)}; the model file is corrupt")
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]


def _meta_str(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _describe(value) -> str:
    """A short description of a metadata value of the wrong kind, for error messages."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _check_items(items: list, kind: type, key: str) -> list:
    """`items` if every one is a `kind` (bool never counts as int); GGUFFormatError naming the first that is not."""
    for k, v in enumerate(items):
        if type(v) is not kind and not (isinstance(v, kind) and not isinstance(v, bool)):
            raise GGUFFormatError(f"{key}[{k}] should be {'a string' if kind is str else 'an integer'}, found "
                                  f"{_describe(v)}; the model file is corrupt")
    return items


def _meta_id(value, key: str):
    """A token id from metadata: None, or an int (GGUF stores ids as integers, never as bools or floats)."""
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise GGUFFormatError(f"{key} should be an integer token id, found {_describe(value)}; the model file is "
                              f"corrupt") from None


def _meta_flag(value, key: str):
    """A boolean flag from metadata: None, a bool, or the integers 0 and 1."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise GGUFFormatError(f"{key} should be a bool, found {_describe(value)}; the model file is corrupt")


# Lone UTF-16 surrogates (a str can hold them, UTF-8 cannot): replaced by U+FFFD before encoding, as a browser's
# TextEncoder does with the same strings.
_SURROGATE = re.compile("[\ud800-\udfff]")


class Tokenizer:
    """Byte-level BPE tokenizer. Build it with `Tokenizer.from_gguf(g)` or directly from lists."""

    def __init__(self, tokens, merges, token_types=None, *, pre="gpt2", bos_id=None, eos_id=None,
                 unk_id=None, pad_id=None, add_bos=None, add_eos=False, eog_ids=(),
                 chat_template=None, regex_engine="auto", model="gpt2", scores=None,
                 add_space_prefix=False):
        """tokens: list[str] in the byte-level alphabet (control / user-defined tokens as plain text);
        merges: list[str] "left right" in priority order; token_types: GGUF token types (default all
        NORMAL); pre: pre-tokenizer name; add_bos None means the pre-tokenizer's default;
        eog_ids: extra end-of-generation ids; regex_engine: "auto", "regex" or "re".
        model "llama" (SentencePiece-style BPE): tokens use "▁" for spaces, `scores` (one float per token)
        rank the merges, `merges` and `pre` are unused, add_bos defaults to True."""
        if model not in ("gpt2", "llama"):
            raise ValueError(f"model must be 'gpt2' or 'llama', not {model!r}")
        self.model = model
        spec = PRE_TOKENIZERS.get("default" if model == "llama" else pre)
        if spec is None:
            raise UnsupportedModelError(
                f"pre-tokenizer tokenizer.ggml.pre = {pre!r} is not supported; supported names: "
                f"{', '.join(sorted(PRE_TOKENIZERS))}. Use a model converted with one of these.")
        if regex_engine == "auto":
            regex_engine = "regex" if _have_regex_module() else "re"
        if regex_engine not in ("regex", "re"):
            raise ValueError(f"regex_engine must be 'auto', 'regex' or 're', not {regex_engine!r}")
        self.pre = pre
        self.regex_engine = regex_engine
        self._stages = [_compile(p, regex_engine) for p in spec.stages]
        self._ignore_merges = spec.ignore_merges

        self._tokens = _check_items(list(tokens), str, "tokenizer.ggml.tokens")
        n = len(self._tokens)
        if n == 0:
            raise GGUFFormatError("tokenizer.ggml.tokens is empty; the model file has no vocabulary")
        if token_types is None:
            token_types = [NORMAL] * n
        self._types = _check_items(list(token_types), int, "tokenizer.ggml.token_type")
        if len(self._types) != n:
            raise GGUFFormatError(
                f"tokenizer.ggml.token_type has {len(self._types)} entries but tokenizer.ggml.tokens "
                f"has {n}; the model file is inconsistent")
        self._vocab = {t: i for i, t in enumerate(self._tokens)}  # a duplicate text keeps its last id

        # merge ranks: (left, right) -> priority (lower merges first)
        self._ranks: dict[tuple[str, str], int] = {}
        for rank, m in enumerate(merges):
            m = _meta_str(m)
            if not isinstance(m, str):
                raise GGUFFormatError(f"tokenizer.ggml.merges[{rank}] should be a string 'left right', found "
                                      f"{_describe(m)}; the model file is corrupt")
            cut = m.find(" ", 1)  # a left part may itself start with a space, never be empty
            if cut < 0:
                raise GGUFFormatError(f"tokenizer.ggml.merges[{rank}] = {m!r} is not 'left right'")
            self._ranks.setdefault((m[:cut], m[cut + 1:]), rank)

        def check(name, value):
            value = _meta_id(value, name)
            if value is not None and not 0 <= value < n:
                raise GGUFFormatError(f"{name} = {value} is outside the vocabulary (size {n})")
            return value

        self.bos_id = check("bos_token_id", bos_id)
        self.eos_id = check("eos_token_id", eos_id)
        self.unk_id = check("unknown_token_id", unk_id)
        self.pad_id = check("padding_token_id", pad_id)
        self.add_bos = (spec.add_bos or model == "llama") if add_bos is None else bool(add_bos)
        self.add_eos = bool(add_eos)
        if self.add_bos and self.bos_id is None:
            raise GGUFFormatError("the tokenizer adds a BOS token but tokenizer.ggml.bos_token_id is missing")
        if self.add_eos and self.eos_id is None:
            raise GGUFFormatError("the tokenizer adds an EOS token but tokenizer.ggml.eos_token_id is missing")
        self.chat_template = chat_template

        eog = {check("end-of-generation id", i) for i in eog_ids}
        if self.eos_id is not None:
            eog.add(self.eos_id)
        eog.update(self._vocab[t] for t in EOG_TEXTS if t in self._vocab)
        self.eot_ids = frozenset(eog)

        # Texts matched whole in the input: control (and unknown) tokens only when parse_special,
        # user-defined tokens always (as llama.cpp and HF added tokens do).
        self._special_any: dict[str, int] = {}
        self._special_user: dict[str, int] = {}
        for i, (t, ty) in enumerate(zip(self._tokens, self._types)):
            if t and ty in (CONTROL, UNKNOWN, USER_DEFINED):
                if model == "llama":  # matched after spaces became "▁", as SentencePiece's normalizer does
                    t = t.replace(" ", "\u2581")
                self._special_any[t] = i
                if ty == USER_DEFINED:
                    self._special_user[t] = i

        self._cache: dict[str, tuple[int, ...]] = {}
        self._bytes: list[bytes | None] = [None] * n  # per-id decoded bytes, filled lazily
        if model == "llama":
            self._init_spm(scores, add_space_prefix)

    def _init_spm(self, scores, add_space_prefix):
        """SentencePiece-style BPE: the mergeable pieces with their scores, and the <0xNN> byte tokens."""
        if scores is None:
            raise GGUFFormatError("tokenizer.ggml.model is 'llama' but tokenizer.ggml.scores is missing")
        scores = list(scores)
        if len(scores) != len(self._tokens):
            raise GGUFFormatError(f"tokenizer.ggml.scores has {len(scores)} entries but tokenizer.ggml.tokens "
                                  f"has {len(self._tokens)}; the model file is inconsistent")
        self.add_space_prefix = bool(add_space_prefix)
        self._pieces: dict[str, tuple[float, int]] = {}  # text -> (score, id): what merges may produce
        self._byte_ids = [self.unk_id] * 256
        for i, (t, ty) in enumerate(zip(self._tokens, self._types)):
            if ty in (NORMAL, USER_DEFINED) and t not in self._pieces:
                try:
                    self._pieces[t] = (float(scores[i]), i)
                except (TypeError, ValueError):
                    raise GGUFFormatError(f"tokenizer.ggml.scores[{i}] should be a number, found "
                                          f"{_describe(scores[i])}; the model file is corrupt") from None
            elif ty == BYTE and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                self._byte_ids[int(t[3:5], 16)] = i

    # --- construction from a GGUF file ----------------------------------------------------------

    @classmethod
    def from_gguf(cls, gguf_file, regex_engine="auto") -> "Tokenizer":
        """Build from an object whose `.metadata` dict holds the GGUF key/values."""
        md = gguf_file.metadata
        model = _meta_str(md.get("tokenizer.ggml.model"))
        if model is None or "tokenizer.ggml.tokens" not in md:
            raise UnsupportedModelError(
                "this GGUF file has no tokenizer metadata (tokenizer.ggml.model / tokenizer.ggml.tokens); "
                "use a GGUF converted with its tokenizer included")
        for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            if key in md and not isinstance(_meta_str(md[key]), str):
                raise GGUFFormatError(f"{key} should be a string, found {_describe(md[key])}; the model file is "
                                      f"corrupt")
        if model not in ("gpt2", "llama"):
            kinds = {"bert": "WordPiece", "t5": "Unigram", "rwkv": "RWKV"}
            kind = kinds.get(model, "this")
            raise UnsupportedModelError(
                f"tokenizer.ggml.model = {model!r}: {kind} tokenizers are not supported yet; only "
                f"byte-level BPE ('gpt2', used by SmolLM2, Llama 3, Qwen2/3, LFM2) and SentencePiece-style "
                f"BPE ('llama', used by Gemma 3) are. Use a model with one of these tokenizers.")
        if model == "gpt2" and "tokenizer.ggml.merges" not in md:
            raise GGUFFormatError("tokenizer.ggml.model is 'gpt2' but tokenizer.ggml.merges is missing")
        if model == "llama" and "tokenizer.ggml.scores" not in md:
            raise GGUFFormatError("tokenizer.ggml.model is 'llama' but tokenizer.ggml.scores is missing")
        types = md.get("tokenizer.ggml.token_type")
        scores = md.get("tokenizer.ggml.scores")
        eog = [md[k] for k in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id") if k in md]
        return cls(
            _meta_list(md["tokenizer.ggml.tokens"], "tokenizer.ggml.tokens"),
            _meta_list(md.get("tokenizer.ggml.merges", []), "tokenizer.ggml.merges"),
            None if types is None else _meta_list(types, "tokenizer.ggml.token_type"),
            pre=_meta_str(md.get("tokenizer.ggml.pre", "default")),
            bos_id=md.get("tokenizer.ggml.bos_token_id"),
            eos_id=md.get("tokenizer.ggml.eos_token_id"),
            unk_id=md.get("tokenizer.ggml.unknown_token_id"),
            pad_id=md.get("tokenizer.ggml.padding_token_id"),
            add_bos=_meta_flag(md.get("tokenizer.ggml.add_bos_token"), "tokenizer.ggml.add_bos_token"),
            add_eos=bool(_meta_flag(md.get("tokenizer.ggml.add_eos_token"), "tokenizer.ggml.add_eos_token")),
            eog_ids=eog,
            chat_template=_meta_str(md.get("tokenizer.chat_template")),
            regex_engine=regex_engine,
            model=model,
            scores=None if scores is None else _meta_list(scores, "tokenizer.ggml.scores"),
            add_space_prefix=bool(_meta_flag(md.get("tokenizer.ggml.add_space_prefix", model == "llama"),
                                             "tokenizer.ggml.add_space_prefix")),
        )

    # --- vocabulary -----------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary entry (byte-level alphabet, e.g. 'Ġthe'), or None."""
        return self._vocab.get(token)

    def same_vocabulary(self, other: "Tokenizer") -> bool:
        """Whether ``other`` has the same tokens under the same ids (a draft model's must: cera_web.speculative)."""
        return self._tokens == other._tokens

    def id_to_token(self, token_id: int) -> str:
        """The vocabulary entry of an id, as stored (byte-level alphabet for normal tokens)."""
        return self._tokens[self._check_id(token_id)]

    def token_type(self, token_id: int) -> int:
        return self._types[self._check_id(token_id)]

    def is_special(self, token_id: int) -> bool:
        """True for control and unknown tokens (the ones `skip_special` drops)."""
        return self._types[self._check_id(token_id)] in (CONTROL, UNKNOWN)

    def _check_id(self, token_id) -> int:
        try:
            token_id = operator.index(token_id)   # ints and numpy integers; not floats, strings, None
        except TypeError:
            raise InputError(f"token ids are integers, not {_describe(token_id)}") from None
        if not 0 <= token_id < len(self._tokens):
            raise InputError(f"token id {token_id} is outside the vocabulary (size {len(self._tokens)})")
        return token_id

    # --- encoding -------------------------------------------------------------------------------

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`. add_special: add BOS/EOS as the model asks; parse_special: control
        tokens written in the text (e.g. "<|im_start|>") become their single ids."""
        if not isinstance(text, str):
            raise InputError(f"encode() takes a str, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _SURROGATE.sub("\ufffd", text)
        if self.model == "llama":
            text = text.replace(" ", "\u2581")
        ids: list[int] = []
        if add_special and self.add_bos:
            ids.append(self.bos_id)
        specials = self._special_any if parse_special else self._special_user
        present = tuple(t for t in specials if t in text)
        if present:
            pos = 0
            for m in _special_regex(present).finditer(text):
                if m.start() > pos:
                    self._encode_ordinary(text[pos:m.start()], ids)
                ids.append(specials[m.group()])
                pos = m.end()
            if pos < len(text):
                self._encode_ordinary(text[pos:], ids)
        elif text:
            self._encode_ordinary(text, ids)
        if add_special and self.add_eos:
            ids.append(self.eos_id)
        return ids

    def pre_tokenize(self, text: str) -> list[str]:
        """The pieces the regex stages cut `text` into (no special-token handling)."""
        pieces = [text] if text else []
        for rx in self._stages:
            pieces = [p for piece in pieces for p in _split_isolated(rx, piece)]
        return pieces

    def _encode_ordinary(self, text: str, out: list[int]) -> None:
        cache = self._cache
        if len(cache) > 100_000:  # bound memory on long sessions; refills quickly
            cache.clear()
        if self.model == "llama":
            # every ordinary stretch starts the text or follows a special token
            out.extend(self._spm_ids("\u2581" + text if self.add_space_prefix else text))
            return
        for piece in self.pre_tokenize(text):
            ids = cache.get(piece)
            if ids is None:
                ids = cache[piece] = self._piece_ids(piece)
            out.extend(ids)

    def _piece_ids(self, piece: str) -> tuple[int, ...]:
        word = piece.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_ALPHABET)
        vocab = self._vocab
        if len(word) == 1 or (self._ignore_merges and word in vocab):
            tid = vocab.get(word)
            if tid is not None:
                return (tid,)
        symbols = _bpe(word, self._ranks) if len(word) < 48 else _bpe_heap(word, self._ranks)
        ids = []
        for s in symbols:
            tid = vocab.get(s)
            if tid is not None:
                ids.append(tid)
                continue
            # Not in the vocabulary: in practice a single byte the vocabulary lacks (SmolLM2 has no
            # token for bytes 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF).
            # HF tokenizers and llama.cpp both drop such bytes rather than emit the unknown token
            # (which for SmolLM2 is <|endoftext|>, an end-of-generation token), and so do we.
            ids.extend(vocab[ch] for ch in s if ch in vocab)
        return tuple(ids)

    def _spm_ids(self, text: str) -> list[int]:
        """SentencePiece-style BPE of one stretch (spaces already "▁"): merge the adjacent pair that forms the
        highest-scoring piece (leftmost on ties) until none does; symbols that are no piece become byte tokens."""
        pieces = self._pieces
        sym: list[str | None] = list(text)
        n = len(sym)
        if n == 0:
            return []
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap = []

        def push(i, j):
            pair = sym[i] + sym[j]
            hit = pieces.get(pair)
            if hit is not None:
                heapq.heappush(heap, (-hit[0], i, pair))

        for i in range(n - 1):
            push(i, i + 1)
        while heap:
            _, i, pair = heapq.heappop(heap)
            j = nxt[i]
            if sym[i] is None or j < 0 or sym[i] + sym[j] != pair:
                continue  # stale: a side was merged since this pair was pushed
            sym[i], sym[j] = pair, None
            k = nxt[i] = nxt[j]
            if k >= 0:
                prv[k] = i
                push(i, k)
            if prv[i] >= 0:
                push(prv[i], i)
        ids = []
        for s in sym:
            if s is None:
                continue
            hit = pieces.get(s)
            if hit is not None:
                ids.append(hit[1])
            else:  # byte fallback; a byte without a <0xNN> token becomes the unknown token (if any)
                ids.extend(b for b in (self._byte_ids[c] for c in s.encode("utf-8")) if b is not None)
        return ids

    # --- decoding -------------------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (control / user-defined tokens: their text in UTF-8)."""
        token_id = self._check_id(token_id)
        b = self._bytes[token_id]
        if b is None:
            text = self._tokens[token_id]
            if self._types[token_id] in (CONTROL, UNKNOWN, USER_DEFINED):
                b = text.encode("utf-8")
            elif self.model == "llama":  # SentencePiece: "▁" is a space, <0xNN> a byte
                if self._types[token_id] == BYTE and len(text) == 6 and text.startswith("<0x"):
                    b = bytes((int(text[3:5], 16),))
                else:
                    b = text.replace("\u2581", " ").encode("utf-8")
            else:  # byte-level alphabet back to bytes; a stray non-alphabet char keeps its UTF-8
                c2b = CHAR_TO_BYTE
                b = b"".join(bytes((c2b[c],)) if c in c2b else c.encode("utf-8") for c in text)
            self._bytes[token_id] = b
        return b

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of `ids`; invalid UTF-8 (e.g. a cut multi-byte character) becomes U+FFFD."""
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise InputError(f"decode() takes a list of token ids, not {_describe(ids)}")
        return b"".join(self._bytes_iter(ids, skip_special)).decode("utf-8", "replace")

    def _bytes_iter(self, ids, skip_special):
        for i in ids:
            if skip_special and self.is_special(i):
                continue
            yield self.token_bytes(i)


class StreamDecoder:
    """Turns tokens into text one at a time without ever emitting a broken character.

    push(id) returns the newly completed text (possibly ""); bytes of a multi-byte character that
    is not complete yet are held back. flush() returns what is left, with U+FFFD for an incomplete
    tail. The concatenation of everything returned equals tokenizer.decode(all ids).
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token_id: int) -> str:
        if self.skip_special and self.tokenizer.is_special(token_id):
            return ""
        return self._utf8.decode(self.tokenizer.token_bytes(token_id), final=False)

    def flush(self) -> str:
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return text


# --- pre-tokenization and BPE helpers -------------------------------------------------------------

def _split_isolated(rx, text: str) -> list[str]:
    """`text` cut into the matches of `rx` and the non-empty gaps between them, in order."""
    found = rx.findall(text)
    if sum(map(len, found)) == len(text):  # the usual case: the pattern covers every character
        return found
    out, pos = [], 0
    for m in rx.finditer(text):
        s, e = m.span()
        if s == e:
            continue
        if s > pos:
            out.append(text[pos:s])
        out.append(m.group())
        pos = e
    if pos < len(text):
        out.append(text[pos:])
    return out


def _bpe(word: str, ranks) -> list[str]:
    """BPE on a short word: merge the leftmost lowest-rank adjacent pair until none is left."""
    parts = list(word)
    get = ranks.get
    while len(parts) > 1:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = get((parts[i], parts[i + 1]))
            if r is not None and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            break
        parts[best_i: best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def _bpe_heap(word: str, ranks) -> list[str]:
    """The same merges as `_bpe` in O(n log n) for long words: a heap of (rank, position) over a
    linked list of symbols; entries whose pair has changed since they were pushed are skipped."""
    sym: list[str | None] = list(word)
    n = len(sym)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    get = ranks.get
    heap = []
    for i in range(n - 1):
        r = get((sym[i], sym[i + 1]))
        if r is not None:
            heap.append((r, i))
    heapq.heapify(heap)
    while heap:
        r, i = heapq.heappop(heap)
        j = nxt[i]
        if sym[i] is None or j < 0 or get((sym[i], sym[j])) != r:
            continue  # stale: one side was merged away or changed
        sym[i] = sym[i] + sym[j]
        sym[j] = None
        k = nxt[i] = nxt[j]
        if k >= 0:
            prv[k] = i
        p = prv[i]
        if p >= 0:
            rp = get((sym[p], sym[i]))
            if rp is not None:
                heapq.heappush(heap, (rp, p))
        if k >= 0:
            rk = get((sym[i], sym[k]))
            if rk is not None:
                heapq.heappush(heap, (rk, i))
    return [s for s in sym if s is not None]
