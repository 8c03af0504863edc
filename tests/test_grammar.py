"""The grammar engine (cera_web.grammar) and JSON Schema compiler (cera_web.json_schema), on the host.

Walks: random token sequences drawn only from each step's mask over SmolLM2's real vocabulary (every drawn token must
be accepted by the recogniser: the mask never allows a token that leads nowhere), until the grammar allows the end
and the walk takes it. The finished texts are checked by independent judges: the `jsonschema` package for schemas,
plain Python for the grammar set. At some steps the mask's rejections are checked too (a sample of disallowed
tokens must each be refused by the recogniser), so the mask is exact both ways.
"""
import json
import random
import re

import jsonschema
import numpy as np
import pytest

from cera_web.grammar import ACCEPT, Grammar, GrammarError, Matcher, Recogniser, TokenTrie, utf8_sequences
from cera_web.json_schema import schema_to_gbnf, schema_to_grammar


@pytest.fixture(scope="module")
def tokenizer(smollm2_gguf):
    from cera_web.gguf import parse_gguf
    from cera_web.source import FileSource
    from cera_web.tokenizer import Tokenizer
    src = FileSource(smollm2_gguf)
    return Tokenizer.from_gguf(parse_gguf(src.read, src.size))


@pytest.fixture(scope="module")
def trie(tokenizer):
    return TokenTrie.from_tokenizer(tokenizer)


STRUCTURAL = set(b'"{}[],:0123456789-.eE+ \n')


def walk(grammar, trie, tokenizer, seed, max_tokens=300, check_rejections=True):
    """A random walk over the mask; returns the text, or None if it did not finish within max_tokens."""
    rng = random.Random(seed)
    m = Matcher(grammar, trie)
    eos = min(trie.eos)
    ids = []
    short = np.array([bool(b) and set(b) <= STRUCTURAL for b in trie.bytes])
    for step in range(max_tokens):
        allowed = m.allowed()
        assert len(allowed), f"dead end after {tokenizer.decode(ids)!r}"
        assert (eos in allowed) == m.accepting
        if check_rejections and step % 7 == 0:
            banned = np.setdiff1d(np.arange(trie.vocab), allowed)
            before = m.state
            for t in rng.sample(list(banned), min(150, len(banned))):
                assert not (trie.bytes[t] and m.advance(int(t))), \
                    f"token {t} {trie.bytes[t]!r} is accepted but masked after {tokenizer.decode(ids)!r}"
                m.state = before
        pool = allowed[~np.isin(allowed, trie.eos)]
        if m.accepting and (not len(pool) or rng.random() < 0.6):
            return tokenizer.decode(ids)
        struct = pool[short[pool]]
        choice = struct if len(struct) and rng.random() < 0.7 else pool
        t = int(choice[rng.randrange(len(choice))])
        assert m.advance(t), f"masked-in token {t} {trie.bytes[t]!r} refused after {tokenizer.decode(ids)!r}"
        ids.append(t)
    return None


SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
                        "required": ["city", "zip"]},
            "ok": {"type": "boolean"}},
        "required": ["name", "address", "ok"]},
    "enums": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}, "size": {"enum": [1, 2.5, None, "XL"]},
                       "kind": {"const": "shirt"}},
        "required": ["color", "size", "kind"], "additionalProperties": False},
    "arrays": {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4},
                       "empty": {"type": "array", "maxItems": 0},
                       "words": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 5}}},
        "required": ["xs", "empty"]},
    "optional": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "null"},
                       "d": {"type": ["integer", "null"]}},
        "required": ["b"]},
    "anyof": {
        "type": "array", "maxItems": 3,
        "items": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "integer"},
                            {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}]}},
    "ref": {
        "$defs": {"node": {"type": "object",
                           "properties": {"v": {"type": "integer"},
                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                   "maxItems": 2}},
                           "required": ["v"]},
                  "pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                         "required": ["x", "y"]}},
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/node"}, "at": {"$ref": "#/$defs/pt"}},
        "required": ["tree", "at"]},
    "map": {"type": "object", "additionalProperties": {"type": "integer"}},
    "any": {},
    # issue 28's keywords, whose grammars have other shapes (digit ranges, regex classes, key exclusion, formats)
    "round2": {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": -40, "exclusiveMaximum": 1250},
            "x": {"type": "number", "minimum": 0.25, "maximum": 3},
            "k": {"type": "integer", "multipleOf": 7},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{1,3}(\\.[a-z]+)?$"},
            "day": {"type": "string", "format": "date"},
            "pet": {"oneOf": [{"type": "object", "properties": {"t": {"const": "cat"}}, "required": ["t"]},
                              {"type": "string", "maxLength": 4}]},
            "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": ["string", "null"]}],
                     "items": False}},
        "required": ["n", "x", "code"],
        "additionalProperties": {"type": "string", "format": "email"}},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_walks_validate(name, trie, tokenizer):
    schema = SCHEMAS[name]
    g = schema_to_grammar(schema)
    done = 0
    for seed in range(12):
        text = walk(g, trie, tokenizer, seed)
        if text is None:
            continue
        done += 1
        jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert done >= 6, f"only {done} of 12 walks finished"


def test_json_object_mode(trie, tokenizer):
    g = schema_to_grammar(None)
    for seed in range(8):
        text = walk(g, trie, tokenizer, seed)
        if text is not None:
            assert isinstance(json.loads(text), dict)


def test_recogniser_on_texts():
    r = Recogniser(schema_to_grammar(SCHEMAS["nested"]))
    assert r.accepts(b'{"name":"Al","address":{"city":"X","zip":7},"ok":true}')
    assert r.accepts('{ "name" : "\u00e9\\n\U0001F600", "address": {"city":"", "zip": -0}, "ok": false}'.encode())
    assert not r.accepts(b'{"name":"Al","ok":true}')                                    # address missing
    assert not r.accepts(b'{"name":"Al","address":{"city":"X","zip":7.5},"ok":true}')  # not an integer
    assert not r.accepts(b'{"name":"0123456789abc","address":{"city":"X","zip":7},"ok":true}')  # too long
    assert not r.accepts(b'{"name":"\xff","address":{"city":"X","zip":7},"ok":true}')  # not UTF-8
    e = Recogniser(schema_to_grammar(SCHEMAS["enums"]))
    assert e.accepts(b'{"color":"red","size":null,"kind":"shirt"}')
    assert not e.accepts(b'{"color":"pink","size":null,"kind":"shirt"}')


GRAMMARS = {
    "brackets": (r'''root ::= item+
                     item ::= "(" root? ")" | "[" root? "]"    # nested pairs''',
                 lambda s: _balanced(s)),
    "arithmetic": (r'''
        root ::= expr
        expr ::= term (ws [-+] ws term)*
        term ::= factor (ws [*/] ws factor)*
        factor ::= [0-9]{1,3} | "(" ws expr ws ")"
        ws ::= " "?''', lambda s: isinstance(eval(s.replace("/", "*")), int)),
    "csv": (r'''root ::= field ("," field){2,4} "\n"
               field ::= [a-zA-Z0-9 ]* | "\"" ([^"] | "\"\"")* "\""''',
            lambda s: re.fullmatch(r'((?:[a-zA-Z0-9 ]*|"(?:[^"]|"")*")(?:,|\n$)){3,5}', s) is not None),
}


def _balanced(s):
    stack = []
    for c in s:
        if c in "([":
            stack.append(c)
        elif not stack or stack.pop() != {")": "(", "]": "["}[c]:
            return False
    return not stack and len(s) > 0


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_grammar_walks_are_accepted(name, trie, tokenizer):
    text, judge = GRAMMARS[name]
    g = Grammar.parse(text)
    done = 0
    for seed in range(10):
        out = walk(g, trie, tokenizer, seed, max_tokens=200)
        if out is not None:
            done += 1
            assert judge(out), out
    assert done >= 3


