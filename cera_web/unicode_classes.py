"""Unicode-property regular expressions that run on the stdlib `re` module.

Pre-tokenizer patterns are written in the dialect of HF `tokenizers` / llama.cpp, which uses
`\\p{L}` (any letter), `\\p{N}` (any number) and `\\s` (Unicode White_Space). The stdlib `re` module
knows none of `\\p{..}`, and its `\\s` also matches U+001C..U+001F, which White_Space does not.
`translate()` rewrites a pattern into an exact `re` equivalent:

- `\\p{L}` / `\\p{N}` become character classes listing, as compact ranges, every code point whose
  general category starts with L / N according to `unicodedata` (built once, at first use);
- `\\s` / `\\S` become the White_Space class and its complement.

With `keep_properties=True` the `\\p{..}` escapes are left as they are (for the third-party `regex`
module, which knows them natively) and only `\\s` / `\\S` are rewritten, so both engines agree on
what whitespace is. The two engines then differ only on code points that are unassigned in the
running Python's `unicodedata` but assigned in the `regex` module's (newer) Unicode tables.
"""

from __future__ import annotations

import functools
import unicodedata

# The White_Space property (PropList.txt). It has not changed since Unicode 6.3 (when U+180E left).
WHITE_SPACE = [
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
]

# Letters and numbers only live in planes 0-3; plane 14 holds tags and variation selectors (Cf/Mn),
# planes 4-13 are unassigned and 15-16 are private use. Scanning these spans is therefore complete
# (and checked by the test suite against a full scan), and about four times faster than 0..0x10FFFF.
_SCAN_SPANS = ((0, 0x40000), (0xE0000, 0xE1000))


@functools.lru_cache(maxsize=None)
def category_ranges(major: str) -> tuple[tuple[int, int], ...]:
    """Inclusive code point ranges whose general category starts with `major` ("L" or "N")."""
    if major == "L":
        # str.isalpha() is exactly "category in Lu, Ll, Lt, Lm, Lo" and is the fastest test.
        def test(c):
            return c.isalpha()
    elif major == "N":
        # Every N* character is isnumeric(); isnumeric() also admits some Lo ideographs (e.g. 一),
        # so the category check settles the few candidates.
        category = unicodedata.category

        def test(c):
            return c.isnumeric() and category(c)[0] == "N"
    else:
        raise ValueError(f"unsupported Unicode property {major!r}; only L and N are built")
    ranges: list[tuple[int, int]] = []
    for lo, hi in _SCAN_SPANS:
        start = -1
        for cp in range(lo, hi):
            if test(chr(cp)):
                if start < 0:
                    start = cp
            elif start >= 0:
                ranges.append((start, cp - 1))
                start = -1
        if start >= 0:
            ranges.append((start, hi - 1))
    return tuple(ranges)


def _esc(cp: int) -> str:
    return f"\\U{cp:08x}" if cp > 0xFFFF else f"\\u{cp:04x}"


def class_body(ranges) -> str:
    """The inside of a `[...]` class (no brackets) matching the given inclusive ranges."""
    return "".join(_esc(a) if a == b else f"{_esc(a)}-{_esc(b)}" for a, b in ranges)


@functools.lru_cache(maxsize=None)
def _property_body(name: str) -> str:
    if name not in ("L", "N"):
        raise ValueError(f"unsupported \\p{{{name}}} in pre-tokenizer pattern (only L and N)")
    return class_body(category_ranges(name))


@functools.lru_cache(maxsize=64)
def translate(pattern: str, keep_properties: bool = False) -> str:
    """Rewrite `pattern` (tokenizers dialect) for `re` (or, with keep_properties, for `regex`)."""
    ws = class_body(WHITE_SPACE)
    out: list[str] = []
    in_class = False
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError(f"pattern ends with a lone backslash: {pattern!r}")
            e = pattern[i + 1]
            if e in "pP":
                close = pattern.find("}", i)
                if pattern[i + 2: i + 3] != "{" or close < 0:
                    raise ValueError(f"malformed \\{e} escape in {pattern!r}")
                name = pattern[i + 3: close]
                if e == "P":
                    raise ValueError(f"\\P{{{name}}} is not supported in pre-tokenizer patterns")
                if keep_properties:
                    out.append(pattern[i: close + 1])
                else:
                    body = _property_body(name)
                    out.append(body if in_class else f"[{body}]")
                i = close + 1
                continue
            if e == "s":
                out.append(ws if in_class else f"[{ws}]")
            elif e == "S":
                if in_class:
                    raise ValueError(f"\\S inside a character class is not supported: {pattern!r}")
                out.append(f"[^{ws}]")
            else:
                out.append(pattern[i: i + 2])  # any other escape means the same in both engines
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            # a ']' right after '[' or '[^' is a literal member, not the end of the class
            if pattern[i: i + 1] == "^":
                out.append("^")
                i += 1
            if pattern[i: i + 1] == "]":
                out.append("\\]")
                i += 1
            continue
        out.append(c)
        i += 1
    if in_class:
        raise ValueError(f"unterminated character class in {pattern!r}")
    return "".join(out)
