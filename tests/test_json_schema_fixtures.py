"""Schemas as users send them: Pydantic v2 ``model_json_schema()`` and zod-to-json-schema outputs, kept as literal
JSON (tests/fixtures/schemas/; the code that produced each is beside it), compiled unchanged.

- each compiles (strict), and random walks of its grammar are JSON that the `jsonschema` package validates (the
  validator of the schema's own $schema draft, with its format checker); a set (uniqueItems) is refused naming
  the keyword and its path, and with strict: false compiles and says what it leaves unenforced
- the boundaries of the numeric and string constraints, value by value (one past each bound is rejected)
- generation: greedy and sampled replies of a small model (the tiny qwen3 fixture on the CPU reference engine)
  under these schemas are complete and validate
"""
import asyncio
import json
import random
from pathlib import Path

import jsonschema
import pytest

from cera_web.grammar import GrammarError, Recogniser
from cera_web.json_schema import constraint, matches, schema_to_grammar
from json_walk import random_text

FIXTURES = Path(__file__).parent / "fixtures" / "schemas"
CASES = [(f.stem, case) for f in sorted(FIXTURES.glob("*.json")) for case in json.loads(f.read_text())]


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[f"{s}-{c['name']}" for s, c in CASES])
def test_schema_compiles_and_walks_validate(case):
    schema = case["schema"]
    if "strict_error" in case:
        with pytest.raises(GrammarError, match=f"at {case['strict_error']}: "):
            schema_to_grammar(schema)
        g = schema_to_grammar(schema, strict=False)
        assert g.not_enforced == [case["strict_error"]]
        loose = json.loads(json.dumps(schema).replace('"uniqueItems": true', '"uniqueItems": false'))
        check = validator(loose)
    else:
        g = schema_to_grammar(schema)
        assert g.not_enforced == []
        check = validator(schema)
    rec = Recogniser(g)
    rng = random.Random(case["name"])
    done = 0
    for _ in range(25):
        text = random_text(rec, rng)
        if text is None:
            continue
        done += 1
        errors = [e.message for e in check.iter_errors(json.loads(text))]
        assert not errors, (text, errors)
    assert done >= 15, f"only {done} of 25 walks finished"


def _schema(name):
    return next(c["schema"] for _, c in CASES if c["name"] == name)


@pytest.mark.parametrize("name, good, bad", [
    ("person", ['{"name":"A","age":0,"height_m":0.01,"address":{"street":"x","city":"y","zip_code":"01234"}}',
                '{"name":"A","age":150,"email":"a.b@example.com","height_m":2.999999,"tags":["a","b","c","d","e"],'
                '"address":{"street":"x","city":"y","zip_code":"99999"},"favorite":"blue","kind":"person",'
                '"nickname":null}'],
     ['{"name":"A","age":151,"height_m":1,"address":{"street":"x","city":"y","zip_code":"01234"}}',
      '{"name":"A","age":-1,"height_m":1,"address":{"street":"x","city":"y","zip_code":"01234"}}',
      '{"name":"A","age":1,"height_m":3.0,"address":{"street":"x","city":"y","zip_code":"01234"}}',
      '{"name":"A","age":1,"height_m":0,"address":{"street":"x","city":"y","zip_code":"01234"}}',
      '{"name":"A","age":1,"height_m":1,"address":{"street":"x","city":"y","zip_code":"0123"}}',
      '{"name":"","age":1,"height_m":1,"address":{"street":"x","city":"y","zip_code":"01234"}}',
      '{"name":"A","age":1,"height_m":1,"tags":["a","b","c","d","e","f"],"address":{"street":"x","city":"y",'
      '"zip_code":"01234"}}',
      '{"name":"A","age":1,"height_m":1,"address":{"street":"x","city":"y","zip_code":"01234"},"kind":"robot"}']),
    ("constrained", ['{"sku":"ABC-0001","qty":5,"price":0.5,"code":"ab","batch":0}',
                     '{"sku":"XYZ-9999","qty":1000,"price":99.5,"discount":0.999,"code":"abcd","batch":-3}'],
     ['{"sku":"ABC-0001","qty":0,"price":1,"code":"ab","batch":0}',
      '{"sku":"ABC-0001","qty":1005,"price":1,"code":"ab","batch":0}',
      '{"sku":"ABC-0001","qty":7,"price":1,"code":"ab","batch":0}',
      '{"sku":"ABC-0001","qty":5,"price":0.49,"code":"ab","batch":0}',
      '{"sku":"ABC-0001","qty":5,"price":99.51,"code":"ab","batch":0}',
      '{"sku":"ABC-0001","qty":5,"price":1,"discount":1,"code":"ab","batch":0}',
      '{"sku":"ABC-0001","qty":5,"price":1,"code":"a","batch":0}',
      '{"sku":"ABC-0001","qty":5,"price":1,"code":"abcde","batch":0}',
      '{"sku":"ABC-0001","qty":5,"price":1,"code":"ab","batch":4}',
      '{"sku":"abc-0001","qty":5,"price":1,"code":"ab","batch":0}',
      '{"sku":"ABC-00012","qty":5,"price":1,"code":"ab","batch":0}']),
    ("discriminated-union", ['{"pet":{"pet_type":"cat","meows":3},"n":1}', '{"pet":{"pet_type":"dog","barks":0.5},"n":1}'],
     ['{"pet":{"pet_type":"cat","barks":0.5},"n":1}', '{"pet":{"pet_type":"dog","meows":3},"n":1}',
      '{"pet":{"pet_type":"cat","meows":-1},"n":1}']),
    ("stdlib-types", ['{"id":"123e4567-e89b-12d3-a456-426614174000","at":"2024-02-29T23:59:59.5+01:00","day":"2023-12-31",'
                      '"start":"08:30:00Z","length":"P1DT2H","host":"192.168.0.1","v6":"::1","url":"https://a.example/x?y=1",'
                      '"scores":{"a":1},"pair":[1,"x"],"labels":["a"]}'],
     ['{"id":"123e4567-e89b-12d3-a456-426614174000","at":"2024-02-29T23:59:59.5+01:00","day":"2023-02-30",'
      '"start":"08:30:00Z","length":"P1DT2H","host":"192.168.0.1","v6":"::1","url":"https://a.example/x?y=1",'
      '"scores":{"a":1},"pair":[1,"x"],"labels":["a"]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","at":"2024-02-29T23:59:59.5+01:00","day":"2023-12-31",'
      '"start":"08:30:00Z","length":"P1DT2H","host":"192.168.0.256","v6":"::1","url":"https://a.example/x?y=1",'
      '"scores":{"a":1},"pair":[1,"x"],"labels":["a"]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","at":"2024-02-29T23:59:59.5+01:00","day":"2023-12-31",'
      '"start":"08:30:00Z","length":"P1DT2H","host":"192.168.0.1","v6":"::1","url":"https://a.example/x?y=1",'
      '"scores":{"a":1},"pair":[1,"x",2],"labels":["a"]}']),
])
def test_bounds_value_by_value(name, good, bad):
    schema = _schema(name)
    check = validator(schema)
    for text in good:
        assert check.is_valid(json.loads(text)), text
        assert matches(schema, text), text
    for text in bad:
        assert not check.is_valid(json.loads(text)), text
        assert not matches(schema, text), text


