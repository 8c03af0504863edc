"""JSON Schema -> a GBNF grammar (cera_web.grammar) whose every complete text is JSON that validates.

    gbnf = schema_to_gbnf({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
    grammar = schema_to_grammar(schema)          # compiled; schema_to_grammar(None) = any JSON object
    matches(schema, '{"name":"Al"}')             # does the grammar compiled from the schema accept the text

What is enforced (by the grammar, so every output validates; draft 2020-12 meaning, draft 7 tuples too):
- ``type`` (a name or a list), ``enum``, ``const``;
- numbers and integers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum`` (exact decimal
  comparison of the text), ``multipleOf`` with an integer (integers only are written);
- strings: ``minLength``, ``maxLength``, ``pattern`` (the ECMAScript subset: classes, escapes, quantifiers,
  groups, alternation, ``^``/``$`` at the ends; a regex that cannot become a grammar is refused naming the
  construct), ``format`` (date, time, date-time, duration, uuid, email, hostname, ipv4, ipv6, uri, uri-reference,
  iri, iri-reference, idn-email, idn-hostname, json-pointer; unknown formats only annotate);
- objects: ``properties`` (written in the order given), ``required``, ``additionalProperties`` (false, true or a
  schema), ``patternProperties`` (one pattern), ``propertyNames``, ``minProperties``/``maxProperties`` where the
  required/declared properties settle them;
- arrays: ``items``, ``prefixItems`` (or draft 7 ``items: [...]`` and ``additionalItems``), ``minItems``,
  ``maxItems``, ``uniqueItems`` where maxItems <= 1;
- ``anyOf``, ``oneOf`` (when no value can match two branches: different types, different const/enum values, or
  a required property told apart that way), ``allOf`` (merged into one schema), ``$ref`` to ``#`` and JSON
  pointers in the same document (``#/$defs/...``, ``#/definitions/...``, ``#/properties/...``; recursion allowed).
Annotations are ignored (title, description, default, examples, $schema, $comment, deprecated, readOnly, ...).
Any other keyword (uniqueItems, not, if/then/else, contains, dependentRequired, ...) is refused with an error that
names the keyword and its place (``#/properties/tags/uniqueItems``); with ``strict=False`` it is left out instead
and listed in ``grammar.not_enforced`` (and as comments in the GBNF text).

The grammar writes a subset of the valid texts, in one canonical shape: properties in schema order (extra ones
after them, only where additionalProperties is a schema, or true without properties); a schema without ``type``
but with keywords of one type (``minimum``, ``pattern``, ``properties``, ...) is written as that type; integers
without a fraction, const/enum values as compact JSON; between tokens up to 20 of space, tab or newline (bounded,
so a small model cannot loop on whitespace). Numbers: at most 16 integer digits, 15 fraction digits and a 3-digit
exponent; a number with bounds is written without an exponent, with at most 9 integer and 6 fraction digits unless
a bound needs more (so that the decimal text and the double it parses to compare alike). Formats: years 1000-9999,
host names of up to 4 labels of up to 32 characters, URIs with a scheme, host and bounded path/query/fragment.
"""
from __future__ import annotations

import json
import re
from decimal import Decimal
from math import ceil, floor
from urllib.parse import unquote

from .grammar import Grammar, GrammarError, Recogniser, complement_ranges, normalise_ranges

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$comment", "deprecated", "readOnly",
               "writeOnly", "$defs", "definitions", "contentMediaType", "contentEncoding", "discriminator"}
