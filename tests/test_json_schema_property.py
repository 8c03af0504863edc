"""Property test of the schema compiler (hypothesis): random schemas from the supported grammar of schemas (numeric
bounds and multipleOf, lengths, patterns, formats, enums, const, nullable type lists, objects with required,
additionalProperties false or a schema, arrays with items/prefixItems and counts, anyOf, oneOf of different types,
allOf of object schemas), each drawn with a valid value of its own. Both directions:

- random walks of the compiled grammar are JSON that the `jsonschema` package (with its format checker) validates;
- the drawn value, which `jsonschema` validates, serialized compactly (keys in schema order), is accepted.
Budgets are small (CI); the seed is derived from the test so a failure repeats.
"""
import datetime
import json
import random
import string

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cera_web.grammar import Recogniser
from cera_web.json_schema import matches, schema_to_grammar
from json_walk import random_text

CHECK = jsonschema.Draft202012Validator.FORMAT_CHECKER
ASCII = st.characters(min_codepoint=32, max_codepoint=126)
CHARS = st.sampled_from("abcXYZ 09é-_\"\\/\n€😀")
TEXT = st.text(CHARS, max_size=6)
PATTERNS = ["^[a-z]{1,4}$", "^[A-Z][a-z]*-[0-9]{2}$", "^(ab|cd)+$", "x", "^\\d{3}(\\.\\d+)?$", "[^a-z]{2}",
            "^(?:[A-F0-9]{2}:){2}[A-F0-9]{2}$", "^\\w+@\\w+\\.com$", "^a.c$", "^\\s?[+*?]{1,2}\\S$"]
FORMATS = ["date", "time", "date-time", "uuid", "ipv4", "ipv6", "email", "hostname", "duration", "uri"]


@st.composite
def format_value(draw, fmt):
    day = draw(st.dates(min_value=datetime.date(1000, 1, 1)))
    clock = f"{draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}:{draw(st.integers(0, 59)):02d}" + \
        draw(st.sampled_from(["Z", "+01:00", "-11:30", ".5Z"]))
    label = st.from_regex(r"\A[a-z][a-z0-9]{0,5}\Z")
    host = ".".join(draw(st.lists(label, min_size=1, max_size=3)))
    return {"date": day.isoformat(), "time": clock, "date-time": f"{day.isoformat()}T{clock}",
            "uuid": str(draw(st.uuids())), "ipv4": str(draw(st.ip_addresses(v=4))),
            "ipv6": str(draw(st.ip_addresses(v=6))), "email": f"{draw(label)}.{draw(label)}@{host}",
            "hostname": host, "duration": draw(st.sampled_from(["P1D", "PT2H30M", "P3Y6M4DT12H30M5S", "P2W"])),
            "uri": f"https://{host}/{draw(label)}?q={draw(label)}"}[fmt]


def _bounds(draw, s, lo, hi):
    """Put minimum/exclusiveMinimum and maximum/exclusiveMaximum (or neither) of lo and hi into s."""
    lo_key = draw(st.sampled_from(["minimum", "exclusiveMinimum", None]))
    hi_key = draw(st.sampled_from(["maximum", "exclusiveMaximum", None]))
    if lo_key:
        s[lo_key] = lo
    if hi_key:
        s[hi_key] = hi
    return lo_key, hi_key