# every keyword of round 2 in a reply that fits the tiny model's 128-token context (all bounded)
GENERATE = {"type": "object", "additionalProperties": False,
            "properties": {
                "n": {"type": "integer", "minimum": -5, "maximum": 120},
                "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "k": {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 50},
                "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"},
                "day": {"type": "string", "format": "date"},
                "pet": {"oneOf": [{"type": "object", "properties": {"t": {"const": "cat"},
                                                                     "lives": {"type": "integer", "minimum": 1,
                                                                               "maximum": 9}},
                                   "required": ["t", "lives"], "additionalProperties": False},
                                  {"type": "object", "properties": {"t": {"const": "dog"}}, "required": ["t"],
                                   "additionalProperties": False}]},
                "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": ["a", "b"]}], "items": False,
                         "minItems": 2},
                "note": {"type": ["string", "null"], "maxLength": 3}},
            "required": ["n", "x", "k", "code", "day", "pet", "pair", "note"]}


@pytest.fixture(scope="module")
def tiny_engine():
    from cera_web.engine import Engine
    e = asyncio.run(Engine.load(Path(__file__).parent / "fixtures" / "small" / "qwen3-q8_0.gguf", device="cpu"))
    yield e
    e.close()


def test_generated_replies_validate(tiny_engine):
    """A random-weights model under the schema: the grammar alone makes each reply valid, greedy and sampled."""
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": GENERATE}}
    assert constraint(fmt).not_enforced == []
    tok = tiny_engine.tokenizer      # the grammar allows up to 20 blanks between tokens, which this model loves:
    blank = {t: -100.0 for t in range(tok.vocab_size)  # biased away so the reply fits its 128-token context
             if not tok.is_special(t) and tok.token_bytes(t) and not tok.token_bytes(t).strip()}
    assert blank
    texts = set()
    for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": 5, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
               {"temperature": 1.5, "seed": 6, "top_k": 0, "top_p": 1.0, "min_p": 0.0}):
        r = asyncio.run(tiny_engine.generate("JSON:", max_tokens=120, response_format=fmt, logit_bias=blank, **kw))
        assert r.stop_reason in ("grammar", "eos"), (kw, r.stop_reason, r.text)
        validator(GENERATE).validate(json.loads(r.text))
        texts.add(r.text)
    assert len(texts) == 3, texts
