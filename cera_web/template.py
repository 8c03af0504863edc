"""Chat templates: render a model's Jinja ``tokenizer.chat_template`` into the prompt text, safely.

A GGUF file carries its chat template as Jinja source. The file may come from anywhere, so the template is treated
as untrusted code and rendered in a sandbox that

- refuses access to Python internals (any attribute starting with ``_`` such as ``__class__``, attributes of
  classes, methods that modify lists/dicts/sets, ``str`` methods outside a short list of harmless ones): InputError;
- bounds the work and memory a template can use (``TemplateLimits``; defaults in brackets), raising InputError:
  * ``max_steps`` [250,000]: loop iterations, calls, filters, operators, attribute/item lookups and output
    statements, counted together per render (a conversation needs a few tens of steps per message; 250,000
    steps take one to a few seconds);
  * ``max_chars`` [4,000,000]: the length of every value a call, filter or operator produces, of all the text
    output statements produce (including text captured by ``{% set %}`` blocks and macros), and so of the prompt.
    Operations whose result can be far larger than their inputs are checked *before* they run: ``*`` (repeat),
    ``+``/``~`` (concatenation), ``%``/``format`` (field widths), ``replace``, ``join``, ``indent``, ``wordwrap``,
    ``expandtabs``; every integer argument of a call or filter must be at most ``max_chars``;
  * ``max_built_bytes`` [64 MiB]: the total memory of all values that calls, filters, operators, ``~`` and
    slices build in one render (Python objects, measured with ``sys.getsizeof`` through containers: a list of a
    million 2-character strings is 59 MB, not 3 M characters), counted as they are made. A template can keep every
    value it builds (one variable per ``{% set %}``, items of a list literal), so this bounds the memory it can
    fill, which ``max_chars`` alone does not (a value returned unchanged by a call, e.g. ``.get()``, is counted
    too: the bound is conservative). Operations that make many objects from one value (``split``, ``splitlines``,
    the ``list``, ``sort``, ``batch``, ``slice``, ``dictsort``, ``items``, ``groupby`` filters) are checked against
    what is left of it *before* they run, and filters that return a generator (``map``, ``select``, ``unique``,
    ``batch``, ``slice``, ...) count a step per item they yield;
  * ``max_range`` [100,000]: items in one ``range()``; ``max_depth`` [50]: nested calls (macros, recursive loops);
    integers are kept under 65,536 bits;
  * ``max_source_chars`` [256,000]: the template's own length (compiling costs about 5 µs a character and is not
    covered by the timeout; real templates take a few thousand characters);
  * ``timeout_s`` [10]: wall-clock time, checked at every step. No single step can be slow: the filters that
    were super-linear are replaced or bounded (``wordwrap`` by a linear wrapper giving textwrap's result, sorting
    filters take at most ``max_sort_items`` [200,000] items), so one step stays well under a second at the
    largest sizes allowed (docs/robustness.md gives the measured worst cases).

What a template sees matches Hugging Face ``transformers``' ``apply_chat_template`` (checked against its output
in tests/test_chat.py): ``trim_blocks`` and ``lstrip_blocks`` on, the trailing newline of the source dropped,
no autoescaping, the ``loopcontrols`` extension (``break``/``continue``), a ``{% generation %}`` block that just
renders its body, ``raise_exception(msg)``, ``strftime_now(fmt)``, a ``tojson`` filter that neither escapes HTML
nor sorts keys (``ensure_ascii``/``indent``/``separators``/``sort_keys`` options), ``namespace`` (no
underscore-prefixed names), ``dict``; the variables ``messages`` (keys whose value is None dropped),
``add_generation_prompt``, ``bos_token``, ``eos_token``, ``tools`` and ``documents`` (None unless given) and any
extra keyword arguments.

A file without a chat template gets ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n`` per message, then
``<|im_start|>assistant\\n`` when a reply is wanted); ``ChatTemplate.is_fallback`` says so and a warning is logged.

Pure Python + jinja2 (a pure-Python wheel, available in Pyodide); no numpy.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import sys
import textwrap
import time
import types
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

from cera_web.errors import InputError

__all__ = ["TemplateLimits", "ChatTemplate", "render_chat", "CHATML_TEMPLATE"]

log = logging.getLogger(__name__)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TemplateLimits:
    """Bounds on one render (see the module docstring)."""
    max_steps: int = 250_000
    max_chars: int = 4_000_000
    max_range: int = 100_000
    max_depth: int = 50
    timeout_s: float = 10.0
    max_built_bytes: int = 64 << 20
    max_source_chars: int = 256_000
    max_sort_items: int = 200_000


_MAX_INT_BITS = 65_536
_MAX_TOJSON_INDENT = 64
_MAX_STRFTIME_FORMAT = 1_000
_MAX_INPUT_DEPTH = 64

# str methods a template may call. Everything else on a str (translate, maketrans, ...) is refused.
_STR_METHODS = frozenset(
    "strip lstrip rstrip split rsplit splitlines partition rpartition removeprefix removesuffix startswith "
    "endswith find rfind index rindex count lower upper title capitalize casefold swapcase isalnum isalpha "
    "isascii isdecimal isdigit isidentifier islower isnumeric isprintable isspace istitle isupper encode "
    "replace join center ljust rjust zfill expandtabs format format_map".split())


def _refuse(what: str) -> InputError:
    return InputError(f"the model's chat template {what}; the template in this model file cannot be used as is: "
                      f"pass your own template (or none, for ChatML) instead")


# ---------------------------------------------------------------------------------------------------------------
# the per-render budget

class _Budget:
    def __init__(self, limits: TemplateLimits):
        self.limits = limits
        self.steps = 0
        self.emitted = 0
        self.built = 0
        self.depth = 0
        self.deadline = time.monotonic() + limits.timeout_s

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise _refuse(f"took more than {self.limits.max_steps:,} steps (loop iterations, calls, lookups); "
                          f"it probably loops without end")
        if time.monotonic() > self.deadline:
            raise _refuse(f"ran for more than {self.limits.timeout_s:g} seconds")

    def build(self, n: int) -> None:
        self.built += n
        if self.built > self.limits.max_built_bytes:
            raise _refuse(f"built values taking more than {self.limits.max_built_bytes:,} bytes of memory")

    def reserve(self, n: int, what: str) -> None:
        """Refuse an operation about to make about `n` bytes of objects if they do not fit in what is left."""
        if self.built + n > self.limits.max_built_bytes:
            raise _refuse(f"would make about {n:,} bytes of objects with {what}, more than the "
                          f"{self.limits.max_built_bytes:,} a render may build")

    def emit(self, n: int) -> None:
        self.emitted += n
        if self.emitted > self.limits.max_chars:
            raise _refuse(f"produced more than {self.limits.max_chars:,} characters of text")


_ACTIVE: ContextVar[_Budget | None] = ContextVar("cera_chat_budget", default=None)
_DEFAULT_LIMITS = TemplateLimits()


def _budget() -> _Budget:
    b = _ACTIVE.get()
    return b if b is not None else _Budget(_DEFAULT_LIMITS)   # outside a render: limits without a running count


def _weight(value, limit: int) -> int:
    """About how many characters `value` takes as text: str length, plus one per container item, summed through
    nested lists/tuples/dicts. Stops counting once past `limit`, so it costs at most O(limit)."""
    total, group = 0, [value]
    while group and total <= limit:                 # one level of nesting at a time, summed at C speed
        kinds = set(map(type, group))
        if kinds <= {str}:
            total += sum(map(len, group))
            break
        if kinds <= _FLAT:
            total += len(group)
            break
        strs = [x for x in group if isinstance(x, str)]
        sized = [x for x in group if isinstance(x, (list, tuple, set, frozenset, dict, range))]
        total += sum(map(len, strs)) + sum(map(len, sized)) + len(group) - len(strs) - len(sized)
        group = _children(sized) if total <= limit else []
    return total


def _nbytes(value, limit: int) -> int:
    """About how much memory `value` takes (sys.getsizeof summed through nested containers; a shared item is
    counted each time it appears). Stops counting once past `limit`."""
    total, group = 0, [value]
    while group and total <= limit:                 # one level of nesting at a time, summed at C speed
        total += sum(map(sys.getsizeof, group))
        if set(map(type, group)) <= _FLAT or total > limit:
            break
        group = _children([x for x in group if isinstance(x, (list, tuple, set, frozenset, dict))])
    return total


def _children(containers: list) -> list:
    """The items of lists/tuples/sets and the keys and values of dicts, in one flat list (ranges: none)."""
    out = list(itertools.chain.from_iterable(x for x in containers if not isinstance(x, (dict, range))))
    out += itertools.chain.from_iterable(itertools.chain(d.keys(), d.values())
                                         for d in containers if isinstance(d, dict))
    return out


_FLAT = frozenset({str, int, float, bool, type(None)})


_SCALARS = (int, float, bool, type(None))


def _check_size(value, b: _Budget, what: str):
    if type(value) not in _SCALARS:
        size = _weight(value, b.limits.max_chars)
        if size > b.limits.max_chars:
            raise _refuse(f"built {what} larger than {b.limits.max_chars:,} characters")
        b.build(_nbytes(value, b.limits.max_built_bytes))
    return value


def _items_cost(value) -> tuple[int, int]:
    """(items, bytes) that iterating `value` into a new list costs: a pointer per item, plus a new object per
    character of a string outside Latin-1 (Latin-1 one-character strings are shared by Python)."""
    if isinstance(value, str):
        n = len(value)
        return n, 8 * n + (80 * n if n and max(value) > "\xff" else 0)
    try:
        n = len(value)
    except TypeError:
        return 0, 0           # a generator: counted a step per item instead (_counted_iter)
    return n, 8 * n


def _check_int_args(args, kwargs, b: _Budget) -> None:
    for a in (*args, *kwargs.values()):
        if type(a) is int and abs(a) > b.limits.max_chars:
            raise _refuse(f"passed the number {a} to a function or filter (numbers over "
                          f"{b.limits.max_chars:,} are refused, as sizes that large would exhaust memory)")


def _check_format(fmt: str, b: _Budget) -> None:
    """Field widths and precisions in a %- or {}-format string: their sum bounds how much padding it can add."""
    total = sum(int(run) if len(run) < 10 else 10**10 for run in re.findall(r"\d+", fmt))
    if total > b.limits.max_chars:
        raise _refuse(f"used a format string whose field widths add up to more than {b.limits.max_chars:,}")


# ---------------------------------------------------------------------------------------------------------------
# pre-checks for operations whose result can be much larger than their inputs

def _precheck_replace(b: _Budget, s, old, new, count=-1):
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
        hits = s.count(old) if old else len(s) + 1
        if count is not None and count >= 0:
            hits = min(hits, count)
        if len(s) + hits * max(0, len(new) - len(old)) > b.limits.max_chars:
            raise _refuse(f"would build a string larger than {b.limits.max_chars:,} characters with replace")


def _precheck_join(b: _Budget, sep, items) -> list:
    items = list(items)
    size = _weight(items, b.limits.max_chars) + len(str(sep)) * len(items)
    if size > b.limits.max_chars:
        raise _refuse(f"would build a string larger than {b.limits.max_chars:,} characters with join")
    return items


def _precheck_per_line(b: _Budget, s, added: int, what: str) -> None:
    if isinstance(s, str) and len(s) + (s.count("\n") + 1) * added > b.limits.max_chars:
        raise _refuse(f"would build a string larger than {b.limits.max_chars:,} characters with {what}")


def _str_method_precheck(b: _Budget, method, args: tuple, kwargs: dict) -> tuple:
    """Checks a call of a bound str method (the receiver is method.__self__); may return new args."""
    name, s = method.__name__, method.__self__
    if name not in _STR_METHODS:
        raise _refuse(f"called str.{name}, which is not allowed in chat templates")
    if name == "replace":
        _precheck_replace(b, s, *args, **kwargs)
    elif name == "join" and args:
        args = (_precheck_join(b, s, args[0]), *args[1:])
    elif name == "expandtabs":
        tab = (args[0] if args else kwargs.get("tabsize", 8))
        if isinstance(tab, int) and len(s) + s.count("\t") * tab > b.limits.max_chars:
            raise _refuse(f"would build a string larger than {b.limits.max_chars:,} characters with expandtabs")
    elif name in ("format", "format_map"):
        _check_format(s, b)
    elif name in ("split", "rsplit", "splitlines"):
        b.reserve(_pieces(s, name, args, kwargs) * 64, f"str.{name}")
    return args


_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _pieces(s: str, name: str, args: tuple, kwargs: dict) -> int:
    """An upper bound on the number of strings s.split / rsplit / splitlines makes, in linear time."""
    if name == "splitlines":
        return sum(map(s.count, _LINE_BREAKS)) + 1
    sep = args[0] if args else kwargs.get("sep")
    maxsplit = args[1] if len(args) > 1 else kwargs.get("maxsplit", -1)
    if isinstance(sep, str) and sep:
        n = s.count(sep)
    else:                                       # whitespace: pieces are separated by at least one character
        n = (len(s) + 1) // 2
    if isinstance(maxsplit, int) and maxsplit >= 0:
        n = min(n, maxsplit)
    return n + 1


# ---------------------------------------------------------------------------------------------------------------
# filters: every built-in filter is wrapped (counted, checked); tojson is replaced; three internal ones are added

def _filter_precheck(b: _Budget, name: str, value, args: tuple, kwargs: dict):
    """Checks one filter application before it runs; returns the (possibly materialized) value."""
    if name == "replace" and len(args) >= 2:
        _precheck_replace(b, str(value), str(args[0]), str(args[1]), *args[2:3], **kwargs)
    elif name == "join":
        sep = args[0] if args else kwargs.get("d", "")
        value = _precheck_join(b, sep, value)
    elif name == "format" and isinstance(value, str):
        _check_format(value, b)
    elif name == "indent":
        width = args[0] if args else kwargs.get("width", 4)
        _precheck_per_line(b, value, len(width) if isinstance(width, str) else int(width), "indent")
    elif name == "wordwrap":
        wrap = args[2] if len(args) > 2 else kwargs.get("wrapstring") or "\n"
        if isinstance(value, str) and len(value) * (1 + len(str(wrap))) > b.limits.max_chars:
            raise _refuse(f"would build a string larger than {b.limits.max_chars:,} characters with wordwrap")
        width = args[0] if args else kwargs.get("width", 79)
        if isinstance(value, str) and isinstance(width, int):
            # textwrap handles a chunk (word, space run, hyphenated part) or a line at a time, in Python
            work = len(value) // max(width, 1) + sum(map(value.count, " \t-\n"))
            if work > _MAX_TEXT_PIECES:
                raise _refuse(f"asked wordwrap for about {work:,} lines and words (at most {_MAX_TEXT_PIECES:,})")
    elif name in _TEXT_PIECES and isinstance(value, str):
        # filters that loop in Python over the words, lines or tags of a string, or split it into a list
        starts, most = _TEXT_PIECES[name]
        work = sum(map(value.count, starts)) + 1
        if work > most:
            raise _refuse(f"asked {name} to handle about {work:,} words, lines or tags (at most {most:,})")
        b.reserve(64 * work, f"the {name!r} filter")
    elif name in ("e", "escape", "forceescape") and isinstance(value, str):
        grown = len(value) + 4 * sum(map(value.count, "<>&'\""))
        if grown > b.limits.max_chars:
            raise _refuse(f"would build a string larger than {b.limits.max_chars:,} characters with {name}")
    elif name == "wordcount" and isinstance(value, str) and len(value) > 2 * _MAX_TEXT_PIECES:
        raise _refuse(f"asked wordcount to count the words of {len(value):,} characters (at most "
                      f"{2 * _MAX_TEXT_PIECES:,})")
    elif name == "pprint" and _weight(value, _MAX_PPRINT) > _MAX_PPRINT:
        raise _refuse(f"asked pprint to format more than {_MAX_PPRINT:,} items and characters")
    if name in _SORTING:
        n, _ = _items_cost(value)
        if n > b.limits.max_sort_items:
            raise _refuse(f"sorted {n:,} items with {name} (at most {b.limits.max_sort_items:,} are allowed)")
    if name in _FAN_OUT:
        n, cost = _items_cost(value)
        if name == "slice":         # slice(k) makes k lists, even empty ones
            k = args[0] if args else kwargs.get("slices", 1)
            cost += 64 * k if isinstance(k, int) else 0
        elif name in ("dictsort", "items", "groupby", "batch"):
            cost += 72 * n          # a tuple or list per item
        b.reserve(cost, f"the {name!r} filter")
    return value


# Filters that loop in Python over a string's words, lines or tags: the characters that start one, and the most
# pieces they may handle in one step (each takes well under a second on a busy machine: docs/robustness.md).
_SPACES = " \t\n\r\x0b\x0c\xa0\u3000"
_TEXT_PIECES = {"striptags": ("<" + _SPACES, 100_000), "urlize": (_SPACES, 10_000), "indent": (_LINE_BREAKS, 200_000),
                "title": (_SPACES + "-({[<", 200_000)}
_MAX_TEXT_PIECES = 200_000      # wordwrap's lines and words
_MAX_PPRINT = 100_000           # pprint: items and characters of its input

# Filters that build a container with an item (or more) per item of their input; and those that sort it.
_FAN_OUT = frozenset("list sort unique batch slice dictsort items groupby map select reject selectattr rejectattr "
                     "reverse random".split())
_SORTING = frozenset("sort dictsort groupby".split())


def _counted_iter(iterator):
    """A filter's generator, counting a step per item it yields (so `x|map(...)|list` is bounded like a loop)."""
    for item in iterator:
        _budget().step()
        yield item