def test_grammar_syntax():
    r = Recogniser(Grammar.parse(r'''
        root ::= "a"{2} "b"{1,} "c"{0,2} [^a-z\n] "\x41\u00e9" . ("x" | "y")?  # comment
    '''))
    assert r.accepts("aabbbcc!Aé€".encode())
    assert r.accepts("aab9Aé😀y".encode())
    assert not r.accepts("abZAé€".encode())
    assert not r.accepts("aabccc!Aé€".encode())
    assert not r.accepts("aabq!Aé€".encode())


def test_utf8_sequences_match_python():
    rng = random.Random(1)
    for lo, hi in [(0, 0x10FFFF), (0x7F, 0x80), (0x7FF, 0x801), (0xFFFF, 0x10000), (0x100, 0x2FFF)]:
        seqs = utf8_sequences(lo, hi)
        for cp in [lo, hi] + [rng.randint(0, 0x10FFFF) for _ in range(300)]:
            if 0xD800 <= cp <= 0xDFFF:
                continue
            b = chr(cp).encode()
            hit = any(len(q) == len(b) and all(a <= x <= z for x, (a, z) in zip(b, q)) for q in seqs)
            assert hit == (lo <= cp <= hi), hex(cp)


@pytest.mark.parametrize("text, message", [
    ('root ::= "a', "unterminated string literal"),
    ("root ::= [a-", "unterminated character class"),
    ("root ::= [z-a]", "is reversed"),
    ('root ::= "a"{3,1}', "maximum below its minimum"),
    ('root ::= x\nroot ::= "b"', "defined twice"),
    ('root ::= undefined-rule', "'undefined-rule', which is not defined"),
    ('start ::= "a"', "no 'root' rule"),
    ('root ::= root "a" | "b"', "left recursion"),
    ('root ::= x\nx ::= "a"? root', "left recursion"),
    ('root ::= "(" root ")"', "accepts no text"),
    ('root ::= ( "a" ', "expected ) to close"),
    (r'root ::= "\q"', "unknown escape"),
    ("", "empty"),
])
def test_malformed_grammars(text, message):
    with pytest.raises(GrammarError, match=re.escape(message)):
        Grammar.parse(text)


@pytest.mark.parametrize("schema, message", [
    ({"type": "strin"}, "at #/type: type must be one of"),
    ({"type": "array", "minItems": 3, "maxItems": 2}, "at #/minItems: minItems 3 is above maxItems 2"),
    ({"type": "string", "minLength": -1}, "at #/minLength: minLength must be a non-negative integer"),
    ({"enum": []}, "at #/enum: enum must be a non-empty list"),
    ({"properties": {"tags": {"type": "array", "uniqueItems": True}}},
     "at #/properties/tags/uniqueItems: uniqueItems (with maxItems above 1) cannot be enforced"),
    ({"type": "string", "pattern": "a(?=b)"}, "at #/pattern: a lookahead (?=...) cannot become a grammar"),
    ({"type": "string", "pattern": "(a)\\1"}, "at #/pattern: the backreference \\1 cannot become a grammar"),
    ({"not": {"type": "string"}}, "at #/not: the keyword 'not' is not supported"),
    ({"oneOf": [{"type": "string"}, {"maxLength": 3}]}, "at #/oneOf: oneOf's schemas 0 and 1 may both match"),
    ({"type": "integer", "minimum": 5, "exclusiveMaximum": 5}, "no integer lies between the bounds"),
    ({"type": "number", "multipleOf": 0.01}, "at #/multipleOf: multipleOf 0.01 is not an integer"),
    ({"$ref": "#/$defs/missing"}, "cannot be resolved"),
    ({"$ref": "http://x/y.json"}, "cannot be resolved"),
    (False, "is false"),
    ({"anyOf": [False, False]}, "every schema of anyOf"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "at #/allOf/1/type: allOf asks for the types"),
    ({"type": "object", "required": ["a"], "additionalProperties": False}, "required"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "schema is false"),
    ({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"]}},
      "$ref": "#/$defs/a"}, "cannot be satisfied"),
    ("{not json", "not valid JSON"),
    ({"enum": ["a", 1], "type": "boolean"}, "no value of the enum"),
])
def test_malformed_or_unsatisfiable_schemas(schema, message):
    with pytest.raises(GrammarError, match=re.escape(message)):
        schema_to_grammar(schema)


