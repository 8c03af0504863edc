"""JSON Schema -> a GBNF grammar (cera_web.grammar) whose every complete text is JSON that validates.

    gbnf = schema_to_gbnf({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
    grammar = schema_to_grammar(schema)          # compiled; schema_to_grammar(None) = any JSON object

The supported subset (anything else raises GrammarError naming the keyword, before generation, so an output that
the grammar accepts always validates):
- ``type``: object, array, string, number, integer, boolean, null, or a list of them;
- objects: ``properties`` (emitted in the order given), ``required`` (the rest are optional),
  ``additionalProperties`` (false, or a schema when there are no ``properties``: a map of string keys);
- arrays: ``items``, ``minItems``, ``maxItems``;  strings: ``minLength``, ``maxLength``;
- ``enum``, ``const`` (any JSON values), ``anyOf``, ``allOf`` with one schema, ``$ref`` to ``#``, ``#/$defs/...`` or
  ``#/definitions/...`` (recursion allowed);
- annotations are ignored: title, description, default, examples, format, $schema, $id, $comment, deprecated,
  readOnly, writeOnly; ``true`` / ``{}`` is any JSON value.
Layout: no whitespace inside strings' structure is required; between tokens up to 20 of space, tab or newline
(bounded, so a small model cannot loop on whitespace). Numbers: at most 16 integer digits, 15 fraction digits and a
3-digit exponent (bounded for the same reason).
"""
from __future__ import annotations

import json
import re

from .grammar import Grammar, GrammarError

ANNOTATIONS = {"title", "description", "default", "examples", "format", "$schema", "$id", "$comment", "deprecated",
               "readOnly", "writeOnly", "$defs", "definitions"}
SUPPORTED = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
             "maxLength", "enum", "const", "anyOf", "allOf", "$ref"} | ANNOTATIONS
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")

BASE = r'''
ws ::= [ \t\n]{0,20}
hex ::= [0-9a-fA-F]
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] hex hex hex | [dD] [0-7] hex hex))
string ::= "\"" char* "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
member ::= string ws ":" ws value
object ::= "{" ws (member (ws "," ws member)*)? ws "}"
array ::= "[" ws (value (ws "," ws value)*)? ws "]"
'''