STRUCTURE = {"type", "enum", "const", "$ref", "allOf", "anyOf", "oneOf"}
BY_TYPE = {
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "object": {"properties", "required", "additionalProperties", "patternProperties", "propertyNames",
               "minProperties", "maxProperties"},
    "array": {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"},
}
SUPPORTED = STRUCTURE | set().union(*BY_TYPE.values())
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
FORMATS = {"date", "time", "date-time", "duration", "uuid", "email", "idn-email", "hostname", "idn-hostname",
           "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "json-pointer"}
# formats the `jsonschema` format checker knows but no grammar here writes: refused like a keyword
CHECKED_FORMATS = {"regex", "relative-json-pointer", "uri-template", "color"}

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


def _fail(where: str, keyword: str, msg: str):
    raise GrammarError(f"JSON Schema error at {where}/{keyword}: {msg}")


# -- numbers ------------------------------------------------------------------------------------------------------------

def _alt(items: list[str]) -> str:
    items = [i for i in dict.fromkeys(items)]
    return items[0] if len(items) == 1 else "(" + " | ".join(items) + ")"


def _digits(a: int, b: int) -> str:
    return f'"{a}"' if a == b else f"[{a}-{b}]"


def _fixed(xs: str, ys: str) -> list[str]:
    """Sequences matching the digit strings of len(xs) from xs to ys (same length, leading zeros allowed)."""
    if not xs:
        return ['""']
    if xs == ys:
        return [" ".join(f'"{c}"' for c in xs)]
    n, d0, e0 = len(xs), int(xs[0]), int(ys[0])
    if d0 == e0:
        return [f'"{d0}" ' + s for s in _fixed(xs[1:], ys[1:])]
    out = []
    lo_full, hi_full = set(xs[1:]) <= {"0"}, set(ys[1:]) <= {"9"}
    first, last = (d0 if lo_full else d0 + 1), (e0 if hi_full else e0 - 1)
    if not lo_full:
        out += [f'"{d0}" ' + s for s in _fixed(xs[1:], "9" * (n - 1))]
    if first <= last:
        out.append(_digits(first, last) + (f" [0-9]{{{n - 1}}}" if n > 1 else ""))
    if not hi_full:
        out += [f'"{e0}" ' + s for s in _fixed("0" * (n - 1), ys[1:])]
    return out


def _naturals(a: int, b: int) -> list[str]:
    """Alternatives matching the canonical decimal texts of the integers a..b (0 <= a)."""
    out = []
    for k in range(len(str(a)), len(str(b)) + 1):
        x, y = max(a, 10 ** (k - 1) if k > 1 else 0), min(b, 10 ** k - 1)
        if x <= y:
            out += _fixed(str(x), str(y))
    return out


def int_range(lo: int | None, hi: int | None, digits: int = 16) -> str | None:
    """A GBNF expression for the integers lo..hi (None: unbounded, up to ``digits`` digits), or None if empty."""
    big = 10 ** digits - 1
    lo = min(-big, hi if hi is not None else 0) if lo is None else lo
    hi = max(big, lo) if hi is None else hi
    if lo > hi:
        return None
    alts = []
    if lo < 0:
        alts.append('"-" ' + _alt(_naturals(max(1, -hi), -lo)))
    if hi >= 0:
        alts += _naturals(max(lo, 0), hi)
    return _alt(alts)


def _frac(a, ax, b, bx, depth):
    """Fraction digit strings f (at most ``depth`` digits) with 0.f above a / below b (digit strings without
    trailing zeros, None: no bound; ax/bx: exclusive). Returns (the empty string is one, GBNF for the non-empty
    ones or None)."""
    if a == "" and not ax:
        a = None                # at least 0: no bound
    empty = a is None and (b is None or b != "" or not bx)
    if depth == 0:
        return empty, None
    groups: dict[tuple, list[int]] = {}
    for c in range(10):
        if a is not None:
            a1 = int(a[0]) if a else 0
            if c < a1:
                continue
            low = None if c > a1 else (a[1:], ax)
        else:
            low = None
        if b is not None:
            b1 = int(b[0]) if b else 0
            if c > b1:
                continue
            high = None if c < b1 else (b[1:], bx)
        else:
            high = None
        groups.setdefault((low, high), []).append(c)
    alts = []
    for (low, high), cs in groups.items():
        if low is None and high is None:
            rest = f" [0-9]{{0,{depth - 1}}}" if depth > 1 else ""
        else:
            e, ne = _frac(*(low or (None, False)), *(high or (None, False)), depth - 1)
            if ne is None and not e:
                continue
            rest = "" if ne is None else (f" ({ne})?" if e else f" {ne}")
        runs, start = [], cs[0]
        for i, c in enumerate(cs):
            if i + 1 == len(cs) or cs[i + 1] != c + 1:
                runs.append(_digits(start, c))
                if i + 1 < len(cs):
                    start = cs[i + 1]
        alts += [r + rest for r in runs]
    return empty, (_alt(alts) if alts else None)


def _split(d: Decimal):
    """A non-negative decimal -> (integer part, fraction digits without trailing zeros)."""
    i = int(d)
    f = format(d - i, "f").partition(".")[2].rstrip("0")
    return i, f


def _nonneg(lo, lo_x, hi, hi_x, ints: int, fracs: int) -> list[str]:
    """Alternatives for the unsigned decimal texts (integer part, optional fraction) of values in the range."""
    ilo, flo = _split(lo)
    ihi, fhi = _split(hi) if hi is not None else (max(10 ** ints - 1, ilo + 1), None)
    out = []

    def with_frac(ints_expr, a, ax, b, bx):
        e, ne = _frac(a, ax, b, bx, fracs)
        if ne is not None:
            out.append(f'{ints_expr} ("." {ne})' + ("?" if e else ""))
        elif e:
            out.append(ints_expr)

    if ilo == ihi:
        with_frac(" ".join(f'"{c}"' for c in str(ilo)), flo, lo_x, fhi, hi_x)
        return out
    with_frac(" ".join(f'"{c}"' for c in str(ilo)), flo, lo_x, None, False)
    top = ihi if hi is None else ihi - 1
    if top > ilo:
        with_frac(_alt(_naturals(ilo + 1, top)), None, False, None, False)
    if hi is not None:
        with_frac(" ".join(f'"{c}"' for c in str(ihi)), None, False, fhi, hi_x)
    return out


def number_range(lo, lo_x, hi, hi_x) -> str | None:
    """GBNF for decimal numbers (no exponent) between lo and hi (Decimals or None; *_x: exclusive), or None."""
    sig = [len(str(abs(int(v)))) for v in (lo, hi) if v is not None]
    ints = max([9] + sig)
    fracs = max([6] + [len(_split(abs(v))[1]) for v in (lo, hi) if v is not None])
    alts = []
    if lo is None or lo < 0:                    # negative values: "-" and the magnitude, never -0
        mlo, mlo_x = (-hi, hi_x) if hi is not None and hi < 0 else (Decimal(0), True)
        mhi, mhi_x = (None, False) if lo is None else (-lo, lo_x)
        if mhi is None or mlo < mhi or (mlo == mhi and not (mlo_x or mhi_x)):
            alts += ['"-" ' + a for a in _nonneg(mlo, mlo_x, mhi, mhi_x, ints, fracs)]
    if hi is None or hi > 0 or (hi == 0 and not hi_x):
        nlo, nlo_x = (lo, lo_x) if lo is not None and lo >= 0 else (Decimal(0), False)
        if hi is None or nlo < hi or (nlo == hi and not (nlo_x or hi_x)):
            alts += _nonneg(nlo, nlo_x, hi, hi_x, ints, fracs)
    return _alt(alts) if alts else None


# -- regular expressions (pattern) -----------------------------------------------------------------------------------------

def _class_escape(e: str, negated: bool):
    """The code points of the class escape \\e (d, w, s and their capitals) that the grammar may use: inside a
    negated class the widest reading of the escape (what either ECMAScript or Python's `re`, which the `jsonschema`
    package uses, would match), elsewhere the narrowest (what both match), so the grammar never writes a character
    that one of them reads differently. The Unicode scan (unicode_classes) runs only where a wide \\d or \\w is
    needed."""
    from .unicode_classes import WHITE_SPACE, category_ranges
    es_space = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
                (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]

    def narrow(k):
        return {"d": [(0x30, 0x39)], "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
                "s": [r for r in es_space if r != (0xFEFF, 0xFEFF)]}[k]

    def wide(k):
        if k == "s":
            return normalise_ranges(es_space + list(WHITE_SPACE) + [(0x1C, 0x1F)])
        extra = list(category_ranges("N")) + (list(category_ranges("L")) if k == "w" else [])
        return normalise_ranges(narrow(k) + extra)

    k = e.lower()
    if e == k:
        return wide(k) if negated else narrow(k)
    return complement_ranges(narrow(k)) if negated else complement_ranges(wide(k))


_LINE_ENDS = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
_SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def _cls_body(ranges):
    def esc(cp):
        return f"\\U{cp:08X}" if cp > 0xFFFF else f"\\u{cp:04X}"
    return "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in ranges)


def json_chars(ranges) -> str | None:
    """GBNF for one character of the given code point ranges as it is written inside a JSON string: the
    character itself, or its escape where JSON needs one (quote, backslash, control characters)."""
    ranges = normalise_ranges(ranges)
    plain = []
    for a, b in ranges:         # without the quote, backslash and control characters
        for x, y in ((a, min(b, 0x1F)), (max(a, 0x20), b)):
            if x > y:
                continue
            for lo, hi in ((x, min(y, 0x21)), (max(x, 0x23), min(y, 0x5B)), (max(x, 0x5D), y)):
                if lo <= hi and lo >= 0x20:
                    plain.append((lo, hi))
    alts = [f"[{_cls_body(plain)}]"] if plain else []
    for a, b in ranges:
        for cp in range(a, min(b, 0x5C) + 1):
            if cp in _SHORT or cp < 0x20:
                alts.append(literal(_SHORT.get(cp, f"\\u{cp:04x}")))
    return _alt(alts) if alts else None


class _Regex:
    """An ECMAScript regex (the JSON Schema subset) -> GBNF for the JSON string contents it matches (search
    semantics: unanchored ends match any text)."""

    def __init__(self, src: str, fail):
        self.s, self.i, self.fail = src, 0, fail

    def compile(self) -> str:
        alts = []
        for seq, start, end in self.top():
            any_text = f"{json_chars(complement_ranges([]))}*"
            alts.append(" ".join(([] if start else [any_text]) + [seq] + ([] if end else [any_text])))
        return _alt(alts)

    def top(self):
        out = []
        while True:
            start = self.s.startswith("^", self.i)
            self.i += start
            seq = self.sequence()
            end = seq.endswith(" $")
            out.append((seq[:-2] if end else seq, start, end))
            if self.i < len(self.s) and self.s[self.i] == "|":
                self.i += 1
                continue
            if self.i < len(self.s):
                self.fail(f"unbalanced ')' at offset {self.i}")
            return out

    def alternation(self):
        alts = [self.sequence()]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            alts.append(self.sequence())
        for a in alts:
            if a.endswith(" $"):
                self.fail("'$' inside a group or before more of the pattern cannot become a grammar")
        return _alt(alts)

    def sequence(self):
        items = []
        while self.i < len(self.s) and self.s[self.i] not in "|)":
            if items and items[-1] == "$":
                self.fail("'$' before more of the pattern cannot become a grammar")
            c = self.s[self.i]
            if c == "$":
                self.i += 1
                items.append("$")
                continue
            if c == "^":
                self.fail("'^' inside the pattern (not at the start of an alternative) cannot become a grammar")
            atom = self.atom()
            items.append(self.quantified(atom))
        if items and items[-1] == "$":
            return " ".join(items[:-1] or ['""']) + " $"
        return " ".join(items) if items else '""'

    def quantified(self, atom):
        m = re.compile(r"\*|\+|\?|\{(\d+)(,(\d*))?\}").match(self.s, self.i)
        if not m:
            return atom
        self.i = m.end()
        if self.s.startswith("?", self.i):      # lazy: the same set of strings
            self.i += 1
        q = m.group()
        if q in "*+?":
            return f"({atom}){q}"
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        if hi is not None and hi < lo:
            self.fail(f"the quantifier {q} has its maximum below its minimum")
        if max(lo, hi or 0) > 1000:
            self.fail(f"the quantifier {q} counts above 1000")
        return f"({atom}){{{lo},{'' if hi is None else hi}}}"

    def atom(self):
        s, c = self.s, self.s[self.i]
        if c == "(":
            self.i += 1
            if s.startswith("?", self.i):
                for look, name in (("?=", "lookahead"), ("?!", "negative lookahead"), ("?<=", "lookbehind"),
                                   ("?<!", "negative lookbehind")):
                    if s.startswith(look, self.i):
                        self.fail(f"a {name} ({look}...) cannot become a grammar")
                m = re.compile(r"\?(:|<[A-Za-z_][A-Za-z0-9_]*>)").match(s, self.i)
                if not m:
                    self.fail(f"the group syntax {s[self.i - 1:self.i + 3]!r} is not supported")
                self.i = m.end()
            inner = self.alternation()
            if self.i >= len(s) or s[self.i] != ")":
                self.fail("a group is not closed with ')'")
            self.i += 1
            return inner
        if c == "[":
            return self.char_class()
        if c == ".":
            self.i += 1
            return json_chars(complement_ranges(_LINE_ENDS))
        if c in "*+?":
            self.fail(f"the quantifier {c!r} has nothing to repeat")
        if c == "{" and re.compile(r"\{\d+(,\d*)?\}").match(s, self.i):
            self.fail("a quantifier {m,n} has nothing to repeat")
        if c == "\\":
            return json_chars(self.escape(in_class=False)[0])
        self.i += 1
        return json_chars([(ord(c), ord(c))])

    def escape(self, in_class, negated=False):
        """The ranges of one escape (after the backslash is at self.i)."""
        s = self.s
        if self.i + 1 >= len(s):
            self.fail("the pattern ends with a lone backslash")
        e = s[self.i + 1]
        self.i += 2
        if e in "dDwWsS":
            return _class_escape(e, negated), True
        simple = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B}
        if e in simple:
            return [(simple[e], simple[e])], False
        if e == "b" and in_class:
            return [(0x08, 0x08)], False
        if e in "bB":
            self.fail(f"the word boundary \\{e} cannot become a grammar")
        if e == "0" and not (self.i < len(s) and s[self.i].isdigit()):
            return [(0, 0)], False
        if e.isdigit():
            self.fail(f"the backreference \\{e} cannot become a grammar")
        if e in "xu":
            n = 2 if e == "x" else 4
            h = s[self.i:self.i + n]
            if len(h) != n or not all(x in "0123456789abcdefABCDEF" for x in h):
                self.fail(f"\\{e} needs {n} hex digits")
            self.i += n
            cp = int(h, 16)
            if 0xD800 <= cp <= 0xDFFF:
                self.fail(f"the surrogate escape \\u{h} is not supported")
            return [(cp, cp)], False
        if e in "pPkc":
            self.fail(f"the escape \\{e} is not supported (Unicode properties, named backreferences and control "
                      f"escapes are not in the JSON Schema regex subset)")
        if e.isalnum():
            self.fail(f"the escape \\{e} is not a regex escape")
        return [(ord(e), ord(e))], False

    def char_class(self):
        s = self.s
        self.i += 1
        negate = s.startswith("^", self.i)
        self.i += negate
        ranges = []
        first = True
        while True:
            if self.i >= len(s):
                self.fail("a character class is not closed with ']'")
            c = s[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            if c == "]":        # '[]' matches nothing, '[^]' anything: ECMAScript, but not Python
                self.fail("an empty character class [] or [^] is read differently by regex engines")
            first = False
            lo = self.class_atom(negate)
            if isinstance(lo, list):
                ranges += lo
                continue
            if s.startswith("-", self.i) and self.i + 1 < len(s) and s[self.i + 1] != "]":
                self.i += 1
                hi = self.class_atom(negate)
                if isinstance(hi, list):
                    self.fail("a class escape (\\d, \\w, \\s) cannot end a range")
                if hi < lo:
                    self.fail(f"the range {chr(lo)}-{chr(hi)} is reversed")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        got = json_chars(complement_ranges(ranges) if negate else ranges)
        if got is None:
            self.fail("a character class matches no character")
        return got

    def class_atom(self, negated):
        c = self.s[self.i]
        if c == "\\":
            got, is_class = self.escape(in_class=True, negated=negated)
            return got if is_class else got[0][0]
        if c == "[" and self.s.startswith(("[:", "[=", "[."), self.i):
            self.fail("POSIX classes ([:alpha:]) are not in the JSON Schema regex subset")
        self.i += 1
        return ord(c)


# -- formats --------------------------------------------------------------------------------------------------------------

FORMAT_RULES = r'''
f-d28 ::= "0" [1-9] | "1" [0-9] | "2" [0-8]
f-date ::= [1-9] [0-9]{3} "-" (("0" [13578] | "1" [02]) "-" (f-d28 | "29" | "30" | "31")
                             | ("0" [469] | "11") "-" (f-d28 | "29" | "30") | "02-" f-d28) | f-leap "-02-29"
f-leap ::= [1-9] [0-9] ("0" [48] | [2468] [048] | [13579] [26]) | ([2468] [048] | [13579] [26]) "00"
f-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})?
           ("Z" | [-+] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
f-date-time ::= f-date "T" f-time
f-n ::= [0-9]{1,4}
f-dur-time ::= "T" (f-n "H" (f-n "M" (f-n "S")?)? | f-n "M" (f-n "S")? | f-n "S")
f-duration ::= "P" ((f-n "Y" (f-n "M" (f-n "D")?)? | f-n "M" (f-n "D")? | f-n "D") f-dur-time? | f-dur-time | f-n "W")
f-uuid ::= hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12}
f-label ::= [a-zA-Z0-9] ([a-zA-Z0-9-]{0,30} [a-zA-Z0-9])?
f-hostname ::= (f-label "."){0,3} [a-zA-Z] ([a-zA-Z0-9-]{0,30} [a-zA-Z0-9])?
f-email ::= [a-zA-Z0-9_+-]{1,32} ("." [a-zA-Z0-9_+-]{1,32}){0,3} "@" f-hostname
f-octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]
f-ipv4 ::= f-octet "." f-octet "." f-octet "." f-octet
f-h16 ::= hex{1,4}
f-ls32 ::= f-h16 ":" f-h16 | f-ipv4
f-ipv6 ::= (f-h16 ":"){6} f-ls32 | "::" (f-h16 ":"){5} f-ls32 | f-h16? "::" (f-h16 ":"){4} f-ls32
         | ((f-h16 ":"){0,1} f-h16)? "::" (f-h16 ":"){3} f-ls32 | ((f-h16 ":"){0,2} f-h16)? "::" (f-h16 ":"){2} f-ls32
         | ((f-h16 ":"){0,3} f-h16)? "::" f-h16 ":" f-ls32 | ((f-h16 ":"){0,4} f-h16)? "::" f-ls32
         | ((f-h16 ":"){0,5} f-h16)? "::" f-h16 | ((f-h16 ":"){0,6} f-h16)? "::"
f-pchar ::= [a-zA-Z0-9._~!$&'()*+,;=:@-] | "%" hex hex
f-uri ::= [a-z] [a-z0-9+.-]{0,9} "://" f-hostname (":" [1-9] [0-9]{0,3})? ("/" f-pchar{0,32}){0,8}
          ("?" (f-pchar | "/"){0,64})? ("#" (f-pchar | "/"){0,32})?
f-json-pointer ::= ("/" ([^"\\\x00-\x1F~/] | "~" [01]){0,32}){0,8}
'''
# (fewest, most) characters of each format's texts as written here (bounds: a length keyword within them holds)
FORMAT_LENGTH = {"f-date": (10, 10), "f-time": (9, 21), "f-date-time": (20, 32), "f-duration": (3, 32),
                 "f-uuid": (36, 36), "f-email": (3, 300), "f-hostname": (1, 140), "f-ipv4": (7, 15),
                 "f-ipv6": (2, 45), "f-uri": (5, 3 * 32 * 8 + 300 + 3 * 100 + 200), "f-json-pointer": (0, 8 * 33 * 6)}
FORMAT_RULE = {"date": "f-date", "time": "f-time", "date-time": "f-date-time", "duration": "f-duration",
               "uuid": "f-uuid", "email": "f-email", "idn-email": "f-email", "hostname": "f-hostname",
               "idn-hostname": "f-hostname", "ipv4": "f-ipv4", "ipv6": "f-ipv6", "uri": "f-uri",
               "uri-reference": "f-uri", "iri": "f-uri", "iri-reference": "f-uri", "json-pointer": "f-json-pointer"}


# -- the compiler ---------------------------------------------------------------------------------------------------------

def _type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v == int(v) else "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _decimal(v, where, kw) -> Decimal:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        _fail(where, kw, f"{kw} must be a number, got {v!r}")
    if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
        _fail(where, kw, f"{kw} must be a finite number, got {v!r}")
    return Decimal(v) if isinstance(v, int) else Decimal(repr(v))


class _Compiler:
    MAX_DEPTH = 40      # nested $ref / allOf inlining while merging

    def __init__(self, root_schema, strict=True):
        self.root = root_schema
        self.strict = strict
        self.not_enforced: list[str] = []
        self.rules: dict[str, str] = {}
        self.refs: dict[str, str] = {}      # $ref -> rule name
        self.cache: dict[str, str] = {}     # a schema's compact JSON -> its rule (shared sub-schemas)
        self.formats = False

    def unsupported(self, where, kw, why):
        if self.strict:
            _fail(where, kw, f"{why}; remove it, or set \"strict\": false in the request's json_schema to "
                             f"generate without it")
        self.not_enforced.append(f"{where}/{kw}")

    def name(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9-]+", "-", hint).strip("-").lower() or "s"
        base = "s-" + base[:40]
        n, k = base, 1
        while n in self.rules:
            k += 1
            n = f"{base}-{k}"
        self.rules[n] = ""          # reserved
        return n

    def rule(self, schema, hint: str, where: str) -> str:
        """The name of a rule matching ``schema``."""
        if schema is True or schema == {}:
            return "value"
        if schema is False:
            raise GrammarError(f"JSON Schema error at {where}: the schema is false, so no value can satisfy it")
        if not isinstance(schema, dict):
            raise GrammarError(f"JSON Schema error at {where}: a schema must be an object or a boolean, got "
                               f"{schema!r}")
        if "$ref" in schema and all(k == "$ref" or k in ANNOTATIONS for k in schema):
            return self.ref(schema["$ref"], where)
        key = dumps(schema)
        got = self.cache.get(key)
        if got:
            return got
        name = self.cache[key] = self.name(hint)
        self.rules[name] = self.body(schema, hint, where)
        return name

    def resolve(self, ref, where):
        if not isinstance(ref, str) or not ref.startswith("#"):
            _fail(where, "$ref", f"$ref {ref!r} cannot be resolved: only '#' and JSON pointers in the same "
                                 f"schema ('#/$defs/NAME', '#/definitions/NAME') are supported")
        target = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                _fail(where, "$ref", f"$ref {ref!r} cannot be resolved: {part!r} is not in the schema")
        if ref != "#" and not ref.startswith("#/"):
            _fail(where, "$ref", f"$ref {ref!r} cannot be resolved: anchors are not supported")
        return target

    def ref(self, ref, where) -> str:
        got = self.refs.get(ref)
        if got:
            return got
        target = self.resolve(ref, where)
        rule = self.refs[ref] = self.name("ref-" + str(ref).rsplit("/", 1)[-1])
        if target is False:
            _fail(where, "$ref", f"$ref {ref!r} points to the schema false: nothing satisfies it")
        if target is True or target == {}:
            self.rules[rule] = "value"
        elif not isinstance(target, dict):
            _fail(where, "$ref", f"$ref {ref!r} points to {target!r}, which is not a schema")
        else:
            self.rules[rule] = self.body(target, rule, ref)
        return rule

    # -- merging (allOf, and the keywords beside anyOf/oneOf/$ref) --

    def inline(self, s, where, depth):
        """``s`` with its $ref and allOf merged in (a dict, or True/False)."""
        if depth > self.MAX_DEPTH:
            _fail(where, "allOf", "allOf/$ref nest too deep (a reference cycle through allOf?)")
        if not isinstance(s, dict):
            if isinstance(s, bool):
                return s
            raise GrammarError(f"JSON Schema error at {where}: a schema must be an object or a boolean, got {s!r}")
        s = dict(s)
        parts = []
        if "$ref" in s:
            parts.append((self.resolve(s.pop("$ref"), where), f"{where}/$ref"))
        if "allOf" in s:
            subs = s.pop("allOf")
            if not isinstance(subs, list) or not subs:
                _fail(where, "allOf", "allOf must be a non-empty list of schemas")
            parts += [(x, f"{where}/allOf/{i}") for i, x in enumerate(subs)]
        out = s
        for sub, w in parts:
            out = self.merge(out, self.inline(sub, w, depth + 1), w)
        return out

    def merge(self, a, b, where):
        if a is False or b is False:
            return False
        if a is True:
            return b
        if b is True:
            return a
        out = dict(a)
        for k, v in b.items():
            if k in ANNOTATIONS or k not in out:
                if k not in ANNOTATIONS:
                    out[k] = v
                continue
            u = out[k]
            if u == v:
                continue
            if k == "type":
                ta, tb = ([x] if isinstance(x, str) else list(x) for x in (u, v))
                both = [t for t in ta if t in tb or (t == "integer" and "number" in tb)] + \
                       [t for t in tb if t == "integer" and "number" in ta and t not in ta]
                if not both:
                    _fail(where, "type", f"allOf asks for the types {u!r} and {v!r} at once: nothing satisfies it")
                out[k] = both if len(both) > 1 else both[0]
            elif k in ("minimum", "minLength", "minItems", "minProperties", "exclusiveMinimum"):
                out[k] = max(u, v)
            elif k in ("maximum", "maxLength", "maxItems", "maxProperties", "exclusiveMaximum"):
                out[k] = min(u, v)
            elif k == "required":
                out[k] = list(dict.fromkeys(list(u) + list(v)))
            elif k == "enum":
                keep = {_key(x) for x in v}
                out[k] = [x for x in u if _key(x) in keep]
                if not out[k]:
                    _fail(where, "enum", "allOf's enums have no value in common: nothing satisfies them")
            elif k == "properties":
                pa, pb = dict(u), v
                for name, sub in pb.items():
                    pa[name] = {"allOf": [pa[name], sub]} if name in pa else sub
                out[k] = pa
            elif k in ("items", "additionalProperties", "propertyNames"):
                out[k] = {"allOf": [u, v]}
            elif k == "multipleOf" and all(isinstance(x, int) and not isinstance(x, bool) for x in (u, v)):
                from math import lcm
                out[k] = lcm(u, v)
            else:
                _fail(where, k, f"allOf combines two different values of {k} ({u!r} and {v!r}), which cannot be "
                                f"merged into one grammar")
        # additionalProperties and items speak of the properties and prefixItems of their own schema only: a
        # property (an item) that only the other schema declares must satisfy them too
        for x, y in ((a, b), (b, a)):
            if "additionalProperties" in x and "properties" in y:
                props = dict(out.get("properties", {}))
                for name in y["properties"]:
                    if name not in x.get("properties", {}) and not any(_search(p, name) for p in
                                                                       x.get("patternProperties", {})):
                        props[name] = {"allOf": [props[name], x["additionalProperties"]]}
                out["properties"] = props
            if "items" in x and len(y.get("prefixItems", [])) > len(x.get("prefixItems", [])):
                pre = list(out["prefixItems"])
                for i in range(len(x.get("prefixItems", [])), len(pre)):
                    pre[i] = {"allOf": [pre[i], x["items"]]}
                out["prefixItems"] = pre
        return out

    # -- schema bodies --

    def body(self, s: dict, hint: str, where: str) -> str:
        """The right-hand side of a rule for the schema object ``s``."""
        if "$id" in s and where != "#":
            _fail(where, "$id", "$id inside a schema changes where its $refs point, which is not supported")
        for k in s:
            if k in ANNOTATIONS or k == "$id" or k.startswith("x-"):
                continue
            if k not in SUPPORTED:
                self.unsupported(where, k, f"the keyword {k!r} is not supported (a grammar cannot enforce it)")
        s = {k: v for k, v in s.items() if k in SUPPORTED}
        if "$ref" in s or "allOf" in s:
            merged = self.inline(s, where, 0)
            if merged is False:
                _fail(where, "allOf", "allOf includes the schema false: nothing satisfies it")
            if merged is True or not merged:
                return "value"
            return self.body(merged, hint, where)
        for kw in ("anyOf", "oneOf"):
            if kw in s:
                return self.union(s, kw, hint, where)
        if "const" in s or "enum" in s:
            return self.values(s, hint, where)
        t = s.get("type")
        if t is None:
            fam = [f for f in ("object", "array", "string", "number") if BY_TYPE[f] & set(s)]
            if not fam:
                return "value"
            t = fam
        types = [t] if isinstance(t, str) else t
        if not isinstance(types, list) or not types or any(x not in TYPES for x in types):
            _fail(where, "type", f"type must be one of {', '.join(TYPES)} or a non-empty list of them, got {t!r}")
        types = list(dict.fromkeys(types))
        if "number" in types and "integer" in types:
            types.remove("integer")
        alts = []
        for x in types:
            if x == "object":
                alts.append(self.object(s, hint, where))
            elif x == "array":
                alts.append(self.array(s, hint, where))
            elif x == "string":
                alts.append(self.string(s, hint, where))
            elif x in ("number", "integer"):
                alts.append(self.number(s, x, where))
            else:
                alts.append(x)
        return " | ".join(alts)

    def values(self, s, hint, where):
        kw = "const" if "const" in s else "enum"
        vals = [s["const"]] if kw == "const" else s["enum"]
        if not isinstance(vals, list) or not vals:
            _fail(where, "enum", f"enum must be a non-empty list of values, got {vals!r}")
        if kw == "const" and "enum" in s:
            vals = [v for v in vals if _key(v) in {_key(x) for x in s["enum"]}]
        rest = {k: v for k, v in s.items() if k not in ("const", "enum")}
        if rest:                    # keep the values the rest of the schema allows (as this grammar reads them)
            rec = Recogniser(self.sub_grammar(lambda c: c.rule(rest, "rest", where)))
            vals = [v for v in vals if rec.accepts(dumps(v).encode())]
        if not vals:
            _fail(where, kw, f"no value of the {kw} satisfies the rest of the schema "
                             f"({', '.join(f'{k}: {v!r}' for k, v in rest.items())})")
        return _alt([literal(dumps(v)) for v in vals])

    def union(self, s, kw, hint, where):
        subs = s[kw]
        if not isinstance(subs, list) or not subs:
            _fail(where, kw, f"{kw} must be a non-empty list of schemas")
        rest = {k: v for k, v in s.items() if k != kw}
        branches = []
        for i, sub in enumerate(subs):
            w = f"{where}/{kw}/{i}"
            if rest:
                sub = self.merge(dict(rest), self.inline(sub, w, 0), w)
            if sub is False:
                continue
            branches.append((i, sub, w))
        if not branches:
            _fail(where, kw, f"every schema of {kw} is false: nothing satisfies it")
        if kw == "oneOf":
            for x in range(len(branches)):
                for y in range(x + 1, len(branches)):
                    if not self.disjoint(branches[x][1], branches[y][1], where):
                        self.unsupported(where, kw, f"oneOf's schemas {branches[x][0]} and {branches[y][0]} may "
                                                    f"both match one value, and a grammar cannot exclude that "
                                                    f"(give them different types or a different const of a "
                                                    f"required property, or use anyOf)")
                        break
        alts = []
        for i, sub, w in branches:
            alts.append(self.rule(sub, f"{hint}-{i}", w))
        return " | ".join(alts)

    def kinds(self, s, where, depth=0):
        """(the types of the values that validate, the types of the values this grammar writes, the possible
        values as canonical texts); None where not a finite set."""
        s = self.inline(s, where, depth)
        if s is True:
            return None, None, None
        if s is False:
            return set(), set(), set()
        vals = None
        if "const" in s:
            vals = {_key(s["const"])}
        elif isinstance(s.get("enum"), list):
            vals = {_key(v) for v in s["enum"]}
        valid = None if vals is None else {_type_of(json.loads(v)) for v in vals}
        if "type" in s:
            t = {s["type"]} if isinstance(s["type"], str) else set(s["type"])
            t |= {"integer"} if "number" in t else set()
            valid = t if valid is None else valid & t
        written = valid
        if written is None:
            fam = {f for f in ("object", "array", "string", "number") if BY_TYPE[f] & set(s)}
            written = (fam | ({"integer"} if "number" in fam else set())) or None
        for kw in ("anyOf", "oneOf"):
            if isinstance(s.get(kw), list):
                got = [self.kinds(x, where, depth + 1) for x in s[kw]]
                parts = []
                for n in range(3):
                    xs = [g[n] for g in got]
                    parts.append(None if any(x is None for x in xs) else set().union(*xs))
                valid, written, vals = (b if a is None else a if b is None else a & b
                                        for a, b in zip((valid, written, vals), parts))
        return valid, written, vals

    def excludes(self, x, y, where, depth=0) -> bool:
        """Whether no value this grammar writes for schema x validates against schema y."""
        if depth > 8:
            return False
        x, y = self.inline(x, where, 0), self.inline(y, where, 0)
        if x is False or y is False:
            return True
        if x is True or y is True:
            return False
        _, xw, xv = self.kinds(x, where)
        yv_t, _, yv = self.kinds(y, where)
        if xw is not None and yv_t is not None and not xw & yv_t:
            return True
        if xv is not None and yv is not None and not xv & yv:
            return True
        if xw is not None and xw <= {"object"}:     # a property both declare, required here, told apart
            xp, yp = x.get("properties", {}), y.get("properties", {})
            for name in x.get("required", []):
                if name in xp and name in yp and self.excludes(xp[name], yp[name], where, depth + 1):
                    return True
        return False

    def disjoint(self, a, b, where) -> bool:
        try:
            return self.excludes(a, b, where) and self.excludes(b, a, where)
        except GrammarError:        # a reference cycle: not shown disjoint
            return False

    def sub_grammar(self, make) -> Grammar:
        """A grammar of its own for a part of this schema (``make(compiler)`` gives its root expression)."""
        c = _Compiler(self.root, self.strict)
        top = make(c)
        self.not_enforced += [x for x in c.not_enforced if x not in self.not_enforced]
        return Grammar.parse(BASE + FORMAT_RULES + "\n".join(f"{n} ::= {b}" for n, b in c.rules.items())
                             + f"\nroot ::= {top}\n")

    def number(self, s, t, where):
        lo = hi = None
        lo_x = hi_x = False
        for kw in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if kw not in s:
                continue
            v = s[kw]
            if isinstance(v, bool) and kw.startswith("exclusive"):      # draft 4 form
                continue
            d = _decimal(v, where, kw)
            excl = kw.startswith("exclusive") or (isinstance(s.get("exclusive" + kw[0].upper() + kw[1:]), bool)
                                                 and s["exclusive" + kw[0].upper() + kw[1:]])
            if kw.endswith("inimum") and (lo is None or d > lo or (d == lo and excl)):
                lo, lo_x = d, excl
            if kw.endswith("aximum") and (hi is None or d < hi or (d == hi and excl)):
                hi, hi_x = d, excl
        step = s.get("multipleOf")
        if step is not None:
            d = _decimal(step, where, "multipleOf")
            if d <= 0:
                _fail(where, "multipleOf", f"multipleOf must be above 0, got {step!r}")
            if d != int(d):
                self.unsupported(where, "multipleOf", f"multipleOf {step!r} is not an integer (only integer "
                                                      f"steps are enforced)")
                step = None
            else:
                step = int(d)
                t = "integer"
        if t == "integer" or step:
            ilo = None if lo is None else (int(floor(lo)) + 1 if lo_x and lo == int(lo) else int(ceil(lo)))
            ihi = None if hi is None else (int(ceil(hi)) - 1 if hi_x and hi == int(hi) else int(floor(hi)))
            if step and step > 1:
                return self.multiples(step, ilo, ihi, where)
            if ilo is None and ihi is None:
                return "integer"
            got = int_range(ilo, ihi, max([16] + [len(str(abs(x))) for x in (ilo, ihi) if x is not None]))
        else:
            if lo is None and hi is None:
                return "number"
            got = number_range(lo, lo_x, hi, hi_x)
        if got is None:
            kw = "maximum" if "maximum" in s else "exclusiveMaximum" if "exclusiveMaximum" in s else "minimum"
            _fail(where, kw, f"no {t} lies between the bounds ({lo}{' excluded' if lo_x else ''} to {hi}"
                             f"{' excluded' if hi_x else ''}): nothing satisfies the schema")
        return got

    def multiples(self, k, lo, hi, where):
        """The multiples of k between lo and hi: an unbounded side (beyond the bound's own side of zero) as the
        digits read left to right keeping the value mod k, the rest listed; a side that is unbounded but starts
        beyond k as the 2048 multiples nearest its bound (a subset)."""
        k_ok = k <= 1000
        neg = k_ok and lo is None and (hi is None or hi >= -k)     # every negative multiple is within the bounds
        pos = k_ok and hi is None and (lo is None or lo <= k)
        a, b = (0 if neg else lo), (0 if pos else hi)
        if a is None:
            a = 0 if b is None else (b // k) * k - 2047 * k
        if b is None or b - a >= 2048 * k:
            b = -(-a // k) * k + 2047 * k
        vals = list(range(-(-a // k) * k, b + 1, k))
        if not vals and not (neg or pos):
            _fail(where, "multipleOf", f"no multiple of {k} lies between {lo} and {hi}")
        alts = [" ".join(f'"{c}"' for c in str(v)) for v in vals]
        if neg or pos:
            names = [self.name(f"mod{k}-{r}") for r in range(k)]   # m<r>: the digits left, value so far = r mod k
            for r in range(k):
                by_next = _group(lambda dg: (r * 10 + dg) % k, range(10))
                self.rules[names[r]] = " | ".join([_alt(_runs(ds)) + f" {names[n]}" for n, ds in by_next.items()]
                                                  + (['""'] if r == 0 else []))
            lead = _alt([_alt(_runs(ds)) + f" {names[n]}" for n, ds in
                         _group(lambda dg: dg % k, range(1, 10)).items()])
            alts += ([f'"-" {lead}'] if neg else []) + ([lead] if pos else [])
        return _alt(alts)

    def string(self, s, hint, where):
        lo, hi = _bounds(s, "minLength", "maxLength", where)
        fmt, pat = s.get("format"), s.get("pattern")
        if fmt is not None and (not isinstance(fmt, str)):
            _fail(where, "format", f"format must be a string, got {fmt!r}")
        if fmt in CHECKED_FORMATS:
            self.unsupported(where, "format", f"the format {fmt!r} is not supported (supported: "
                                              f"{', '.join(sorted(FORMATS))})")
        if fmt not in FORMATS:
            fmt = None
        if pat is not None and not isinstance(pat, str):
            _fail(where, "pattern", f"pattern must be a string, got {pat!r}")
        body = None
        if fmt is not None:
            self.formats = True
            body = FORMAT_RULE[fmt]
        if pat is not None:
            if body is not None:
                self.unsupported(where, "pattern", "pattern together with format is not supported")
            else:
                body = _Regex(pat, lambda m: _fail(where, "pattern", f"{m} (in {pat!r})")).compile()
        if fmt is not None and (lo or hi is not None):
            least, most = FORMAT_LENGTH[body]
            if lo <= least and (hi is None or hi >= most):
                lo, hi = 0, None        # every text of the format is within the length bounds
        if body is not None:
            if lo or hi is not None:
                self.unsupported(where, "maxLength" if hi is not None else "minLength",
                                 "minLength/maxLength together with pattern or format is not supported")
            return f'"\\"" {body} "\\""'
        if lo == 0 and hi is None:
            return "string"
        return '"\\"" ' + (f"char{{{lo},}}" if hi is None else f"char{{{lo},{hi}}}") + ' "\\""'

    def object(self, s, hint, where):
        props = s.get("properties", {})
        if not isinstance(props, dict):
            _fail(where, "properties", "properties must be an object mapping names to schemas")
        required = s.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            _fail(where, "required", "required must be a list of property names")
        extra = s.get("additionalProperties")
        patterns = s.get("patternProperties") or {}
        names_schema = s.get("propertyNames")
        if not isinstance(patterns, dict):
            _fail(where, "patternProperties", "patternProperties must be an object mapping regexes to schemas")
        props = dict(props)
        key_check = None
        if names_schema is not None and names_schema is not True:
            if self.key_rule(names_schema, where, _Compiler(self.root)) is None:
                key_check = False
            else:
                key_check = Recogniser(self.sub_grammar(lambda c: self.key_rule(names_schema, where, c)))
        for r in required:
            if r not in props:
                if patterns:
                    hits = [p for p in patterns if _search(p, r)]
                    if hits:
                        props[r] = patterns[hits[0]]
                        continue
                if extra is False:
                    _fail(where, "required", f"property {r!r} is required but additionalProperties is false and "
                                             f"it is not in properties: nothing satisfies the schema")
                props[r] = extra if isinstance(extra, dict) else True
        for name in list(props):        # a declared name that a pattern matches must satisfy both schemas
            for p, sub in patterns.items():
                if _search(p, name):
                    props[name] = {"allOf": [props[name], sub]}
            if key_check is False or (key_check is not None and not key_check.accepts(dumps(name).encode())):
                if name in required:
                    _fail(where, "propertyNames", f"the required property {name!r} does not satisfy propertyNames")
                props[name] = False
        kvs = []
        for key, sub in props.items():
            if sub is False:
                if key in required:
                    _fail(f"{where}/properties", key, f"property {key!r} is required but its schema is false")
                continue
            val = self.rule(sub, f"{hint}-{key}", f"{where}/properties/{key}")
            kvs.append((key in required, f'{literal(dumps(key))} ws ":" ws {val}'))
        extra_kv = self.extra_members(s, props, patterns, extra, names_schema, hint, where)
        n_max, n_min = s.get("maxProperties"), s.get("minProperties")
        if n_min is not None and n_min > sum(r for r, _ in kvs):
            if extra_kv is None and n_min > len(kvs):
                _fail(where, "minProperties", f"minProperties {n_min} is above the {len(kvs)} properties allowed")
            self.unsupported(where, "minProperties", f"minProperties {n_min} is more than the required properties")
        if n_max is not None and (extra_kv is not None or n_max < len(kvs)):
            if n_max < sum(r for r, _ in kvs):
                _fail(where, "maxProperties", f"maxProperties {n_max} is below the number of required properties")
            self.unsupported(where, "maxProperties", f"maxProperties {n_max} is less than the properties allowed")
        if not kvs and extra_kv is None:
            return '"{" ws "}"'
        if not kvs and extra_kv == "member":
            return "object"
        n = len(kvs)
        first, more = ['""'] * (n + 1), ['""'] * (n + 1)
        if extra_kv is not None:
            tail = self.name(f"{hint}-extra")
            self.rules[tail] = f'(ws "," ws {extra_kv})*'
            first[n], more[n] = f"({extra_kv} {tail})?", tail
        for i in range(n - 1, -1, -1):
            req, kv = kvs[i]
            f, m = self.name(f"{hint}-f{i}"), self.name(f"{hint}-m{i}")
            self.rules[m] = f'ws "," ws {kv} {more[i + 1]}' + ("" if req else f" | {more[i + 1]}")
            self.rules[f] = f"{kv} {more[i + 1]}" + ("" if req else f" | {first[i + 1]}")
            first[i], more[i] = f, m
        return f'"{{" ws {first[0]} ws "}}"'

    def key_rule(self, names_schema, where, c=None) -> str:
        """An expression for the keys (JSON strings) that propertyNames allows, with its rules in compiler c."""
        c = c or self
        w = f"{where}/propertyNames"
        sub = self.inline(names_schema, w, 0)
        if sub is True or sub == {}:
            return "string"
        t = sub.get("type", "string") if sub else None
        if t != "string" and not (isinstance(t, list) and "string" in t):
            return None         # no key can be written
        return c.rule(dict(sub, type="string"), "key", w)

    def extra_members(self, s, props, patterns, extra, names_schema, hint, where):
        """GBNF for one member beyond the declared properties, or None when none may be written."""
        if len(patterns) > 1:
            self.unsupported(where, "patternProperties", "patternProperties with more than one pattern")
            patterns = dict(list(patterns.items())[:1])
        if patterns:
            (p, sub), = patterns.items()
            key = '"\\"" ' + _Regex(p, lambda m: _fail(where, "patternProperties", f"{m} (in {p!r})")).compile() \
                + ' "\\""'
            rec = Recogniser(Grammar.parse(BASE + f"root ::= {key}\n"))
            if any(rec.accepts(dumps(n).encode()) for n in props):
                return None             # a pattern key could repeat a declared one: write only declared ones
            if names_schema is not None:
                return None
            if sub is False:
                return None
            k = self.name(f"{hint}-pkey")
            self.rules[k] = key
            return f'{k} ws ":" ws {self.rule(sub, hint + "-pvalue", where + "/patternProperties/" + p)}'
        if extra is False or (extra is None and props) or (extra is True and props and names_schema is None):
            return None
        value = "value" if extra in (None, True) else self.rule(extra, hint + "-value", where +
                                                                 "/additionalProperties")
        if names_schema is not None:
            if props:
                return None
            key = self.key_rule(names_schema, where)
            return None if key is None else f'{key} ws ":" ws {value}'
        if not props:
            return "member" if value == "value" else f'string ws ":" ws {value}'
        k = self.name(f"{hint}-other-key")
        self.rules[k] = self.string_except([n for n in props], k)
        return f'{k} ws ":" ws {value}'

    def string_except(self, names, base):
        """A JSON string without escapes whose text is none of ``names``: the names' trie, leaving it anywhere."""
        plain = '[^"\\\\\\x00-\\x1F]'
        trie: dict = {}
        for n in names:
            if any(c in '"\\' or ord(c) < 0x20 for c in n):
                continue                # such a name is never written without escapes
            node = trie
            for c in n:
                node = node.setdefault(c, {})
            node[""] = {}

        def emit(node, name):
            alts = [] if "" in node else ['"\\""']
            kids = [c for c in node if c]
            if kids:
                other = "[^\"\\\\\\x00-\\x1F" + "".join(_cls_body([(ord(c), ord(c))]) for c in kids) + "]"
            else:
                other = plain
            alts.append(f'{other} {plain}* "\\""')
            for i, c in enumerate(kids):
                sub = self.name(f"{base}-{i}")
                emit(node[c], sub)
                alts.append(f"{literal(c)} {sub}")
            self.rules[name] = " | ".join(alts)

        start = self.name(base + "-t")
        emit(trie, start)
        return f'"\\"" {start}'

    def array(self, s, hint, where):
        lo, hi = _bounds(s, "minItems", "maxItems", where)
        prefix = s.get("prefixItems", [])
        if not isinstance(prefix, list):
            _fail(where, "prefixItems", "prefixItems must be a list of schemas")
        items = s.get("items", True)
        if isinstance(items, list):     # the draft 7 tuple form: items [...] and additionalItems
            if "prefixItems" in s:
                _fail(where, "items", "items as a list (draft 7) together with prefixItems")
            prefix, items = items, s.get("additionalItems", True)
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
            if lo > hi:
                _fail(where, "minItems", f"minItems {lo} is more than the {len(prefix)} prefixItems that "
                                         f"items: false allows")
        if s.get("uniqueItems") and (hi is None or hi > 1):
            self.unsupported(where, "uniqueItems", "uniqueItems (with maxItems above 1) cannot be enforced by a "
                                                   "grammar")
        for i, sub in enumerate(prefix):
            if sub is False and (lo > i):
                _fail(f"{where}/prefixItems", str(i), "a required item's schema is false")
            if sub is False:
                hi = i if hi is None else min(hi, i)
                break
        if hi == 0:
            return '"[" ws "]"'

        def sep(i):
            return "" if i == 0 else 'ws "," ws '

        k = min(len(prefix), hi) if hi is not None else len(prefix)
        # the items after the prefix: count between lo - k and hi - k
        if items is False or (hi is not None and hi <= k):
            tail = '""'
        else:
            item = self.rule(items, hint + "-item", where + "/items")
            rmin = max(lo - k, 0)
            rmax = None if hi is None else hi - k
            if k == 0:
                inner = f"{item} (ws \",\" ws {item}){{{max(rmin - 1, 0)},{'' if rmax is None else rmax - 1}}}"
                tail = inner if rmin > 0 else f"({inner})?"
            else:
                tail = f"(ws \",\" ws {item}){{{rmin},{'' if rmax is None else rmax}}}"
        expr = tail
        for i in range(k - 1, -1, -1):
            sub = self.rule(prefix[i], f"{hint}-p{i}", f"{where}/prefixItems/{i}")
            seq = f"{sep(i)}{sub} {expr}"
            expr = f"({seq})" if i < lo else f"({seq})?"
        return f'"[" ws {expr} ws "]"'


def _canon(v):
    """A JSON value with integral floats as ints (JSON Schema compares 1 and 1.0 equal)."""
    if isinstance(v, float) and v == int(v):
        return int(v)
    if isinstance(v, list):
        return [_canon(x) for x in v]
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    return v


def _key(v) -> str:
    return json.dumps(_canon(v), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _search(pattern, text) -> bool:
    """Python's re.search, as the `jsonschema` package checks patterns (False for a regex it cannot read)."""
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def _runs(ds):
    out, start = [], ds[0]
    for i, c in enumerate(ds):
        if i + 1 == len(ds) or ds[i + 1] != c + 1:
            out.append(_digits(start, c))
            if i + 1 < len(ds):
                start = ds[i + 1]
    return out


def _group(f, xs):
    out: dict = {}
    for x in xs:
        out.setdefault(f(x), []).append(x)
    return out


def _bounds(s, lo_key, hi_key, where):
    lo, hi = s.get(lo_key, 0), s.get(hi_key)
    for k, v in ((lo_key, lo), (hi_key, hi)):
        if isinstance(v, float) and v == int(v):
            v = int(v)
            lo, hi = (v, hi) if k == lo_key else (lo, v)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            _fail(where, k, f"{k} must be a non-negative integer, got {v!r}")
    if hi is not None and hi < lo:
        _fail(where, lo_key, f"{lo_key} {lo} is above {hi_key} {hi}: nothing satisfies the schema")
    if max(lo, hi or 0) > 10000:
        _fail(where, hi_key if (hi or 0) > 10000 else lo_key, f"{lo_key}/{hi_key} above 10000 are not supported")
    return lo, hi


def _load(schema):
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except ValueError as e:
            raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
    return schema


def schema_to_gbnf(schema, strict: bool = True) -> str:
    """GBNF text for ``schema`` (a dict, a JSON string, or None/"json_object" for any JSON object); with
    strict=False, keywords a grammar cannot enforce are left out and listed in comments (# not enforced: ...)."""
    return _compile(schema, strict)[0]


def _compile(schema, strict=True):
    if schema is None or schema == "json_object":
        return BASE + "root ::= object\n", []
    schema = _load(schema)
    c = _Compiler(schema, strict)
    top = c.rule(schema, "root", "#")
    lines = [f"{n} ::= {body}" for n, body in c.rules.items()]
    notes = "".join(f"# not enforced: {x}\n" for x in c.not_enforced)
    return notes + BASE + FORMAT_RULES * c.formats + "\n".join(lines) + f"\nroot ::= {top}\n", c.not_enforced


def schema_to_grammar(schema, strict: bool = True) -> Grammar:
    """The compiled grammar of ``schema`` (see schema_to_gbnf); errors say what in the schema is wrong and where.
    ``grammar.not_enforced`` lists the keywords left out (strict=False only)."""
    text, skipped = _compile(schema, strict)
    try:
        g = Grammar.parse(text)
    except GrammarError as e:
        raise GrammarError(f"the JSON schema cannot be satisfied or compiled: {e}") from None
    g.not_enforced = skipped
    return g


_MATCH: dict[str, Recogniser] = {}


def matches(schema, text: str, strict: bool = True) -> bool:
    """Whether the grammar compiled from ``schema`` accepts ``text`` (a complete output). A schema that cannot be
    compiled raises GrammarError."""
    key = dumps(_load(schema)) + str(strict)
    rec = _MATCH.get(key)
    if rec is None:
        rec = Recogniser(schema_to_grammar(schema, strict))
        if len(_MATCH) >= 64:
            _MATCH.pop(next(iter(_MATCH)))
        _MATCH[key] = rec
    return rec.accepts(text.encode("utf-8", "surrogatepass"))


_COMPILED: dict[str, Grammar] = {}


def constraint(response_format=None, grammar=None) -> Grammar | None:
    """The grammar a generation is constrained by, from OpenAI-style ``response_format`` and/or ``grammar``:
    {"type": "text"} or None: none; {"type": "json_object"}: any JSON object; {"type": "json_schema",
    "json_schema": {"schema": {...}, "strict": false}} (or {"type": "json_schema", "schema": {...}}): JSON valid
    against the schema (strict: false leaves out what a grammar cannot enforce, listed in the grammar's
    ``not_enforced``); {"type": "grammar", "grammar": "GBNF text"}; ``grammar``: GBNF text or a compiled Grammar.
    Compiled grammars are kept by their text, so a schema used again reuses its cached states and masks."""
    if grammar is not None and response_format not in (None, {"type": "text"}):
        raise GrammarError("give either response_format or grammar, not both")
    if isinstance(grammar, Grammar):
        return grammar
    skipped = []
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
            text, skipped = _compile("json_object" if schema is None else schema)
        elif kind == "json_schema":
            spec = response_format.get("json_schema", response_format)
            if not isinstance(spec, dict) or "schema" not in spec:
                raise GrammarError("response_format json_schema needs the schema: {'type': 'json_schema', "
                                   "'json_schema': {'name': ..., 'schema': {...}}}")
            strict = spec.get("strict", True)
            if strict is None:
                strict = True
            if not isinstance(strict, bool):
                raise GrammarError(f"json_schema strict must be true or false, got {strict!r}")
            text, skipped = _compile(spec["schema"], strict)
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
        got.not_enforced = skipped
        if len(_COMPILED) >= 32:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = got
    return got