def _guard_filter(name: str, func):
    # Filters marked pass_context/pass_eval_context/pass_environment get that object as their first argument.
    skip = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)
    def guarded(*args, **kwargs):
        b = _budget()
        b.step()
        lead, value, rest = args[:skip], args[skip], args[skip + 1:]
        _check_int_args(rest, kwargs, b)
        value = _filter_precheck(b, name, value, rest, kwargs)
        result = func(*lead, value, *rest, **kwargs)
        if isinstance(result, types.GeneratorType):
            return _counted_iter(result)
        return _check_size(result, b, f"a value with the {name!r} filter")

    return guarded


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """JSON as transformers' templates expect it: no HTML escaping, insertion order unless sort_keys."""
    if indent is not None and (len(indent) if isinstance(indent, str) else indent) > _MAX_TOJSON_INDENT:
        raise _refuse(f"asked tojson for an indent over {_MAX_TOJSON_INDENT}")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _LinearWrapper(textwrap.TextWrapper):
    """textwrap's wrapping, with a long word cut into its lines in one pass: textwrap cuts one line's worth at a
    time and copies the rest of the word each time, quadratic in the word's length (a 1 M-character word wrapped
    at width 1 took 43 s). The cut is the one textwrap makes (width characters a line; the hyphen rule only applies
    to words with a hyphen, which keep textwrap's own code, up to _MAX_HYPHEN_WORD characters)."""

    def _handle_long_word(self, reversed_chunks, cur_line, cur_len, width):
        chunk = reversed_chunks[-1]
        if not self.break_long_words or width < 1 or not chunk.strip() or len(chunk) <= 2 * width:
            return super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)
        if self.break_on_hyphens and "-" in chunk:
            if len(chunk) > _MAX_HYPHEN_WORD:
                raise _refuse(f"asked wordwrap to break a {len(chunk):,}-character word with hyphens (at most "
                              f"{_MAX_HYPHEN_WORD:,})")
            return super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)
        first = width - cur_len
        cur_line.append(chunk[:first])
        # The rest: full lines of `width`, each alone on its line (it fills it), then a shorter tail that later
        # words may join, all pushed back in reverse order as textwrap's chunk stack expects.
        rest = len(chunk) - first
        tail = rest % width or width
        reversed_chunks[-1] = chunk[len(chunk) - tail:]
        reversed_chunks.extend(chunk[i:i + width] for i in range(len(chunk) - tail - width, first - 1, -width))