def literal(text: str) -> str:
    """A GBNF string literal matching exactly ``text``."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\x{ord(ch):02X}" if ord(ch) < 0x100 else f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def dumps(value) -> str:
    """The compact JSON text the grammar emits for a const/enum value."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Compiler:
    def __init__(self, root_schema):
        self.root = root_schema
        self.rules: dict[str, str] = {}
        self.refs: dict[str, str] = {}      # $ref -> rule name

    def name(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9-]+", "-", hint).strip("-").lower() or "s"
        base = "s-" + base[:40]
        n, k = base, 1
        while n in self.rules or n in ("ws", "value"):
            k += 1
            n = f"{base}-{k}"
        self.rules[n] = ""          # reserved
        return n

    def rule(self, schema, hint: str, where: str) -> str:
        """The name of a rule matching ``schema`` (a new rule unless it is a $ref seen before or a base rule)."""
        if schema is True or schema == {}:
            return "value"
        if schema is False:
            raise GrammarError(f"the schema at {where} is false: no value can satisfy it")
        if not isinstance(schema, dict):
            raise GrammarError(f"the schema at {where} must be an object or a boolean, got {schema!r}")
        if set(schema) <= {"$ref"} | ANNOTATIONS and "$ref" in schema:
            return self.ref(schema["$ref"], where)
        name = self.name(hint)
        self.rules[name] = self.body(schema, hint, where)
        return name

    def ref(self, ref, where) -> str:
        if not isinstance(ref, str):
            raise GrammarError(f"$ref at {where} must be a string, got {ref!r}")
        got = self.refs.get(ref)
        if got:
            return got
        if ref == "#":
            target = self.root
        else:
            m = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref)
            defs = self.root.get(m.group(1)) if m and isinstance(self.root, dict) else None
            name = m.group(2).replace("~1", "/").replace("~0", "~") if m else None
            if not isinstance(defs, dict) or name not in defs:
                raise GrammarError(f"$ref {ref!r} at {where} cannot be resolved: only '#', '#/$defs/NAME' and "
                                   f"'#/definitions/NAME' in the same schema are supported")
            target = defs[name]
        rule = self.refs[ref] = self.name("ref-" + ref.rsplit("/", 1)[-1])
        if target is True or target == {}:
            self.rules[rule] = "value"
        elif target is False:
            raise GrammarError(f"$ref {ref!r} at {where} points to the schema false: nothing satisfies it")
        else:
            self.rules[rule] = self.body(target, rule, ref)
        return rule

    def body(self, s: dict, hint: str, where: str) -> str:
        """The right-hand side of a rule for the schema object ``s``."""
        unknown = [k for k in s if k not in SUPPORTED]
        if unknown:
            raise GrammarError(f"JSON Schema keyword {unknown[0]!r} (at {where}) is not supported; supported: "
                               f"{', '.join(sorted(SUPPORTED - ANNOTATIONS))}")
        if "$ref" in s:
            rest = {k: v for k, v in s.items() if k not in ANNOTATIONS and k != "$ref"}
            if rest:
                raise GrammarError(f"$ref at {where} is combined with other keywords ({', '.join(rest)}); put "
                                   f"them in the referenced schema or use allOf")
        if "allOf" in s:
            subs = s["allOf"]
            if not isinstance(subs, list) or len(subs) != 1:
                raise GrammarError(f"allOf at {where} is supported with exactly one schema, got {subs!r}")
            rest = {k: v for k, v in s.items() if k not in ANNOTATIONS and k != "allOf"}
            if rest:
                raise GrammarError(f"allOf at {where} is combined with other keywords ({', '.join(rest)}); "
                                   f"merge them into the one allOf schema")
            return self.rule(subs[0], hint, where + "/allOf/0")
        if "const" in s:
            return literal(dumps(s["const"]))
        if "enum" in s:
            vals = s["enum"]
            if not isinstance(vals, list) or not vals:
                raise GrammarError(f"enum at {where} must be a non-empty list of values, got {vals!r}")
            types = s.get("type")
            if types is not None:       # keep only the values of the allowed types
                types = [types] if isinstance(types, str) else types
                vals = [v for v in vals if _type_of(v) in types or (_type_of(v) == "integer" and "number" in types)]
                if not vals:
                    raise GrammarError(f"no value of the enum at {where} has the schema's type {s['type']!r}")
            return " | ".join(literal(dumps(v)) for v in vals)
        if "anyOf" in s:
            subs = s["anyOf"]
            if not isinstance(subs, list) or not subs:
                raise GrammarError(f"anyOf at {where} must be a non-empty list of schemas")
            rest = {k: v for k, v in s.items() if k not in ANNOTATIONS and k != "anyOf"}
            if rest:
                raise GrammarError(f"anyOf at {where} is combined with other keywords ({', '.join(rest)}); "
                                   f"repeat them inside each anyOf schema")
            alts = []
            for i, sub in enumerate(subs):
                if sub is False:
                    continue
                alts.append(self.rule(sub, f"{hint}-{i}", f"{where}/anyOf/{i}"))
            if not alts:
                raise GrammarError(f"every schema of anyOf at {where} is false: nothing satisfies it")
            return " | ".join(alts)
        t = s.get("type")
        if t is None:
            if "properties" in s or "required" in s or "additionalProperties" in s:
                t = "object"
            elif "items" in s or "minItems" in s or "maxItems" in s:
                t = "array"
            elif "minLength" in s or "maxLength" in s:
                t = "string"
            else:
                return "value"
        if isinstance(t, list):
            if not t or any(x not in TYPES for x in t):
                raise GrammarError(f"type at {where} must be one of {', '.join(TYPES)} or a non-empty list of them, "
                                   f"got {t!r}")
            alts = []
            for x in dict.fromkeys(t):
                sub = dict(s, type=x)
                alts.append(self.rule(sub, f"{hint}-{x}", where))
            return " | ".join(alts)
        if t not in TYPES:
            raise GrammarError(f"type at {where} must be one of {', '.join(TYPES)}, got {t!r}")
        if t == "object":
            return self.object(s, hint, where)
        if t == "array":
            return self.array(s, hint, where)
        if t == "string":
            lo, hi = _bounds(s, "minLength", "maxLength", where)
            if lo == 0 and hi is None:
                return "string"
            return '"\\"" ' + (f"char{{{lo},}}" if hi is None else f"char{{{lo},{hi}}}") + ' "\\""'
        return t        # number, integer, boolean, null: the base rules

    def object(self, s, hint, where):
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise GrammarError(f"properties at {where} must be an object mapping names to schemas")
        required = s.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarError(f"required at {where} must be a list of property names")
        extra = s.get("additionalProperties", True)
        props = dict(props)
        for r in required:
            if r not in props:
                if extra is False:
                    raise GrammarError(f"property {r!r} is required at {where} but additionalProperties is false "
                                       f"and it is not in properties: nothing satisfies the schema")
                props[r] = extra if isinstance(extra, dict) else True
        if not props:
            if isinstance(extra, dict) and extra != {}:
                val = self.rule(extra, hint + "-value", where + "/additionalProperties")
                kv = self.name(hint + "-kv")
                self.rules[kv] = f'string ws ":" ws {val}'
                return f'"{{" ws ({kv} (ws "," ws {kv})*)? ws "}}"'
            return '"{" ws "}"' if extra is False else "object"
        kvs = []
        for key, sub in props.items():
            if sub is False:
                if key in required:
                    raise GrammarError(f"property {key!r} is required at {where} but its schema is false")
                continue
            val = self.rule(sub, f"{hint}-{key}", f"{where}/properties/{key}")
            kvs.append((key in required, f'{literal(dumps(key))} ws ":" ws {val}'))
        # first[i]: members i.. when none was written yet; more[i]: the same after one (each with a leading comma)
        n = len(kvs)
        first, more = ['""'] * (n + 1), ['""'] * (n + 1)
        for i in range(n - 1, -1, -1):
            req, kv = kvs[i]
            f, m = self.name(f"{hint}-f{i}"), self.name(f"{hint}-m{i}")
            self.rules[m] = f'ws "," ws {kv} {more[i + 1]}' + ("" if req else f" | {more[i + 1]}")
            self.rules[f] = f"{kv} {more[i + 1]}" + ("" if req else f" | {first[i + 1]}")
            first[i], more[i] = f, m
        return f'"{{" ws {first[0]} ws "}}"'

    def array(self, s, hint, where):
        item = self.rule(s.get("items", True), hint + "-item", where + "/items")
        lo, hi = _bounds(s, "minItems", "maxItems", where)
        if hi == 0:
            return '"[" ws "]"'
        rest = f"(ws \",\" ws {item})"
        rep = f"{rest}{{{max(lo - 1, 0)},}}" if hi is None else f"{rest}{{{max(lo - 1, 0)},{hi - 1}}}"
        inner = f"{item} {rep}"
        return f'"[" ws {inner} ws "]"' if lo > 0 else f'"[" ws ({inner})? ws "]"'


