"""Grammars for constrained decoding: GBNF text -> a byte-level pushdown recogniser -> per-step token masks.

    g = Grammar.parse('root ::= "(" root ")" root | ""')      # or json_schema.schema_to_grammar(schema)
    vocab = TokenTrie.from_tokenizer(tokenizer)                # once per model
    m = Matcher(g, vocab)
    words = m.mask()          # np.uint32 bitset over the vocabulary: bit t of words[t >> 5] = token t allowed
    m.advance(token_id)       # after the token is sampled

The grammar language (GBNF, llama.cpp's notation): ``name ::= alternatives`` (a rule may continue on later lines;
``#`` starts a comment), ``|`` alternation, sequences, ``( ... )`` groups, ``* + ?`` and ``{m}``, ``{m,}``, ``{m,n}``
repetition, ``"literals"`` and ``[character classes]`` (ranges ``a-z``, negation ``[^...]``) with the escapes
``\\n \\r \\t \\\\ \\" \\] \\- \\xHH \\uHHHH \\UHHHHHHHH``, ``.`` for any character; the start rule is ``root``.

How it works. Every character class is compiled to UTF-8 byte ranges (a class of non-ASCII characters becomes a small
rule of byte sequences), so the recogniser reads bytes, as tokens are bytes. Rules are laid out in one flat array of
elements (a byte set, a rule reference, or the end of an alternative). A parser position is a *stack*: the element
to match next plus the frames to return to (interned to small ints; a reference that ends its alternative pushes no
frame, so right recursion and repetition do not grow the stack). The recogniser's state is the frozenset of stacks
that are still alive, plus ACCEPT when the input may end here. Left recursion is rejected when the grammar is built.

Token masks. The vocabulary is a byte trie whose tokens are numbered in depth-first order, so every subtree is one
range of that order; each node also knows the set of bytes used anywhere below it. A mask walks the trie from the
current state, following only children whose byte keeps some stack alive; where every byte below a node leaves the
state unchanged (inside a JSON string, most text), the whole subtree is taken at once without visiting
it; likewise where every byte below leads to one same next state, as many times as the subtree is deep (a string
with a maxLength, a run of digits). States
and transitions are memoised, and finished masks are cached per state, so a state met again costs a dict lookup.
"""
from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np

from .errors import InputError


class GrammarError(InputError):
    """A grammar or JSON schema that is malformed or cannot be satisfied (raised before generation)."""


MAX_CODEPOINT = 0x10FFFF
ACCEPT = -1                 # the stack id meaning "the input may end here"
_T, _R, _END = 0, 1, 2      # element kinds: byte set, rule reference, end of alternative


# -- character classes -> UTF-8 byte sequences -------------------------------------------------------------------------

def _utf8(cp: int) -> bytes:
    """UTF-8 bytes of a code point (surrogates included, so range arithmetic stays simple)."""
    if cp < 0x80:
        return bytes((cp,))
    if cp < 0x800:
        return bytes((0xC0 | cp >> 6, 0x80 | cp & 0x3F))
    if cp < 0x10000:
        return bytes((0xE0 | cp >> 12, 0x80 | cp >> 6 & 0x3F, 0x80 | cp & 0x3F))
    return bytes((0xF0 | cp >> 18, 0x80 | cp >> 12 & 0x3F, 0x80 | cp >> 6 & 0x3F, 0x80 | cp & 0x3F))


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """The code points lo..hi as a list of byte-range sequences: a byte string is the UTF-8 of one of them exactly
    when, for some sequence, each of its bytes lies in the corresponding (first, last) range."""
    out = []

    def split(s, e):
        if s > e:
            return
        n = len(_utf8(s))
        for i in range(1, n):       # make s..e share all but whole trailing 6-bit groups
            m = (1 << 6 * i) - 1
            if s & ~m != e & ~m:
                if s & m:
                    split(s, s | m)
                    split((s | m) + 1, e)
                    return
                if e & m != m:
                    split(s, (e & ~m) - 1)
                    split(e & ~m, e)
                    return
        out.append(list(zip(_utf8(s), _utf8(e))))

    for a, b in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODEPOINT)):
        split(max(lo, a), min(hi, b))
    return out