_MAX_HYPHEN_WORD = 20_000


@jinja2.pass_environment
def _wordwrap(environment, s, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True):
    """Jinja's wordwrap filter (each existing line wrapped on its own, joined by `wrapstring`), in linear time."""
    if wrapstring is None:
        wrapstring = environment.newline_sequence
    wrapper = _LinearWrapper(width=width, expand_tabs=False, replace_whitespace=False,
                             break_long_words=break_long_words, break_on_hyphens=break_on_hyphens)
    return wrapstring.join(wrapstring.join(wrapper.wrap(line)) for line in s.splitlines())


_WORD = re.compile(r"\w+")


def _wordcount(s) -> int:
    """Jinja's wordcount without the list of every word it builds (subn counts at C speed)."""
    return _WORD.subn("", str(s))[1]


# The filters below are inserted by _Harden and cannot be named by a template (their names are not
# identifiers). They are pass_context so Jinja never runs them while compiling.

@jinja2.pass_context
def _emit(context, value):
    """Wraps every piece of output: counts a step and the characters it will print."""
    b = _budget()
    b.step()
    b.emit(len(value) if isinstance(value, str) else _weight(value, b.limits.max_chars))
    return value


@jinja2.pass_context
def _counted(context, iterable):
    """Wraps the iterable of every {% for %}: counts a step per item."""
    b = _budget()
    for item in iterable:
        b.step()
        yield item