@st.composite
def leaf(draw):
    """(a scalar schema, a strategy of values valid for it)."""
    kind = draw(st.sampled_from(["integer", "number", "string", "pattern", "format", "boolean", "null", "enum",
                                 "const", "nullable"]))
    if kind == "integer":
        lo = draw(st.integers(-1000, 1000))
        hi = lo + draw(st.integers(14, 3000))
        s = {"type": "integer"}
        lo_key, hi_key = _bounds(draw, s, lo, hi)
        k = draw(st.sampled_from([1, 1, 2, 3, 7]))
        if k > 1:
            s["multipleOf"] = k
        a = lo + (lo_key == "exclusiveMinimum") if lo_key else -10 ** 6
        b = hi - (hi_key == "exclusiveMaximum") if hi_key else 10 ** 6
        return s, st.integers(-(-a // k), b // k).map(lambda x: x * k)
    if kind == "number":            # bounds in thousandths, values in ten-thousandths: exact as decimals
        lo = draw(st.integers(-10 ** 5, 10 ** 5))
        hi = lo + draw(st.integers(1, 10 ** 5))
        s = {"type": "number"}
        lo_key, hi_key = _bounds(draw, s, lo / 1000, hi / 1000)
        a = lo * 10 + (lo_key == "exclusiveMinimum") if lo_key else -10 ** 8
        b = hi * 10 - (hi_key == "exclusiveMaximum") if hi_key else 10 ** 8
        return s, st.integers(a, b).map(lambda n: n / 10 ** 4)
    if kind == "string":
        lo = draw(st.integers(0, 3))
        s = {"type": "string", "minLength": lo, "maxLength": lo + draw(st.integers(0, 5))}
        return s, st.text(CHARS, min_size=lo, max_size=s["maxLength"])
    if kind == "pattern":
        p = draw(st.sampled_from(PATTERNS))
        anchored = p.startswith("^") and p.endswith("$")
        return {"type": "string", "pattern": p}, st.from_regex(p[1:-1] if anchored else p, fullmatch=anchored,
                                                               alphabet=ASCII)
    if kind == "format":
        fmt = draw(st.sampled_from(FORMATS))
        return {"type": "string", "format": fmt}, format_value(fmt)
    if kind in ("enum", "const"):
        vals = draw(st.lists(st.one_of(st.integers(-5, 5), TEXT, st.booleans(), st.none()), min_size=1, max_size=4))
        if kind == "const":
            return {"const": vals[0]}, st.just(vals[0])
        return {"enum": vals}, st.sampled_from(vals)
    if kind == "nullable":
        return {"type": ["string", "null"], "maxLength": 3}, st.one_of(st.none(), st.text(CHARS, max_size=3))
    return {"type": kind}, (st.booleans() if kind == "boolean" else st.none())


NAMES = ["a", "b", "c d", "é", "id"]


@st.composite
def _object_value(draw, parts, required, extra):
    out = {n: draw(v) for n, v in parts if n in required or draw(st.booleans())}
    if extra is not None and draw(st.booleans()):
        out["zz"] = draw(extra)
    return out


@st.composite
def schema_and_values(draw, depth=2):
    """(a schema from the supported grammar of schemas, a strategy of values valid for it)."""
    kind = draw(st.sampled_from(["leaf", "object", "array", "tuple", "anyOf", "oneOf", "allOf"]) if depth else
                st.just("leaf"))
    sub = schema_and_values(depth=depth - 1) if depth else None
    if kind == "leaf":
        return draw(leaf())
    if kind in ("object", "allOf"):
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
        parts = [(n, draw(sub)) for n in names]
        required = [n for n in names if draw(st.booleans())]
        extra = None
        if kind == "allOf":     # two object schemas, the properties split between them, merged by the compiler
            cut = draw(st.integers(0, len(parts)))
            s = {"allOf": [{"type": "object", "properties": {n: p[0] for n, p in h},
                            "required": [n for n, _ in h if n in required]} for h in (parts[:cut], parts[cut:])]}
        else:
            s = {"type": "object", "properties": {n: p[0] for n, p in parts}, "required": required}
            add = draw(st.sampled_from([None, False, "schema"]))
            if add is False:
                s["additionalProperties"] = False
            elif add == "schema":
                s["additionalProperties"], extra = draw(leaf())
        return s, _object_value([(n, p[1]) for n, p in parts], required, extra)
    if kind == "array":
        (item, values), lo = draw(sub), draw(st.integers(0, 2))
        hi = lo + draw(st.integers(0, 2))
        return {"type": "array", "items": item, "minItems": lo, "maxItems": hi}, \
            st.lists(values, min_size=lo, max_size=hi)
    if kind == "tuple":
        parts = draw(st.lists(sub, min_size=1, max_size=3))
        s = {"type": "array", "prefixItems": [p[0] for p in parts]}
        if draw(st.booleans()):
            s["items"] = False
        return s, st.integers(0, len(parts)).flatmap(lambda k: st.tuples(*[p[1] for p in parts[:k]]).map(list))
    if kind == "oneOf":         # a type per branch, so that no value matches two
        types = draw(st.permutations(["string", "boolean", "null", "integer"]))[:draw(st.integers(2, 4))]
        values = {"string": TEXT, "boolean": st.booleans(), "null": st.none(), "integer": st.integers(-99, 99)}
        return {"oneOf": [{"type": t} for t in types]}, st.one_of(*[values[t] for t in types])
    branches = draw(st.lists(sub, min_size=2, max_size=3))
    return {"anyOf": [b[0] for b in branches]}, st.one_of(*[b[1] for b in branches])


def compact(value, schema):
    """JSON text of the value with object keys in the order the grammar writes them."""
    return json.dumps(_ordered(value, schema), ensure_ascii=False, separators=(",", ":"))


def _ordered(value, schema):
    if isinstance(value, dict):
        parts = schema.get("allOf", [schema])
        props = {}
        for p in parts:
            props.update(p.get("properties", {}))
        out = {k: _ordered(value[k], props[k]) for k in props if k in value}
        out.update({k: v for k, v in value.items() if k not in out})
        return out
    if isinstance(value, list) and isinstance(schema, dict):
        pre = schema.get("prefixItems", [])
        return [_ordered(v, pre[i] if i < len(pre) else schema.get("items", {})) for i, v in enumerate(value)]
    return value


@settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_walks_validate_and_valid_values_are_accepted(data):
    schema, values = data.draw(schema_and_values())
    value = data.draw(values)
    check = jsonschema.Draft202012Validator(schema, format_checker=CHECK)
    assert check.is_valid(value), (schema, value, [e.message for e in check.iter_errors(value)])
    text = compact(value, schema)
    assert matches(schema, text), (schema, text)
    rec = Recogniser(schema_to_grammar(schema))
    rng = random.Random(text)
    for _ in range(3):
        out = random_text(rec, rng, max_bytes=4000)
        if out is not None:
            got = json.loads(out)
            assert check.is_valid(got), (schema, out, [e.message for e in check.iter_errors(got)])


@st.composite
def numeric_leaf(draw):
    while True:
        s, _ = draw(leaf())
        if s.get("type") in ("integer", "number"):
            return s


@settings(max_examples=100, deadline=None, derandomize=True)
@given(numeric_leaf())
def test_numbers_at_and_beside_the_bounds(schema):
    """Short canonical numbers on, just inside and just outside each bound: accepted exactly when valid."""
    from decimal import Decimal
    check = jsonschema.Draft202012Validator(schema)
    deltas = ["-1", "0", "1"] if schema["type"] == "integer" else ["-1", "-0.001", "-0.0001", "0", "0.0001", "0.001",
                                                                    "1"]
    for kw in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        if kw in schema:
            for d in deltas:
                for k in (1, schema.get("multipleOf", 1)):
                    text = str(Decimal(repr(schema[kw])) + Decimal(d) * k)
                    text = text[:-2] if text.endswith(".0") and schema["type"] == "integer" else text
                    want = check.is_valid(json.loads(text))
                    assert matches(schema, text) == want, (schema, text, want)


REGEXES = ["^[a-z]{1,4}$", "a|b", "^(ab|cd)+$", "^a.c$", "[^a-z]{2}", "^\\d{2,}$", "\\w\\W", "^\\s+$", "x?y*z+$",
           "^(?:[A-F0-9]{2}:){2}[A-F0-9]{2}$", "^[\\-.]\\.\\\\$", "^\"[^\"]*\"$", "^é+\\D$", "[^\\d\\s]", "^.{0,3}$",
           "^a{2}b{1,}c{0,1}$", "^(a|)$", "\\S\\s\\S", "^[\\w-]+@[\\w-]+$", "(?:ab)c", "^\\x41\\u00e9$"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.sampled_from(REGEXES), st.text(st.sampled_from('aAbBcz09 -_.\n"\\é:@xyF'), max_size=7))
def test_patterns_read_as_python_re_reads_them(pattern, text):
    """The grammar of a pattern accepts a string exactly when Python's re.search (the `jsonschema` package's check)
    finds the pattern in it (ASCII classes; Python's '$' also matches before a final newline, left out)."""
    import re
    if text.endswith("\n") and "$" in pattern:
        return
    got = matches({"type": "string", "pattern": pattern}, json.dumps(text, ensure_ascii=False))
    assert got == bool(re.search(pattern, text)), (pattern, text, got)