def _byteset(a: int, b: int) -> int:
    return ((1 << (b + 1)) - 1) ^ ((1 << a) - 1)


def normalise_ranges(ranges) -> list[tuple[int, int]]:
    """Code-point ranges (a, b) inclusive, sorted and merged where they touch or overlap."""
    out = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def complement_ranges(ranges) -> list[tuple[int, int]]:
    """The code points outside the ranges, never a surrogate."""
    out, nxt = [], 0
    for a, b in normalise_ranges(list(ranges) + [(0xD800, 0xDFFF)]):     # never a surrogate
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = max(nxt, b + 1)
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return out


# -- GBNF parsing ------------------------------------------------------------------------------------------------------
# The parsed form: rules[name] = list of alternatives; an alternative is a list of items:
#   ("bytes", int)  a byte set (bit b = byte b)       ("ref", name)  a rule reference

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "'": "'", "/": "/",
        "^": "^", ".": ".", "f": "\f", "b": "\b", "0": "\0"}


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.rules: dict[str, list] = {}
        self.line_of = {}
        self.n_gen = 0

    def fail(self, msg):
        line = self.s.count("\n", 0, self.i) + 1
        col = self.i - (self.s.rfind("\n", 0, self.i) + 1) + 1
        raise GrammarError(f"grammar error at line {line}, column {col}: {msg}")

    def ws(self, newlines=True):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            else:
                break

    def new_rule(self, alts, hint="g") -> str:
        self.n_gen += 1
        name = f"_{hint}{self.n_gen}"
        self.rules[name] = alts
        return name

    def parse(self):
        self.ws()
        if self.i >= len(self.s):
            raise GrammarError("the grammar is empty: write at least `root ::= ...`")
        while self.i < len(self.s):
            m = _NAME.match(self.s, self.i)
            if not m:
                self.fail("expected a rule name (letters, digits, '-', '_') followed by ::=")
            name = m.group()
            self.i = m.end()
            self.ws(False)
            if not self.s.startswith("::=", self.i):
                self.fail(f"expected ::= after the rule name {name!r}")
            self.i += 3
            if name in self.rules:
                self.fail(f"rule {name!r} is defined twice")
            self.line_of[name] = self.s.count("\n", 0, self.i) + 1
            self.rules[name] = self.alternatives(top=True)
            self.ws()
        return self.rules

    def at_rule_start(self):
        m = _NAME.match(self.s, self.i)
        if not m:
            return False
        j = m.end()
        while j < len(self.s) and self.s[j] in " \t":
            j += 1
        return self.s.startswith("::=", j)

    def alternatives(self, top=False):
        alts = [self.sequence(top)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            alts.append(self.sequence(top))
        return alts

    def sequence(self, top):
        items = []
        while True:
            self.ws()
            if self.i >= len(self.s):
                return items
            c = self.s[self.i]
            if c in "|)" or (top and self.at_rule_start()):
                return items
            item = self.primary()
            self.ws(False)
            items.extend(self.postfix(item))

    def postfix(self, item):
        """The items of ``item`` with the repetition after it (if any) applied."""
        if self.i >= len(self.s):
            return [item]
        c = self.s[self.i]
        if c in "*+?":
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{":
            m = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}").match(self.s, self.i)
            if not m:
                self.fail("expected a repetition {m}, {m,} or {m,n}")
            self.i = m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            if hi is not None and hi < lo:
                self.fail(f"repetition {{{lo},{hi}}} has a maximum below its minimum")
            if lo > 10000 or (hi or 0) > 10000:
                self.fail("repetition counts above 10000 are not supported")
        else:
            return [item]
        return self.repeat(item, lo, hi)

    def repeat(self, item, lo, hi):
        out = [item] * lo
        if hi is None:          # item*: R ::= item R | ""
            name = self.new_rule([], "star")
            self.rules[name][:] = [[item, ("ref", name)], []]
            out.append(("ref", name))
        elif hi > lo:           # up to (hi - lo) more, nested: R_k ::= item R_{k-1} | ""
            tail = None
            for _ in range(hi - lo):
                tail = self.new_rule([[item] + ([("ref", tail)] if tail else []), []], "opt")
            out.append(("ref", tail))
        return out

    def primary(self):
        s, c = self.s, self.s[self.i]
        if c == '"':
            self.i += 1
            data = bytearray()
            while True:
                if self.i >= len(s):
                    self.fail("unterminated string literal (missing closing \")")
                ch = s[self.i]
                if ch == '"':
                    self.i += 1
                    break
                data += self.char().encode("utf-8", "surrogatepass")
            if not data:
                return ("seq", [])
            return ("seq", [("bytes", 1 << b) for b in data])
        if c == "[":
            return self.char_class()
        if c == ".":
            self.i += 1
            return self.class_item([(0, MAX_CODEPOINT)], negate=False)
        if c == "(":
            self.i += 1
            alts = self.alternatives()
            self.ws()
            if self.i >= len(s) or s[self.i] != ")":
                self.fail("expected ) to close the group")
            self.i += 1
            return ("ref", self.new_rule(alts, "grp"))
        m = _NAME.match(s, self.i)
        if m:
            self.i = m.end()
            return ("ref", m.group())
        self.fail(f"unexpected character {c!r}")

    def char(self) -> str:
        s = self.s
        ch = s[self.i]
        self.i += 1
        if ch != "\\":
            return ch
        if self.i >= len(s):
            self.fail("a backslash at the end of the grammar")
        e = s[self.i]
        self.i += 1
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            h = s[self.i:self.i + n]
            if len(h) != n or not all(x in "0123456789abcdefABCDEF" for x in h):
                self.fail(f"\\{e} needs {n} hex digits")
            self.i += n
            cp = int(h, 16)
            if cp > MAX_CODEPOINT:
                self.fail(f"\\{e}{h} is beyond the last Unicode code point")
            return chr(cp)
        if e not in _ESC:
            self.fail(f"unknown escape \\{e}")
        return _ESC[e]

    def char_class(self):
        self.i += 1
        negate = self.i < len(self.s) and self.s[self.i] == "^"
        if negate:
            self.i += 1
        ranges = []
        while True:
            if self.i >= len(self.s):
                self.fail("unterminated character class (missing ])")
            if self.s[self.i] == "]":
                self.i += 1
                break
            a = ord(self.char())
            b = a
            if self.s.startswith("-", self.i) and self.i + 1 < len(self.s) and self.s[self.i + 1] != "]":
                self.i += 1
                b = ord(self.char())
                if b < a:
                    self.fail(f"character range {chr(a)!r}-{chr(b)!r} is reversed")
            ranges.append((a, b))
        if not ranges and not negate:
            self.fail("empty character class [] matches nothing")
        return self.class_item(ranges, negate)

    def class_item(self, ranges, negate):
        ranges = complement_ranges(ranges) if negate else normalise_ranges(ranges)
        if not ranges:
            self.fail("the character class matches no character")
        seqs = [q for a, b in ranges for q in utf8_sequences(a, b)]
        single = 0
        multi = []
        for q in seqs:
            if len(q) == 1:
                single |= _byteset(*q[0])
            else:
                multi.append([("bytes", _byteset(a, b)) for a, b in q])
        if not multi:
            return ("bytes", single)
        alts = ([[("bytes", single)]] if single else []) + multi
        return ("ref", self.new_rule(alts, "cls"))


def _flatten(item, out):
    if item[0] == "seq":
        out.extend(item[1])
    else:
        out.append(item)


# -- the compiled grammar -----------------------------------------------------------------------------------------------

class Grammar:
    """A compiled grammar: a flat element array and the start position of each rule's alternatives. Immutable and
    shareable; a :class:`Matcher` holds one generation's state. ``not_enforced``: the JSON Schema keywords its
    schema had that it leaves out (json_schema with strict=False)."""

    not_enforced: tuple | list = ()

    def __init__(self, rules: dict[str, list], source: str = "", root: str = "root"):
        if root not in rules:
            raise GrammarError(f"the grammar has no {root!r} rule: the start rule must be called {root}")
        for name, alts in rules.items():
            for alt in alts:
                for it in alt:
                    if it[0] == "ref" and it[1] not in rules:
                        raise GrammarError(f"rule {name!r} refers to {it[1]!r}, which is not defined")
        self.source = source
        self.rules = rules
        self._check(rules, root)
        names = list(rules)
        index = {n: i for i, n in enumerate(names)}
        self.kind: list[int] = []
        self.value: list[int] = []
        self.starts: list[list[int]] = []
        for n in names:
            st = []
            for alt in rules[n]:
                st.append(len(self.kind))
                for it in alt:
                    self.kind.append(_T if it[0] == "bytes" else _R)
                    self.value.append(it[1] if it[0] == "bytes" else index[it[1]])
                self.kind.append(_END)
                self.value.append(0)
            self.starts.append(st)
        self.root = index[root]

    @classmethod
    def parse(cls, text: str, root: str = "root") -> "Grammar":
        if not isinstance(text, str):
            raise GrammarError(f"a grammar must be text (GBNF), got {type(text).__name__}")
        p = _Parser(text)
        raw = p.parse()
        rules = {}
        for name, alts in raw.items():
            rules[name] = []
            for alt in alts:
                flat = []
                for it in alt:
                    _flatten(it, flat)
                rules[name].append(flat)
        return cls(rules, text, root)

    @staticmethod
    def _check(rules, root):
        """Reject left recursion (it would never terminate) and grammars that accept no string at all."""
        nullable = set()
        changed = True
        while changed:
            changed = False
            for n, alts in rules.items():
                if n not in nullable and any(all(it[0] == "ref" and it[1] in nullable for it in a) for a in alts):
                    nullable.add(n)
                    changed = True
        first = {n: set() for n in rules}   # rules reachable at the start of n without consuming input
        for n, alts in rules.items():
            for a in alts:
                for it in a:
                    if it[0] != "ref":
                        break
                    first[n].add(it[1])
                    if it[1] not in nullable:
                        break
        state = {}

        def visit(n, path):
            state[n] = 1
            for m in first[n]:
                if state.get(m) == 1:
                    cyc = path[path.index(m):] + [m] if m in path else [n, m]
                    raise GrammarError(f"left recursion in rule(s) {' -> '.join(_pub(x) for x in cyc)}: a rule "
                                       f"may not start with itself; rewrite it with repetition (x ::= y z*)")
                if m not in state:
                    visit(m, path + [m])
            state[n] = 2

        for n in rules:
            if n not in state:
                visit(n, [n])
        productive = set()      # rules that derive at least one finite string
        changed = True
        while changed:
            changed = False
            for n, alts in rules.items():
                if n not in productive and any(all(it[0] == "bytes" or it[1] in productive for it in a)
                                               for a in alts):
                    productive.add(n)
                    changed = True
        if root not in productive:
            raise GrammarError(f"the grammar accepts no text at all: rule {root!r} never finishes (every "
                               f"alternative refers back to itself without an end)")


def _pub(name: str) -> str:
    return "(a group or repetition)" if name.startswith("_") else name


# -- the recogniser ------------------------------------------------------------------------------------------------------

class Recogniser:
    """States (frozensets of interned stacks) and their byte transitions, memoised. One per grammar; shared by the
    matchers of that grammar (within one thread)."""

    def __init__(self, grammar: Grammar):
        self.g = grammar
        self.frames: list[tuple[int, int]] = []     # stack id -> (element position, parent stack id; ACCEPT = none)
        self._ids: dict[tuple[int, int], int] = {}
        self._closure: dict[tuple[int, int], frozenset] = {}
        self._next: dict[tuple[frozenset, int], frozenset] = {}
        self._states: dict[frozenset, frozenset] = {}
        self._groups: dict[frozenset, list] = {}
        self._allowed: dict[frozenset, int] = {}
        self._number: dict[frozenset, int] = {}     # the table walk's state numbers (table()); 0: no stack alive
        self._numbered: list[frozenset] = []
        self.trans = np.full((64, 256), self.UNKNOWN, np.int32)
        self.table(frozenset())
        self.trans[0] = 0                           # a dead state stays dead
        start = self._close(-1, ACCEPT, grammar.root)
        self.start = self._states.setdefault(start, start)
        if not self.start:
            raise GrammarError("the grammar accepts no text at all")

    def table(self, state: frozenset) -> int:
        """The number of a state in the transition table ``trans`` (rows added as states are met; the entries of
        a row are filled on demand by fill())."""
        i = self._number.get(state)
        if i is None:
            i = self._number[state] = len(self._numbered)
            self._numbered.append(state)
            if i >= len(self.trans):
                grown = np.full((2 * len(self.trans), 256), self.UNKNOWN, np.int32)
                grown[:len(self.trans)] = self.trans
                self.trans = grown
        return i

    UNKNOWN = -1

    def fill(self, keys: np.ndarray):
        """Compute the unknown transitions trans.flat[keys] (key = state number * 256 + byte: step, then number the
        next state)."""
        for key in np.unique(keys):
            r, b = divmod(int(key), 256)
            self.trans[r, b] = self.table(self.step(self._numbered[r], b))

    def _intern(self, pos, parent):
        key = (pos, parent)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.frames)
            self.frames.append(key)
        return i

    def _close(self, pos, parent, rule=None) -> frozenset:
        """The stacks (each at a byte set) reached from element ``pos`` with return frames ``parent``, without
        consuming input; pos = -1 with ``rule``: the start of that rule."""
        key = (pos, parent) if rule is None else (-2 - rule, parent)
        got = self._closure.get(key)
        if got is not None:
            return got
        out = set()
        seen = set()
        kind, value, starts = self.g.kind, self.g.value, self.g.starts
        todo = [(s, parent) for s in starts[rule]] if rule is not None else [(pos, parent)]
        while todo:
            p, par = todo.pop()
            if (p, par) in seen:
                continue
            seen.add((p, par))
            k = kind[p]
            if k == _T:
                out.add(self._intern(p, par))
            elif k == _END:
                if par == ACCEPT:
                    out.add(ACCEPT)
                else:
                    todo.append(self.frames[par])
            else:
                ret = par if kind[p + 1] == _END else self._intern(p + 1, par)
                todo.extend((s, ret) for s in starts[value[p]])
        got = self._closure[key] = frozenset(out)
        return got

    def step(self, state: frozenset, byte: int) -> frozenset:
        """The state after one more byte (empty: the byte is not allowed)."""
        key = (state, byte)
        got = self._next.get(key)
        if got is None:
            value, frames = self.g.value, self.frames
            out = set()
            for sid in state:
                if sid != ACCEPT:
                    pos, par = frames[sid]
                    if value[pos] >> byte & 1:
                        out |= self._close(pos + 1, par)
            got = frozenset(out)
            got = self._next[key] = self._states.setdefault(got, got)     # one object per state
        return got

    def allowed_bytes(self, state: frozenset) -> int:
        bits = self._allowed.get(state)
        if bits is None:
            value, frames = self.g.value, self.frames
            bits = 0
            for sid in state:
                if sid != ACCEPT:
                    bits |= value[frames[sid][0]]
            self._allowed[state] = bits
        return bits

    def uniform(self, state: frozenset, bits: int):
        """The one state that every byte in ``bits`` leads ``state`` to, or None (they differ, or one is refused).
        Each state's allowed bytes are grouped by where they lead, once, so this is a lookup and a mask test."""
        groups = self._groups.get(state)
        if groups is None:
            by_next: dict[frozenset, int] = {}
            ok = self.allowed_bytes(state)
            while ok:
                low = ok & -ok
                ok ^= low
                x = self.step(state, low.bit_length() - 1)
                if x:
                    by_next[x] = by_next.get(x, 0) | low
            groups = self._groups[state] = [(m, x) for x, m in by_next.items()]
        top = 1 << (bits.bit_length() - 1)
        for m, x in groups:
            if m & top:
                return x if bits & ~m == 0 else None
        return None

    def covers(self, state: frozenset, bits: int, depth: int) -> bool:
        """Whether every string of up to ``depth`` bytes from ``bits`` keeps ``state`` alive, checked as: each byte
        of ``bits`` leads to one same state, ``depth`` times over (or back to the state itself: any depth). This
        takes whole trie subtrees at once inside strings, counted repetitions (maxLength) and numbers."""
        st = state
        for _ in range(depth):
            nxt = self.uniform(st, bits)
            if nxt is None:
                return False
            if nxt == st:
                return True
            st = nxt
        return True

    def accepts(self, data: bytes, state: frozenset | None = None) -> bool:
        """Whether ``data`` (from the start, or from ``state``) is a complete sentence of the grammar."""
        st = self.start if state is None else state
        for b in data:
            st = self.step(st, b)
            if not st:
                return False
        return ACCEPT in st