@jinja2.pass_context
def _slice(context, value, start, stop, step):
    """`value[start:stop:step]` (Jinja compiles slices to plain Python, past the sandbox's getitem): a new value."""
    b = _budget()
    b.step()
    return _check_size(value[start:stop:step], b, "a slice")


@jinja2.pass_context
def _concat(context, items):
    """The `~` operator, with its size checked before the string is built."""
    b = _budget()
    b.step()
    parts = [str(x) for x in items]
    size = sum(map(len, parts))
    if size > b.limits.max_chars:
        raise _refuse(f"would build a string larger than {b.limits.max_chars:,} characters with ~")
    b.build(size)
    return "".join(parts)


_EMIT, _COUNTED, _CONCAT, _SLICE = "cera emit", "cera counted", "cera concat", "cera slice"


class _Harden(NodeTransformer):
    """Rewrites a parsed template so that output, loops, `~` and slices go through the counting filters above."""

    @staticmethod
    def _filter(name: str, node: nodes.Expr, args=()) -> nodes.Filter:
        return nodes.Filter(node, name, list(args), [], None, None, lineno=node.lineno)

    def visit_Output(self, node: nodes.Output) -> nodes.Output:
        self.generic_visit(node)
        node.nodes = [self._filter(_EMIT, nodes.Const(child.data, lineno=child.lineno)
                                   if isinstance(child, nodes.TemplateData) else child) for child in node.nodes]
        return node

    def visit_For(self, node: nodes.For) -> nodes.For:
        self.generic_visit(node)
        node.iter = self._filter(_COUNTED, node.iter)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Filter:
        self.generic_visit(node)
        return self._filter(_CONCAT, nodes.List(node.nodes, lineno=node.lineno))

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Expr:
        self.generic_visit(node)
        if not isinstance(node.arg, nodes.Slice) or node.ctx != "load":
            return node
        bounds = [b if b is not None else nodes.Const(None, lineno=node.lineno)
                  for b in (node.arg.start, node.arg.stop, node.arg.step)]
        return self._filter(_SLICE, node.node, bounds)