def test_gbnf_is_readable():
    text = schema_to_gbnf({"type": "object", "properties": {"a b": {"type": "string"}}, "required": ["a b"]})
    assert '"\\"a b\\""' in text and text.rstrip().endswith("root ::= s-root")


def test_finished_state(trie):
    m = Matcher(Grammar.parse('root ::= "ab"'), trie)
    assert not m.accepting
    for t in range(trie.vocab):
        if trie.bytes[t] == b"ab":
            assert m.advance(t)
            break
    assert m.finished and m.state == frozenset((ACCEPT,))
    assert list(m.allowed()) == trie.eos


@pytest.mark.parametrize("name", ["nested", "arrays", "anyof", "any", "round2"])
def test_table_walk_equals_trie_walk(name, trie):
    """The two ways a mask is made agree bit for bit, state by state along random walks: the trie walk (subtree
    shortcuts; used while it stays small) and the table walk (every token through the transition table, numpy; used
    for wide states such as string bodies)."""
    g = schema_to_grammar(SCHEMAS[name])
    m = Matcher(g, trie)
    m.WALK_BUDGET, m.WIDE = 1 << 40, 256          # this matcher's _walk never hands over to the table walk
    rng = random.Random(3)
    for _ in range(40):
        st = m.state
        want = m._walk(st)
        got = trie.pack(m._table_walk(st), ACCEPT in st)
        assert np.array_equal(got, want), (name, int(np.unpackbits(got.view(np.uint8)).sum()),
                                           int(np.unpackbits(want.view(np.uint8)).sum()))
        allowed = np.nonzero(np.unpackbits(want.view(np.uint8), bitorder="little")[:trie.vocab])[0]
        allowed = allowed[~np.isin(allowed, trie.eos)]
        if not len(allowed):
            break
        assert m.advance(int(allowed[rng.randrange(len(allowed))]))


def test_table_walk_on_a_small_vocabulary():
    """The table walk by hand: tokens of many lengths, prefixes of each other, a multi-byte one, an end token."""
    tb = [b"a", b"ab", b'"abc"', b"x" * 10, b'"' + b"y" * 8 + b'"', b'"yy"', "é".encode(), None, b'"', b"yyyyyy"]
    trie = TokenTrie(tb, eos=[7])
    g = Grammar.parse('root ::= "\\"" [a-y]{0,6} "\\""')
    m = Matcher(g, trie)
    m.WALK_BUDGET = 0                 # always the table walk
    assert list(m.allowed()) == [2, 5, 8]                       # '"abc"', '"yy"', '"'
    assert m.advance(8)
    assert list(m.allowed()) == [0, 1, 8, 9]          # 'a', 'ab', '"', 'yyyyyy' (not the 10 x's: at most 6 letters)
    assert m.advance(9)
    assert list(m.allowed()) == [8]
    assert m.advance(8) and list(m.allowed()) == [7]            # complete: only the end


def test_strict_false_leaves_out_what_a_grammar_cannot_enforce_and_says_so():
    from cera_web.json_schema import constraint
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0}, "not": {"maxItems": 0},
              "uniqueItems": True}
    with pytest.raises(GrammarError, match="at #/not: the keyword 'not' is not supported"):
        constraint({"type": "json_schema", "json_schema": {"schema": schema}})
    g = constraint({"type": "json_schema", "json_schema": {"schema": schema, "strict": False}})
    assert g.not_enforced == ["#/not", "#/uniqueItems"]
    assert g.source.startswith("# not enforced: #/not\n# not enforced: #/uniqueItems\n")
    r = Recogniser(g)
    assert r.accepts(b"[1,1,0]") and r.accepts(b"[]") and not r.accepts(b"[-1]")     # the rest is still enforced
    with pytest.raises(GrammarError, match="strict must be true or false"):
        constraint({"type": "json_schema", "json_schema": {"schema": schema, "strict": "no"}})