# -- the vocabulary trie --------------------------------------------------------------------------------------------------

class TokenTrie:
    """The vocabulary's token bytes as a trie, built once per model. Tokens are numbered in depth-first order
    (``order[k]`` = the token id at place k), so each node's subtree is the range ``lo[n]..hi[n]`` of places; the
    tokens ending at node n are places ``lo[n]..lo[n] + own[n]``. ``below[n]`` is the set of bytes on edges below n.
    Control tokens and tokens with no bytes are left out (a grammar never produces them); ``eos`` lists the ids that
    end a generation (allowed exactly when the grammar may end)."""

    def __init__(self, token_bytes: list[bytes | None], eos=()):
        self.vocab = len(token_bytes)
        self.eos = sorted(set(int(t) for t in eos if 0 <= t < len(token_bytes)))
        self.eos_set = frozenset(self.eos)
        self.bytes = [None if i in self.eos_set else b for i, b in enumerate(token_bytes)]
        items = sorted((b, i) for i, b in enumerate(self.bytes) if b)
        kids: list[list] = [[]]
        own = [0]
        order = []
        ends = []                   # the node each token (in place order) ends at
        lo = [0]
        stack = [(0, 0)]            # (node, depth) along the current path
        path = b""
        for data, tid in items:
            common = 0              # depth shared with the previous token's path
            n = min(len(path), len(data))
            while common < n and path[common] == data[common]:
                common += 1
            del stack[common + 1:]
            for d in range(common, len(data)):
                node = len(kids)
                kids.append([])
                own.append(0)
                lo.append(len(order))
                kids[stack[-1][0]].append((data[d], node))
                stack.append((node, d + 1))
            own[stack[-1][0]] += 1
            ends.append(stack[-1][0])
            order.append(tid)
            path = data
        n_nodes = len(kids)
        hi = [0] * n_nodes
        below = [0] * n_nodes
        height = [0] * n_nodes      # the longest path below the node, in bytes
        for node in range(n_nodes - 1, -1, -1):     # children are created after their parent
            h = lo[node] + own[node]
            bits = 0
            for b, c in kids[node]:
                h = max(h, hi[c])
                bits |= below[c] | (1 << b)
                height[node] = max(height[node], height[c] + 1)
            hi[node] = h
            below[node] = bits
        self.kids = [tuple(k) for k in kids]
        self.own, self.lo, self.hi, self.below, self.height = own, lo, hi, below, height
        self.order = np.array(order, np.int64)
        self.nodes = n_nodes
        self.words = -(-self.vocab // 32)
        # the trie level by level for Matcher's table walk: nodes renumbered breadth first (the root is 0), so each
        # depth is one range levels[d]..levels[d + 1]; up[g] = its parent's number, edge[g] = the byte into it;
        # end[k] = the number of the node where the token at place k ends
        bfs = [0] * n_nodes
        up, edge, levels, frontier = [0], [0], [0, 1], [0]
        while frontier:
            deeper = []
            for node in frontier:
                for b, c in kids[node]:
                    bfs[c] = len(up)
                    up.append(bfs[node])
                    edge.append(b)
                    deeper.append(c)
            frontier = deeper
            levels.append(len(up))
        self.up, self.edge, self.levels = np.array(up, np.int64), np.array(edge, np.int64), levels[:-1]   # + end
        self.end = np.array(bfs, np.int64)[np.array(ends, np.int64)]

    @classmethod
    def from_tokenizer(cls, tokenizer, eos=None) -> "TokenTrie":
        tb = []
        for i in range(tokenizer.vocab_size):
            tb.append(None if tokenizer.is_special(i) else tokenizer.token_bytes(i))
        return cls(tb, tokenizer.eot_ids if eos is None else eos)

    def pack_ranges(self, starts, ends, eos: bool) -> np.ndarray:
        """pack() for a few ranges of places."""
        ids = np.zeros(self.words * 32, np.bool_)
        for a, b in zip(starts, ends):
            ids[self.order[a:b]] = True
        if eos:
            ids[self.eos] = True
        return np.packbits(ids, bitorder="little").view(np.uint32)

    def pack(self, places: np.ndarray, eos: bool) -> np.ndarray:
        """A boolean array over places -> the uint32 bitset over token ids (plus the eos ids when ``eos``)."""
        ids = np.zeros(self.words * 32, np.bool_)
        ids[self.order[places]] = True
        if eos:
            ids[self.eos] = True
        return np.packbits(ids, bitorder="little").view(np.uint32)


class Matcher:
    """One generation's grammar state over a vocabulary: ``mask()`` for the next token, ``advance(id)`` after it."""

    CACHE = 4096        # masks kept per grammar (LRU)
    WALK_BUDGET = 400   # trie nodes a mask's trie walk visits before the table walk takes over
    WIDE = 64           # states allowing more first bytes than this go to the table walk at once (string bodies)

    def __init__(self, grammar: Grammar, trie: TokenTrie, recogniser: Recogniser | None = None):
        self.g = grammar
        self.trie = trie
        self.rec = recogniser or recogniser_for(grammar)
        self.state = self.rec.start
        cache = getattr(self.rec, "_masks", None)
        if cache is None or cache[0] is not trie:
            cache = self.rec._masks = (trie, OrderedDict())
        self._cache = cache[1]

    @property
    def finished(self) -> bool:
        """Nothing can follow: the text so far is complete and cannot be extended."""
        return self.state == frozenset((ACCEPT,))

    @property
    def accepting(self) -> bool:
        return ACCEPT in self.state

    def advance(self, token_id: int) -> bool:
        """Consume a token; False (state unchanged) if the grammar does not allow it. An end-of-generation token is
        allowed exactly when the text so far is complete (it changes nothing)."""
        if token_id in self.trie.eos_set:
            return self.accepting
        data = self.trie.bytes[token_id] if 0 <= token_id < self.trie.vocab else None
        if not data:
            return False
        st = self.state
        for b in data:
            st = self.rec.step(st, b)
            if not st:
                return False
        self.state = st
        return True

    def mask(self) -> np.ndarray:
        """The allowed next tokens as a uint32 bitset over the vocabulary (``trie.words`` words)."""
        st = self.state
        got = self._cache.get(st)
        if got is not None:
            self._cache.move_to_end(st)
            return got
        got = self._cache[st] = self._walk(st)
        if len(self._cache) > self.CACHE:
            self._cache.popitem(last=False)
        return got

    def allowed(self) -> np.ndarray:
        """The allowed token ids (ascending): the mask unpacked (for tests and the CPU sampler)."""
        bits = np.unpackbits(self.mask().view(np.uint8), bitorder="little")[:self.trie.vocab]
        return np.nonzero(bits)[0]

    def _walk(self, state) -> np.ndarray:
        t, rec = self.trie, self.rec
        kids, lo, hi, own, below = t.kids, t.lo, t.hi, t.own, t.below
        step, covers, allowed_bytes, height = rec.step, rec.covers, rec.allowed_bytes, t.height
        starts, ends = [], []
        todo = [(0, state)]
        budget = self.WALK_BUDGET
        if bin(rec.allowed_bytes(state)).count("1") > self.WIDE:
            budget = 0
        while todo:
            budget -= 1
            if budget < 0:        # a wide state (inside a string, ...): the table walk is cheaper
                return t.pack(self._table_walk(state), ACCEPT in state)
            node, st = todo.pop()
            ok = allowed_bytes(st)
            for b, c in kids[node]:
                if not ok >> b & 1:
                    continue
                st2 = step(st, b)
                if not st2:
                    continue
                if covers(st2, below[c], height[c]):
                    starts.append(lo[c])
                    ends.append(hi[c])
                    continue
                if own[c]:
                    starts.append(lo[c])
                    ends.append(lo[c] + own[c])
                if kids[c]:
                    todo.append((c, st2))
        if len(starts) <= 64:       # few ranges (a restricted state): mark them directly
            return t.pack_ranges(starts, ends, ACCEPT in state)
        delta = np.zeros(len(t.order) + 1, np.int32)    # +1 at a range start, -1 at its end
        np.add.at(delta, np.array(starts, np.int64), 1)
        np.add.at(delta, np.array(ends, np.int64), -1)
        places = np.cumsum(delta[:-1]) > 0
        return t.pack(places, ACCEPT in state)


    def _table_walk(self, state) -> np.ndarray:
        """The allowed places (a boolean array in trie order) from the state of every trie node at once, a depth at
        a time (numpy): a node's state is the transition table's entry for its parent's state and its byte. The cost
        is the trie's size, not the nodes a walk visits, whatever the state. Transitions met for the first time are
        computed by the recogniser and kept."""
        t, rec = self.trie, self.rec
        states = np.zeros(len(t.up), np.int64)     # 0: dead
        states[0] = rec.table(state)
        levels = t.levels
        for d in range(1, len(levels) - 1):
            a, b = levels[d], levels[d + 1]
            key = states[t.up[a:b]] * 256 + t.edge[a:b]     # indexing, not take(): Pyodide's intp is 32-bit
            nxt = rec.trans.ravel()[key]
            unknown = nxt < 0
            if unknown.any():
                rec.fill(key[unknown])
                nxt = rec.trans.ravel()[key]
            if not nxt.any():           # nothing alive at this depth: nothing deeper either
                break
            states[a:b] = nxt
        return states[t.end] != 0


_RECOGNISERS: "OrderedDict[int, tuple[Grammar, Recogniser]]" = OrderedDict()


def recogniser_for(grammar: Grammar) -> Recogniser:
    """The shared recogniser of a grammar (its memoised states and masks survive across generations)."""
    key = id(grammar)
    got = _RECOGNISERS.get(key)
    if got is None or got[0] is not grammar:
        got = _RECOGNISERS[key] = (grammar, Recogniser(grammar))
        if len(_RECOGNISERS) > 16:
            _RECOGNISERS.popitem(last=False)
    return got[1]