# ---------------------------------------------------------------------------------------------------------------
# globals

def _raise_exception(message="the chat template raised an error") -> None:
    raise InputError(f"the model's chat template rejected this conversation: {message}")


def _strftime_now(fmt: str) -> str:
    if not isinstance(fmt, str) or len(fmt) > _MAX_STRFTIME_FORMAT:
        raise _refuse(f"passed strftime_now a format that is not a string of at most {_MAX_STRFTIME_FORMAT} "
                      f"characters")
    return datetime.now().strftime(fmt)


def _range(*args) -> range:
    r = range(*args)
    limit = _budget().limits.max_range
    if len(r) > limit:
        raise _refuse(f"asked for a range of {len(r):,} items (at most {limit:,} are allowed)")
    return r


class _Namespace(Namespace):
    """jinja2's namespace, refusing attribute names that start with an underscore."""

    def __init__(*args, **kwargs):          # same calling convention as Namespace (self may be passed as kwarg)
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _check_namespace_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        # Namespace intercepts attribute lookup on its instances, so only module-level helpers are used here.
        _check_namespace_name(name)
        Namespace.__setitem__(self, name, value)


def _check_namespace_name(name) -> None:
    if not isinstance(name, str) or name.startswith("_"):
        raise _refuse(f"stored the attribute {name!r} on a namespace (names starting with '_' are not allowed)")