def _bounds(s, lo_key, hi_key, where):
    lo, hi = s.get(lo_key, 0), s.get(hi_key)
    for k, v in ((lo_key, lo), (hi_key, hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise GrammarError(f"{k} at {where} must be a non-negative integer, got {v!r}")
    if hi is not None and hi < lo:
        raise GrammarError(f"{lo_key} {lo} is above {hi_key} {hi} at {where}: nothing satisfies the schema")
    if max(lo, hi or 0) > 1000:
        raise GrammarError(f"{lo_key}/{hi_key} above 1000 at {where} are not supported")
    return lo, hi


def _type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def schema_to_gbnf(schema) -> str:
    """GBNF text for ``schema`` (a dict, a JSON string, or None/"json_object" for any JSON object)."""
    if schema is None or schema == "json_object":
        return BASE + "root ::= object\n"
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
    c = _Compiler(schema)
    top = c.rule(schema, "root", "#")
    lines = [f"{n} ::= {body}" for n, body in c.rules.items()]
    return BASE + "\n".join(lines) + f"\nroot ::= {top}\n"


def schema_to_grammar(schema) -> Grammar:
    """The compiled grammar of ``schema`` (see schema_to_gbnf); errors say what in the schema is wrong."""
    text = schema_to_gbnf(schema)
    try:
        return Grammar.parse(text)
    except GrammarError as e:
        raise GrammarError(f"the JSON schema cannot be satisfied or compiled: {e}") from None


_COMPILED: dict[str, Grammar] = {}


def constraint(response_format=None, grammar=None) -> Grammar | None:
    """The grammar a generation is constrained by, from OpenAI-style ``response_format`` and/or ``grammar``:
    {"type": "text"} or None: none; {"type": "json_object"}: any JSON object; {"type": "json_schema",
    "json_schema": {"schema": {...}}} (or {"type": "json_schema", "schema": {...}}): JSON valid against the schema;
    {"type": "grammar", "grammar": "GBNF text"}; ``grammar``: GBNF text or a compiled Grammar. Compiled grammars
    are kept by their text, so a schema used again reuses its cached states and masks."""
    if grammar is not None and response_format not in (None, {"type": "text"}):
        raise GrammarError("give either response_format or grammar, not both")
    if isinstance(grammar, Grammar):
        return grammar
    if grammar is not None:
        key = "gbnf:" + grammar if isinstance(grammar, str) else None
        if key is None:
            raise GrammarError(f"grammar must be GBNF text or a cera_web.grammar.Grammar, got {type(grammar).__name__}")
        text = grammar
    elif response_format is None:
        return None
    else:
        if not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str):
            raise GrammarError(f"response_format must be a dict with a 'type' (text, json_object, json_schema or "
                               f"grammar), got {response_format!r}")
        kind = response_format["type"]
        if kind == "text":
            return None
        if kind == "json_object":
            schema = response_format.get("schema")
            text = schema_to_gbnf("json_object" if schema is None else schema)
        elif kind == "json_schema":
            spec = response_format.get("json_schema", response_format)
            if not isinstance(spec, dict) or "schema" not in spec:
                raise GrammarError("response_format json_schema needs the schema: {'type': 'json_schema', "
                                   "'json_schema': {'name': ..., 'schema': {...}}}")
            text = schema_to_gbnf(spec["schema"])
        elif kind == "grammar":
            text = response_format.get("grammar")
            if not isinstance(text, str):
                raise GrammarError("response_format grammar needs the GBNF text: {'type': 'grammar', "
                                   "'grammar': 'root ::= ...'}")
        else:
            raise GrammarError(f"response_format type must be text, json_object, json_schema or grammar, got "
                               f"{kind!r}")
        key = "gbnf:" + text
    got = _COMPILED.get(key)
    if got is None:
        try:
            got = Grammar.parse(text)
        except GrammarError as e:
            if grammar is None and response_format.get("type") != "grammar":
                raise GrammarError(f"the JSON schema cannot be satisfied or compiled: {e}") from None
            raise
        if len(_COMPILED) >= 32:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = got
    return got