class _DictFactory:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without exposing the dict type itself."""

    def __call__(self, *args, **kwargs) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, keys, value=None) -> dict:
        return dict.fromkeys(keys, value)


# ---------------------------------------------------------------------------------------------------------------
# the sandbox

class _GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text for training masks): renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "*", "%", "**"})

    def __init__(self):
        super().__init__(trim_blocks=True, lstrip_blocks=True, optimized=False,
                         extensions=["jinja2.ext.loopcontrols", _GenerationTag])
        self.globals.pop("lipsum", None)
        self.globals.update(range=_range, dict=_DictFactory(), namespace=_Namespace,
                            raise_exception=_raise_exception, strftime_now=_strftime_now)
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}
        self.filters["tojson"] = _guard_filter("tojson", _tojson)
        self.filters["wordwrap"] = _guard_filter("wordwrap", _wordwrap)
        self.filters["wordcount"] = _guard_filter("wordcount", _wordcount)
        self.filters.update({_EMIT: _emit, _COUNTED: _counted, _CONCAT: _concat, _SLICE: _slice})

    def is_safe_attribute(self, obj, attr, value) -> bool:
        # Nothing on a class object is needed by chat templates (and `mro()` leads toward `object`).
        return not isinstance(obj, type) and super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj, attribute):
        raise _refuse(f"tried to read the attribute {attribute!r} of a {type(obj).__name__} object, which the "
                      f"sandbox refuses (it reaches Python internals or modifies data)")

    def getattr(self, obj, attribute):
        _budget().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        _budget().step()
        return super().getitem(obj, argument)

    def call(self, context, obj, /, *args, **kwargs):
        b = _budget()
        b.step()
        # Jinja adds these to calls made inside loops and blocks (for macros); they are not the template's.
        internal = {k: kwargs.pop(k) for k in ("_loop_vars", "_block_vars") if k in kwargs}
        _check_int_args(args, kwargs, b)
        target = getattr(obj, "__wrapped__", obj)   # str.format arrives wrapped by the sandbox
        if isinstance(target, types.BuiltinMethodType) and isinstance(getattr(target, "__self__", None), str):
            args = _str_method_precheck(b, target, args, kwargs)
        b.depth += 1
        try:
            if b.depth > b.limits.max_depth:
                raise _refuse(f"nested calls more than {b.limits.max_depth} deep (runaway recursion?)")
            result = super().call(context, obj, *args, **kwargs, **internal)
        finally:
            b.depth -= 1
        return _check_size(result, b, "a value with a call")

    def call_binop(self, context, operator, left, right):
        b = _budget()
        b.step()
        limit = b.limits.max_chars
        sized = (str, list, tuple)
        if operator == "*":
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > _MAX_INT_BITS:
                    raise _refuse(f"multiplied numbers into one over {_MAX_INT_BITS} bits")
            else:
                seq, n = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(seq, sized) and isinstance(n, int) and n > 0 and _weight(seq, limit) * n > limit:
                    raise _refuse(f"would build a value larger than {limit:,} characters with *")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1 \
                    and right * abs(left).bit_length() > _MAX_INT_BITS:
                raise _refuse(f"raised a number to a power over {_MAX_INT_BITS} bits")
        elif operator == "+":
            if isinstance(left, sized) and isinstance(right, sized) and \
                    _weight(left, limit) + _weight(right, limit) > limit:
                raise _refuse(f"would build a value larger than {limit:,} characters with +")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, b)
            values = right.values() if isinstance(right, Mapping) else right if isinstance(right, tuple) else (right,)
            _check_int_args(tuple(values), {}, b)
        return _check_size(super().call_binop(context, operator, left, right), b, f"a value with {operator}")


_ENV = _BoundedSandbox()


@functools.lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    try:
        tree = _ENV.parse(source)
    except jinja2.TemplateSyntaxError as e:
        raise InputError(f"the model's chat template is not valid Jinja ({e.message}, line {e.lineno}); pass "
                         f"your own template (or none, for ChatML) instead") from None
    except RecursionError:
        raise _refuse("is nested too deeply to parse") from None
    try:
        tree = _Harden().visit(tree)
        tree.set_environment(_ENV)
        return _ENV.from_string(tree)
    except RecursionError:
        raise _refuse("is nested too deeply to compile") from None
    except Exception as e:   # Jinja can emit Python that does not compile: {% break %} outside a loop (SyntaxError)
        raise InputError(f"the model's chat template is not valid Jinja ({type(e).__name__}: {e}); pass your own "
                         f"template (or none, for ChatML) instead") from None


# ---------------------------------------------------------------------------------------------------------------
# inputs

def _plain(value, where: str, depth: int = 0):
    """A copy of `value` made of plain JSON-like types only (str, int, float, bool, None, list, dict)."""
    if depth > _MAX_INPUT_DEPTH:
        raise InputError(f"{where} is nested more than {_MAX_INPUT_DEPTH} levels deep")
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(k, where, depth + 1): _plain(v, where, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, where, depth + 1) for v in value]
    raise InputError(f"{where} holds a {type(value).__name__}; chat messages may only hold strings, numbers, "
                     f"booleans, None, lists and dicts")


def _plain_messages(messages) -> list[dict]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
        raise InputError(f"messages must be a list of dicts like {{'role': 'user', 'content': '...'}}, "
                         f"not a {type(messages).__name__}")
    if not messages:
        raise InputError("the conversation is empty: give at least one message")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InputError(f"message {i} is a {type(m).__name__}, not a dict like "
                             f"{{'role': 'user', 'content': '...'}}")
        # Like transformers: keys whose value is None are dropped (templates test `is defined`).
        out.append({k: v for k, v in _plain(m, f"message {i}").items() if v is not None})
    return out


# ---------------------------------------------------------------------------------------------------------------
# public API

class ChatTemplate:
    """A compiled chat template. `template` None or empty means the model has none: ChatML is used instead."""

    def __init__(self, template: str | None, bos_token: str | None = "", eos_token: str | None = "", *,
                 limits: TemplateLimits = _DEFAULT_LIMITS):
        self.is_fallback = not template
        if self.is_fallback:
            log.warning("the model has no chat template; formatting the conversation as ChatML")
            template = CHATML_TEMPLATE
        if not isinstance(template, str):
            raise InputError(f"a chat template must be a string, not a {type(template).__name__}")
        if len(template) > limits.max_source_chars:
            raise _refuse(f"is {len(template):,} characters long, more than the {limits.max_source_chars:,} allowed "
                          f"(real templates take a few thousand; compiling one costs about 5 µs a character)")
        self.source = template
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self.limits = limits
        self._template = _compile(template)

    @classmethod
    def from_metadata(cls, metadata: Mapping, *, limits: TemplateLimits = _DEFAULT_LIMITS) -> "ChatTemplate":
        """The template of a GGUF file from its metadata dict (`tokenizer.chat_template`, with the texts of
        `tokenizer.ggml.bos_token_id` / `eos_token_id` as bos_token / eos_token); ChatML if it has none."""
        def text(value):
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

        tokens = metadata.get("tokenizer.ggml.tokens") or []

        def token(key):
            i = metadata.get(key)
            return text(tokens[i]) if isinstance(i, int) and 0 <= i < len(tokens) else ""

        return cls(text(metadata.get("tokenizer.chat_template")), token("tokenizer.ggml.bos_token_id"),
                   token("tokenizer.ggml.eos_token_id"), limits=limits)

    def render(self, messages: list[dict], add_generation_prompt: bool = True, **extra) -> str:
        """The prompt text for `messages`; `extra` adds template variables (e.g. tools=[...])."""
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, "tools": None, "documents": None,
                     **{k: _plain(v, f"template variable {k!r}") for k, v in extra.items()},
                     "messages": _plain_messages(messages), "add_generation_prompt": bool(add_generation_prompt)}
        size = _weight(variables, self.limits.max_chars)
        if size > self.limits.max_chars:
            raise InputError(f"the conversation is too long to format (over {self.limits.max_chars:,} "
                             f"characters); shorten it")
        budget = _Budget(self.limits)
        token = _ACTIVE.set(budget)
        try:
            return "".join(self._template.generate(variables))
        except InputError:
            raise
        except jinja2.TemplateError as e:
            raise InputError(f"the model's chat template failed on this conversation: {e}") from e
        except RecursionError:
            raise _refuse("recursed too deeply") from None
        except MemoryError:
            raise _refuse("ran out of memory") from None
        except Exception as e:   # the template is data: any failure inside it is a problem with the input
            raise InputError(f"the model's chat template failed on this conversation: "
                             f"{type(e).__name__}: {e}") from e
        finally:
            _ACTIVE.reset(token)

    def __repr__(self) -> str:
        kind = "ChatML fallback" if self.is_fallback else f"{len(self.source)} characters"
        return f"<ChatTemplate {kind}>"


def render_chat(template: str | None, messages: list[dict], *, add_generation_prompt: bool = True,
                bos_token: str | None = "", eos_token: str | None = "", **extra) -> str:
    """Render `messages` with the Jinja chat `template` (None or '' → ChatML). Compiled templates are cached."""
    return ChatTemplate(template, bos_token, eos_token).render(messages, add_generation_prompt, **extra)
