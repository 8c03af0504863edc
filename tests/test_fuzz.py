"""Property-based fuzzing (hypothesis) of everything that reads untrusted model data: the GGUF reader, the
tokenizer built from GGUF metadata, and chat templates.

Every example must end in success or in the project's own error (a CeraError subclass: GGUFFormatError for a bad
file, UnsupportedModelError, InputError), quickly, without a large allocation driven by a header value; successes
are checked against independent oracles (the file model the example was built from, the `gguf` package's block
table, HF `tokenizers`, round trips).

The suite runs a bounded number of examples per test, derandomized (the same examples every run). A longer,
randomized run:

    CERA_WEB_FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz.py -q

The GGUF properties measure each parse's peak memory (PEAK_FIXED + PEAK_PER_BYTE x the header); the long run
of 125,000 GGUF cases (5 properties, the tokenizer's included), printing each GGUF test's largest peak:

    CERA_WEB_FUZZ_EXAMPLES=25000 python -m pytest tests/test_fuzz.py -q -s \
        -k "valid_files or mutated or hostile_tensor or hostile_metadata"

(docs/robustness.md records the last such runs.) A failing example is printed by hypothesis with the call that
reproduces it.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import time
import tracemalloc

import gguf
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from cera_web import gguf as cg
from cera_web.template import CHATML_TEMPLATE, ChatTemplate, TemplateLimits, render_chat
from cera_web.errors import CeraError, GGUFFormatError, InputError
from cera_web.gguf import parse_gguf
from cera_web.tokenizer import BYTE_TO_CHAR, StreamDecoder, Tokenizer

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType

LONG_RUN = int(os.environ.get("CERA_WEB_FUZZ_EXAMPLES", "0") or 0)
HANG_S = 30.0         # one example of a few KiB taking longer than this is a hang, whatever the machine load


def fuzz(examples: int):
    """Hypothesis settings: `examples` in the suite, CERA_WEB_FUZZ_EXAMPLES (randomized) in a long run."""
    return settings(max_examples=LONG_RUN or examples, deadline=None, database=None, derandomize=not LONG_RUN,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def timed(fn, *args, **kwargs):
    """(result or the CeraError raised, seconds). Any other exception propagates and fails the example."""
    t0 = time.perf_counter()
    try:
        out = fn(*args, **kwargs)
    except CeraError as e:
        out = e
    elapsed = time.perf_counter() - t0
    assert elapsed < HANG_S, f"{getattr(fn, '__name__', fn)} took {elapsed:.1f} s"
    return out, elapsed


# ---------------------------------------------------------------------------------------------------------------
# A GGUF encoder that records where each numeric header field sits (mutations aim at those).

class Enc:
    def __init__(self):
        self.buf = bytearray()
        self.fields: list[tuple[int, int]] = []     # (offset, size) of every length / count / type / offset field

    def num(self, fmt: str, v: int):
        self.fields.append((len(self.buf), struct.calcsize(fmt)))
        self.buf += struct.pack(fmt, v)

    def u32(self, v):
        self.num("<I", v & 0xFFFFFFFF)

    def u64(self, v):
        self.num("<Q", v & 0xFFFFFFFFFFFFFFFF)

    def string(self, s: str | bytes):
        b = s.encode() if isinstance(s, str) else s
        self.u64(len(b))
        self.buf += b

    def value(self, vtype: int, v):
        """One metadata value of type `vtype` (arrays: v = (item_type, items))."""
        if vtype == VT.STRING:
            self.string(v)
        elif vtype == VT.ARRAY:
            itype, items = v
            self.u32(itype)
            self.u64(len(items))
            for item in items:
                self.value(itype, item)
        else:
            self.buf += struct.pack("<" + SCALAR_CODE[vtype], v)


SCALAR_CODE = {VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I", VT.INT32: "i",
               VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q", VT.FLOAT64: "d"}
SCALARS = {
    VT.UINT8: st.integers(0, 2**8 - 1), VT.INT8: st.integers(-2**7, 2**7 - 1),
    VT.UINT16: st.integers(0, 2**16 - 1), VT.INT16: st.integers(-2**15, 2**15 - 1),
    VT.UINT32: st.integers(0, 2**32 - 1), VT.INT32: st.integers(-2**31, 2**31 - 1),
    VT.UINT64: st.integers(0, 2**64 - 1), VT.INT64: st.integers(-2**63, 2**63 - 1),
    VT.FLOAT32: st.floats(width=32, allow_nan=False), VT.FLOAT64: st.floats(allow_nan=False),
    VT.BOOL: st.booleans(),
}
TEXT = st.text(max_size=12)     # hypothesis text: any code point but lone surrogates (UTF-8 encodable)


@st.composite
def gguf_values(draw, depth: int = 0, array: bool = False):
    """(value type, value as Enc.value takes it, the Python value the reader must return); an array if `array`."""
    types = [*SCALARS, VT.STRING] + ([VT.ARRAY] if depth < 3 else [])
    vtype = VT.ARRAY if array else draw(st.sampled_from(types))
    if vtype == VT.STRING:
        s = draw(TEXT)
        return vtype, s, s
    if vtype != VT.ARRAY:
        v = draw(SCALARS[vtype])
        return vtype, v, v
    itype = draw(st.sampled_from(types))
    if itype == VT.ARRAY:
        inner = draw(st.lists(gguf_values(depth + 1, array=True), max_size=3))
        return vtype, (itype, [x[1] for x in inner]), [x[2] for x in inner]
    strat = TEXT if itype == VT.STRING else SCALARS[itype]
    items = draw(st.lists(strat, max_size=6))
    return vtype, (itype, items), list(items)


# tensor types with small blocks (files stay small); the block table used to lay them out is the gguf package's
TENSOR_TYPES = [QT.F32, QT.F16, QT.BF16, QT.I8, QT.I32, QT.F64, QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.Q5_1, QT.Q4_K, QT.Q6_K,
                QT.IQ2_XXS, QT.TQ2_0]


def tensor_nbytes(qt, dims) -> tuple[int, int]:
    block, size = gguf.GGML_QUANT_SIZES[qt]
    n = math.prod(dims)
    return n, n // block * size


@st.composite
def valid_files(draw):
    """A valid GGUF file: (bytes, numeric field positions, expected parse as a comparable tuple)."""
    kvs = draw(st.lists(st.tuples(TEXT.filter(lambda k: k != "general.alignment"), gguf_values()),
                        unique_by=lambda kv: kv[0], max_size=6))
    alignment = draw(st.sampled_from([None, 1, 4, 16, 32, 64, 256]))
    if alignment is not None:
        at = draw(st.integers(0, len(kvs)))
        kvs.insert(at, ("general.alignment", (VT.UINT32, alignment, alignment)))
    align = alignment or 32
    names = draw(st.lists(TEXT, unique=True, max_size=5))
    specs = []
    for name in names:
        qt = draw(st.sampled_from(TENSOR_TYPES))
        block = gguf.GGML_QUANT_SIZES[qt][0]
        n_dims = draw(st.integers(1, 4))
        dims = [block * draw(st.integers(1, 3))] + [draw(st.integers(1, 3)) for _ in range(n_dims - 1)]
        specs.append((name, qt, dims))
    # lay the data out in a random order with random aligned gaps
    order = draw(st.permutations(range(len(specs))))
    rel, pos = {}, 0
    for i in order:
        pos += align * draw(st.integers(0, 2))
        rel[i] = pos
        pos += -(-tensor_nbytes(specs[i][1], specs[i][2])[1] // align) * align
    version = draw(st.sampled_from([2, 3]))

    e = Enc()
    e.buf += b"GGUF"
    e.u32(version)
    e.u64(len(specs))
    e.u64(len(kvs))
    for key, (vtype, v, _) in kvs:
        e.string(key)
        e.u32(vtype)
        e.value(vtype, v)
    for i, (name, qt, dims) in enumerate(specs):
        e.string(name)
        e.u32(len(dims))
        for d in dims:
            e.u64(d)
        e.u32(int(qt))
        e.u64(rel[i])
    data_offset = -(-len(e.buf) // align) * align
    e.buf += bytes(data_offset - len(e.buf) + pos + draw(st.integers(0, align)))
    tensors = []
    for i, (name, qt, dims) in enumerate(specs):
        n, nbytes = tensor_nbytes(qt, dims)
        tensors.append((name, tuple(dims), int(qt), data_offset + rel[i], nbytes, n))
    expected = (version, [(k, x[2]) for k, x in kvs], tensors, align, data_offset)
    return bytes(e.buf), e.fields, expected


def as_tuple(g: cg.GGUFFile):
    return (g.version, list(g.metadata.items()),
            [(t.name, t.shape, int(t.type), t.offset, t.nbytes, t.n_elements) for t in g.tensors.values()],
            g.alignment, g.data_offset)


@contextlib.contextmanager
def windows(first: int, most: int):
    """Parse through read windows of `first` bytes growing to `most` (tiny ones force refills everywhere)."""
    saved = cg._FIRST_WINDOW, cg._MAX_WINDOW
    cg._FIRST_WINDOW, cg._MAX_WINDOW = first, most
    try:
        yield
    finally:
        cg._FIRST_WINDOW, cg._MAX_WINDOW = saved


def parse(data: bytes):
    return parse_gguf(lambda o, n: data[o:o + n], len(data))


def check_invariants(g: cg.GGUFFile, data: bytes):
    """What a successful parse promises, checked on its own (not against the parser's tables)."""
    assert g.file_size == len(data) and g.alignment > 0 and g.alignment & (g.alignment - 1) == 0
    assert g.data_offset % g.alignment == 0

    def plain(v, depth=0):
        assert depth < 20
        if isinstance(v, list):
            for x in v:
                plain(x, depth + 1)
        else:
            assert type(v) in (int, float, bool, str), type(v)

    for k, v in g.metadata.items():
        assert isinstance(k, str)
        if isinstance(v, cg.UnreadArray):      # an array longer than the model can need: left unread
            assert len(v) > v.limit
            continue
        plain(v)
    spans = []
    for name, t in g.tensors.items():
        assert t.name == name and len(t.shape) <= 4
        assert all(type(d) is int and 0 < d < 2**63 for d in t.shape)
        block, size = gguf.GGML_QUANT_SIZES[QT(int(t.type))]
        assert (t.shape[0] if t.shape else 1) % block == 0
        assert t.n_elements == math.prod(t.shape) and t.nbytes == t.n_elements // block * size
        assert g.data_offset <= t.offset and t.offset + t.nbytes <= len(data)
        assert (t.offset - g.data_offset) % g.alignment == 0
        spans.append((t.offset, t.offset + t.nbytes))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "tensors overlap"


def kind(result) -> str:
    """A label for hypothesis' statistics (pytest --hypothesis-show-statistics): success, or the error's gist."""
    if not isinstance(result, Exception):
        return "ok"
    words = str(result).split(": ")[-1].split()
    return f"{type(result).__name__}: {' '.join(words[:6])}"


# Peak memory of one parse (tracemalloc): at most PEAK_FIXED + PEAK_PER_BYTE x the bytes of the file's header (the
# whole file when nothing parses). The largest peak seen by each test is kept in PEAKS (printed with -s).
PEAK_FIXED = 64 << 10
PEAK_PER_BYTE = 6
PEAKS: dict[str, tuple[int, int]] = {}


def traced_peak(fn, *args):
    """(fn(*args) or the CeraError raised, tracemalloc peak in bytes)."""
    tracemalloc.start()
    try:
        out, _ = timed(fn, *args)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def check_peak(peak: int, header: int, what: str, windows: int = 0):
    """Fail if `peak` exceeds the bound (plus `windows` bytes of read windows); keep the test's largest peak."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    if peak > PEAKS.get(test, (0, 0))[0]:
        PEAKS[test] = (peak, header)
    bound = PEAK_FIXED + PEAK_PER_BYTE * header + windows
    assert peak <= bound, f"{what}: peak {peak} bytes for a {header}-byte header (bound {bound})"


@pytest.fixture(scope="module", autouse=True)
def report_peaks():
    yield
    for test, (peak, header) in sorted(PEAKS.items()):
        print(f"\npeak memory {test}: {peak} bytes (header {header} bytes)")


def outcome(data: bytes, *, tiny: bool = False):
    """Parse `data` (optionally through tiny windows): the GGUFFile or the GGUFFormatError; anything else fails.
    The parse's peak memory is checked against PEAK_FIXED + PEAK_PER_BYTE x the header."""
    with windows(16, 64) if tiny else contextlib.nullcontext():
        result, peak = traced_peak(parse, data)
    check_peak(peak, result.data_offset if isinstance(result, cg.GGUFFile) else len(data), f"{len(data)}-byte file")
    event(f"peak < {1 << max(peak - 1, 1).bit_length() - 10} KiB")
    event(kind(result) if not isinstance(result, Exception) else type(result).__name__)
    if isinstance(result, CeraError):
        assert isinstance(result, GGUFFormatError), f"{type(result).__name__}: {result}"
        assert len(str(result)) > 20
    else:
        check_invariants(result, data)
    return result


def same(a, b) -> bool:
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    return repr(as_tuple(a)) == repr(as_tuple(b))      # repr: a NaN in the metadata equals itself


# ---------------------------------------------------------------------------------------------------------------
# GGUF reader

@fuzz(150)
@given(valid_files(), st.booleans())
def test_valid_files_parse_to_what_was_written(case, tiny):
    data, _, expected = case
    got = outcome(data, tiny=tiny)
    assert not isinstance(got, Exception), got
    assert as_tuple(got) == expected


U64_LIES = [0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
U32_LIES = [0, 1, 4, 5, 8, 9, 12, 13, 16, 31, 36, 99, 2**31, 2**32 - 1]


@st.composite
def mutated_files(draw):
    """A valid file with 1-4 hostile edits: numeric header fields set to lies (lengths and counts past the end,
    huge, zero, off by one, unknown type ids), bytes flipped, cut, inserted or deleted."""
    data, fields, _ = draw(valid_files())
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["field", "field", "field", "flip", "cut", "insert", "delete"]))
        if kind == "field" and fields:
            at, size = draw(st.sampled_from(fields))
            if at + size > len(buf):
                continue
            old = int.from_bytes(buf[at:at + size], "little")
            pool = (U64_LIES if size == 8 else U32_LIES) + [old + 1, max(old - 1, 0), old * 2, len(buf),
                                                            len(buf) - at]
            v = draw(st.one_of(st.sampled_from(pool), st.integers(0, 2**(8 * size) - 1)))
            buf[at:at + size] = (v % 2**(8 * size)).to_bytes(size, "little")
        elif kind == "flip" and buf:
            at = draw(st.integers(0, len(buf) - 1))
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del buf[draw(st.integers(0, len(buf))):]
        elif kind == "insert":
            at = draw(st.integers(0, len(buf)))
            buf[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete" and buf:
            at = draw(st.integers(0, len(buf) - 1))
            del buf[at:at + draw(st.integers(1, 16))]
    return bytes(buf)


@fuzz(400)
@given(mutated_files())
def test_mutated_files_fail_cleanly_whatever_the_window(data):
    # The result does not depend on how the file is read: whole 1 MiB windows and 16-byte ones agree exactly
    # (the same GGUFFile, or the same error message).
    a = outcome(data)
    b = outcome(data, tiny=True)
    assert same(a, b), (a, b)


@st.composite
def hostile_tensor_tables(draw):
    """Files whose metadata is valid and whose tensor table is a valid one with 0-3 fields replaced by values from
    hostile pools: duplicate names, 0-6 dimensions, zero / negative / huge dimensions, unknown and removed type ids,
    misaligned, overlapping and out-of-file offsets, a data section cut short. Returns (bytes, the table, alignment,
    data offset)."""
    align = draw(st.sampled_from([1, 16, 32, 64]))
    table, pos = [], 0
    for i in range(draw(st.integers(1, 4))):
        qt = draw(st.sampled_from(TENSOR_TYPES))
        block = gguf.GGML_QUANT_SIZES[qt][0]
        dims = [block * draw(st.integers(1, 2))] + [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 3)))]
        table.append([f"t{i}", dims, int(qt), pos])
        pos += -(-tensor_nbytes(qt, dims)[1] // align) * align
    data_size = pos
    hostile = {
        "name": st.sampled_from(["t0", "t1", "", "blk.0.attn_q.weight"]),
        "n_dims": st.sampled_from([0, 5, 6, 2, 3]),
        "dim": st.one_of(st.sampled_from([0, 1, 2, 3, 31, 32, 256, 2**64 - 1, 2**63, 2**62, 2**40]),
                         st.integers(0, 2**64 - 1)),
        "type": st.one_of(st.sampled_from([int(t) for t in TENSOR_TYPES] + [4, 5, 31, 33, 36, 38, 42, 99]),
                          st.integers(0, 2**32 - 1)),
        "offset": st.one_of(st.integers(0, 8).map(lambda k: k * align), st.sampled_from([4, 1, 2**63, 2**64 - align]),
                            st.integers(0, 2**64 - 1)),
        "data": st.integers(0, data_size + 64),
    }
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from(list(hostile)))
        t = draw(st.sampled_from(table))
        v = draw(hostile[field])
        if field == "name":
            t[0] = v
        elif field == "n_dims":
            t[1] = (t[1] + [1] * 6)[:v]
        elif field == "dim" and t[1]:
            t[1][draw(st.integers(0, len(t[1]) - 1))] = v
        elif field == "type":
            t[2] = v
        elif field == "offset":
            t[3] = v
        elif field == "data":
            data_size = v
    table = [tuple(t) for t in table]
    e = Enc()
    e.buf += b"GGUF"
    e.u32(3)
    e.u64(len(table))
    e.u64(2)
    e.string("general.architecture")
    e.u32(VT.STRING)
    e.string("llama")
    e.string("general.alignment")
    e.u32(VT.UINT32)
    e.buf += struct.pack("<I", align)
    for name, dims, qt, offset in table:
        e.string(name)
        e.u32(len(dims))
        for d in dims:
            e.u64(d)
        e.u32(qt)
        e.u64(offset)
    data_offset = -(-len(e.buf) // align) * align
    data = bytes(e.buf) + bytes(data_offset - len(e.buf) + data_size)
    return data, table, align, data_offset


def table_is_valid(table, align, data_offset, file_size) -> bool:
    """The oracle: what makes a tensor table acceptable, written from the GGUF rules with the gguf package's
    types and block sizes."""
    if len({name for name, *_ in table}) != len(table):
        return False                                        # duplicate names
    spans = []
    for name, dims, qt, offset in table:
        if not 1 <= len(dims) <= 4 or any(not 0 < d < 2**63 for d in dims):
            return False                                    # no dims or too many; zero or negative (as int64)
        if qt not in {int(t) for t in QT}:
            return False                                    # not a ggml type
        block, size = gguf.GGML_QUANT_SIZES[QT(qt)]
        if (dims[0] if dims else 1) % block or offset % align:
            return False                                    # rows not whole blocks; misaligned
        start = data_offset + offset
        end = start + math.prod(dims) // block * size
        if end > file_size:
            return False                                    # outside the file
        spans.append((start, end))
    spans.sort()
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))   # no overlap


@fuzz(400)
@given(hostile_tensor_tables())
def test_hostile_tensor_tables_rejected_exactly_when_invalid(case):
    data, table, align, data_offset = case
    got = outcome(data)
    valid = table_is_valid(table, align, data_offset, len(data))
    assert isinstance(got, GGUFFormatError) != valid, (table, got)
    if valid:
        assert [(t.name, list(t.shape), int(t.type), t.offset - data_offset) for t in got.tensors.values()] == \
            [(n, d, q, o) for n, d, q, o in table]


@st.composite
def hostile_metadata(draw):
    """Headers whose metadata entries are built from hostile parts: keys and strings with lying lengths and bad
    UTF-8, unknown value types, arrays with lying counts and unknown item types, deep nesting, bools other than
    0/1, counts in the fixed header past the end."""
    e = Enc()
    e.buf += b"GGUF"
    e.u32(draw(st.sampled_from([3, 3, 3, 2, 1, 0, 4, 2**24 * 3])))
    n_kv = draw(st.integers(0, 4))
    e.u64(draw(st.sampled_from([0, 0, 0, 1, 2**40, 2**64 - 1])))          # tensor count (mostly none)
    e.u64(draw(st.sampled_from([n_kv] * 4 + [n_kv + 1, 2**32, 2**63, 2**64 - 1])))

    def blob():
        raw = draw(st.one_of(TEXT.map(str.encode), st.binary(max_size=12)))
        length = draw(st.sampled_from([len(raw)] * 3 + [len(raw) + 1, 2**32, 2**63, 2**64 - 1, 0]))
        e.u64(length)
        e.buf += raw

    def val(vtype, depth):
        if vtype == VT.STRING:
            blob()
        elif vtype == VT.ARRAY:
            itype = draw(st.sampled_from([*SCALARS, VT.STRING, VT.ARRAY, 13, 2**31]))
            count = draw(st.integers(0, 4 if depth < 2 else 1))
            e.u32(itype)
            e.u64(draw(st.sampled_from([count] * 3 + [count + 1, 2**31, 2**61, 2**64 - 1])))
            if depth < 20 and itype in (VT.STRING, VT.ARRAY) or itype in SCALARS:
                for _ in range(count):
                    val(itype, depth + 1)
        elif vtype in SCALARS:
            e.buf += draw(st.binary(min_size=struct.calcsize(SCALAR_CODE[vtype]),
                                    max_size=struct.calcsize(SCALAR_CODE[vtype])))
        else:
            e.buf += draw(st.binary(max_size=8))

    for _ in range(n_kv):
        blob()
        vtype = draw(st.sampled_from([*SCALARS, VT.STRING, VT.ARRAY, VT.ARRAY, 13, 255, 2**32 - 1]))
        e.u32(vtype)
        val(vtype, 0)
    e.buf += draw(st.binary(max_size=64))
    return bytes(e.buf)


@fuzz(400)
@given(hostile_metadata())
def test_hostile_metadata_fails_cleanly_with_bounded_allocation(data):
    # outcome() checks the parse's peak memory: a header value never drives an allocation.
    a = outcome(data)
    assert same(a, outcome(data, tiny=True))


@pytest.mark.parametrize("itype, item, count", [
    (VT.UINT8, b"\x01", 1_000_000),         # the worst case: 1 byte of file -> one list slot
    (VT.BOOL, b"\x01", 1_000_000),
    (VT.STRING, struct.pack("<Q", 1) + b"x", 200_000),
    (VT.ARRAY, struct.pack("<IQ", VT.UINT8, 0), 50_000),       # empty arrays: one list object per 12 bytes
])
def test_real_large_arrays_cost_a_bounded_multiple_of_their_bytes(itype, item, count):
    # Arrays that really are in the file (not a lying count): parsing them allocates within a fixed multiple of the
    # bytes they take, so a header's memory is bounded by the file size.
    e = Enc()
    e.buf += b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    e.string("big")
    e.u32(VT.ARRAY)
    e.buf += struct.pack("<IQ", itype, count) + item * count
    data = bytes(e.buf)
    tracemalloc.start()
    try:
        g = parse(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(g.metadata["big"]) == count
    ratio = peak / len(data)
    print(f"{itype.name}: {peak / 2**20:.1f} MiB for {len(data) / 2**20:.1f} MiB ({ratio:.1f}x)")
    assert ratio < 40


# ---------------------------------------------------------------------------------------------------------------
# The hostile files of issue 17, made from the real model: parse or GGUFFormatError, within the same memory bound
# as every fuzz example (PEAK_FIXED + PEAK_PER_BYTE x the header of the model they were made from) plus the two
# largest read windows (the real header is read through 1 + 2 MiB windows).

def _real_header(path):
    r = gguf.GGUFReader(path)
    return r.tensors[0].field.offset, r.data_offset, r.fields


def _flip_token_type_count(data: bytearray, table: int, fields):
    f = fields["tokenizer.ggml.token_type"]
    at = f.offset + 8 + len(f.name.encode()) + 4 + 4           # key length, key, value type, item type
    assert struct.unpack_from("<Q", data, at)[0] == 49152
    struct.pack_into("<Q", data, at, 49152 | 1 << 24)


def _added_array(itype, size):
    def edit(data: bytearray, table: int, fields):
        # one more metadata entry just before the tensor table: an array swallowing the table and the tensor data
        count = (len(data) - table) // size - 64
        struct.pack_into("<Q", data, 16, struct.unpack_from("<Q", data, 16)[0] + 1)
        data[table:table] = struct.pack("<Q", 4) + b"junk" + struct.pack("<IIQ", VT.ARRAY, itype, count)
    return edit


def _huge_block_count(data: bytearray, table: int, fields):
    f = fields["llama.block_count"]
    at = f.offset + 8 + len(f.name.encode()) + 4               # key length, key, value type
    assert struct.unpack_from("<I", data, at)[0] == 30
    struct.pack_into("<I", data, at, 2**32 - 1)


def _zero_dims(data: bytearray, table: int, fields):
    # the first tensor (token_embd.weight, 2-D) claims 0 dimensions; its two dimension fields are removed
    at = table + 8 + len(b"token_embd.weight")
    assert struct.unpack_from("<I", data, at)[0] == 2
    data[at:at + 20] = struct.pack("<I", 0)


HOSTILE_FILES = {
    "token_type count with bit 24 flipped": (_flip_token_type_count, GGUFFormatError),
    "uint8 array spanning the tensor data": (_added_array(VT.UINT8, 1), GGUFFormatError),
    "float32 array spanning the tensor data": (_added_array(VT.FLOAT32, 4), GGUFFormatError),
    "block_count 2^32-1 with the tensors of 30 layers": (_huge_block_count, None),   # the model load refuses it
    "a tensor with n_dims = 0": (_zero_dims, GGUFFormatError),
}


@pytest.mark.parametrize("case", list(HOSTILE_FILES))
def test_hostile_files_bounded_memory(smollm2_gguf, case):
    edit, error = HOSTILE_FILES[case]
    table, header, fields = _real_header(smollm2_gguf)
    data = bytearray(smollm2_gguf.read_bytes())
    edit(data, table, fields)
    data = bytes(data)
    out, peak = traced_peak(parse, data)
    print(f"{case}: peak {peak / 2**20:.1f} MiB, header {header / 2**20:.1f} MiB: {str(out)[:100]}")
    check_peak(peak, header, case, windows=3 << 20)
    if error is None:
        assert isinstance(out, cg.GGUFFile) and out.metadata["llama.block_count"] == 2**32 - 1
    else:
        assert isinstance(out, error), out


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer from hostile metadata

def gguf_file_with(metadata: list[tuple[str, int, object]]) -> cg.GGUFFile:
    """Write metadata (key, value type, value) as a GGUF file and parse it: the tokenizer sees exactly the values a
    file can carry."""
    e = Enc()
    e.buf += b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata))
    for key, vtype, v in metadata:
        e.string(key)
        e.u32(vtype)
        e.value(vtype, v)
    return parse(bytes(e.buf))


SYMBOLS = st.sampled_from(BYTE_TO_CHAR[:8] + list("abcĠ"))
TOKEN_TEXT = st.one_of(st.lists(SYMBOLS, min_size=1, max_size=4).map("".join),
                       st.sampled_from(["<|im_end|>", "<s>", "", "<|endoftext|>"]), TEXT)


@st.composite
def tokenizer_metadata(draw):
    """Tokenizer keys, each absent, plausible, or any value of any GGUF type."""
    tokens = draw(st.lists(TOKEN_TEXT, min_size=0, max_size=12))
    n = len(tokens)
    plausible = {
        "tokenizer.ggml.model": (VT.STRING, "gpt2"),
        "tokenizer.ggml.pre": (VT.STRING, draw(st.sampled_from(["gpt2", "smollm", "llama-bpe", "qwen2", "x"]))),
        "tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens)),
        "tokenizer.ggml.token_type": (VT.ARRAY, (VT.INT32, draw(st.lists(st.sampled_from([1, 1, 2, 3, 4, 5, 6, 0,
                                                                                            -1, 99]),
                                                                           min_size=n, max_size=n)))),
        "tokenizer.ggml.merges": (VT.ARRAY, (VT.STRING, [f"{a} {b}" for a, b in draw(st.lists(
            st.tuples(TOKEN_TEXT, TOKEN_TEXT), max_size=8))])),
        "tokenizer.ggml.bos_token_id": (VT.UINT32, draw(st.integers(0, n + 1))),
        "tokenizer.ggml.eos_token_id": (VT.UINT32, draw(st.integers(0, n + 1))),
        "tokenizer.ggml.eot_token_id": (VT.INT32, draw(st.integers(-1, n + 1))),
        "tokenizer.ggml.add_bos_token": (VT.BOOL, draw(st.booleans())),
        "tokenizer.ggml.add_eos_token": (VT.BOOL, draw(st.booleans())),
        "tokenizer.chat_template": (VT.STRING, "{{ messages[0]['content'] }}"),
    }
    out = []
    for key, good in plausible.items():
        choice = draw(st.sampled_from(["good"] * 6 + ["absent", "any"]))
        if choice == "good":
            out.append((key, *good))
        elif choice == "any":
            vtype, v, _ = draw(gguf_values())
            out.append((key, vtype, v))
    return out


# any text, lone surrogates included (a Python str can hold them; a JS string handed over by Pyodide too)
ANY_TEXT = st.lists(st.one_of(st.characters(), st.characters(categories=["Cs"]),
                              st.sampled_from(["<|im_end|>", "<|im_start|>", "<tool>", " ", "\n", "'s", "12"])),
                    max_size=30).map("".join)


@fuzz(300)
@given(tokenizer_metadata(), ANY_TEXT, st.lists(st.integers(-5, 40), max_size=8))
def test_tokenizer_from_hostile_metadata(metadata, text, ids):
    g = gguf_file_with(metadata)
    tok, _ = timed(Tokenizer.from_gguf, g)
    event(kind(tok))
    if isinstance(tok, CeraError):
        assert len(str(tok)) > 20
        return
    for parse_special in (True, False):
        enc, _ = timed(tok.encode, text, parse_special=parse_special)
        assert not isinstance(enc, CeraError), enc
        assert all(type(i) is int and 0 <= i < tok.vocab_size for i in enc)
        assert isinstance(tok.decode(enc), str)
    dec, _ = timed(tok.decode, ids)
    in_range = all(0 <= i < tok.vocab_size for i in ids)
    assert isinstance(dec, InputError) != in_range
    stream = StreamDecoder(tok)
    for i in ids:
        piece, _ = timed(stream.push, i)
        assert isinstance(piece, InputError) == (not 0 <= i < tok.vocab_size)


@st.composite
def full_byte_vocabularies(draw):
    """A byte-level vocabulary with every byte symbol, random merged tokens and merges (some naming tokens the
    vocabulary lacks), random control / user-defined tokens, and any pre-tokenizer."""
    merged = draw(st.lists(st.lists(st.sampled_from(BYTE_TO_CHAR[32:128] + BYTE_TO_CHAR[:4]), min_size=2,
                                    max_size=4).map("".join), unique=True, max_size=20))
    merged = [m for m in merged if m not in BYTE_TO_CHAR]
    specials = draw(st.lists(st.sampled_from(["<|im_start|>", "<|im_end|>", "<tool>", "[INST]", "<|x|>"]),
                             unique=True, max_size=3))
    tokens = list(BYTE_TO_CHAR) + merged + specials
    types = [1] * (256 + len(merged)) + [draw(st.sampled_from([3, 4])) for _ in specials]
    merges = []
    for m in merged:
        cut = draw(st.integers(1, len(m) - 1))
        merges.append(f"{m[:cut]} {m[cut:]}")
    merges += [f"{a} {b}" for a, b in draw(st.lists(st.tuples(SYMBOLS, SYMBOLS), max_size=4))]
    order = draw(st.permutations(range(len(merges))))
    pre = draw(st.sampled_from(["gpt2", "smollm", "llama-bpe", "qwen2", "dbrx"]))
    return Tokenizer(tokens, [merges[i] for i in order], types, pre=pre, add_bos=False)


@fuzz(300)
@given(full_byte_vocabularies(), ANY_TEXT)
def test_decode_inverts_encode(tok, text):
    # Every byte has a token, so nothing is dropped: decode(encode(text)) gives the text back exactly, with each
    # lone surrogate (which UTF-8 cannot carry) replaced by U+FFFD, as a browser's TextEncoder does.
    want = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    for parse_special in (True, False):
        ids = tok.encode(text, add_special=False, parse_special=parse_special)
        assert tok.decode(ids) == want
        stream = StreamDecoder(tok)
        assert "".join(stream.push(i) for i in ids) + stream.flush() == want


@fuzz(200)
@given(st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=3), st.none(), st.booleans(),
                          st.lists(st.integers(), max_size=2)), max_size=6))
def test_decode_of_arbitrary_ids(ids):
    tok = Tokenizer(list(BYTE_TO_CHAR), [])
    got, _ = timed(tok.decode, ids)
    ok = all(isinstance(i, int) and 0 <= i < 256 for i in ids)
    assert isinstance(got, str) == ok and isinstance(got, InputError) != ok, (ids, got)
    for junk in (None, 5, "abc", b"ab", 1.5):
        with pytest.raises(InputError):
            tok.decode(junk)


@pytest.fixture(scope="module")
def smollm2_pair(smollm2_gguf):
    """cera_web's SmolLM2 tokenizer and the independent HF `tokenizers` build of the same vocabulary
    (tests/test_tokenizer.py's hf_reference: Digits + ByteLevel, the smollm pre-tokenizer)."""
    pytest.importorskip("tokenizers")
    from test_tokenizer import hf_reference
    md = dict(cg.open_gguf(smollm2_gguf).metadata)

    class Meta:
        metadata = md

    return Tokenizer.from_gguf(Meta), hf_reference(md, "smollm")


# Text drawn mostly from the kinds of characters where pre-tokenizers differ: digits of many scripts, spaces of
# every kind, letters and marks, punctuation, symbols, emoji, controls.
MIXED_TEXT = st.lists(st.one_of(
    st.characters(categories=["Nd", "Nl", "No", "Zs", "Zl", "Zp", "Cc"]),
    st.sampled_from(list(" \t\n\r'sdtlmvre0123456789") + ["'s", "'ll", "  ", "\r\n"]),
    st.characters(codec="utf-8", exclude_categories=["Cs"])), max_size=30).map("".join)


@fuzz(300)
@given(MIXED_TEXT)
def test_smollm2_matches_hf_tokenizers_on_random_text(smollm2_pair, text):
    ours, hf = smollm2_pair
    # SmolLM2 has no token for 20 of the 256 bytes (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2,
    # 0xF5-0xFF). Both drop them, but HF drops them before merging, so its merges join their neighbours
    # (' \x16\x80': HF 'ĠÂ' 'Ģ', cera_web 'Ġ' 'Â' 'Ģ'), while cera_web keeps them in place while merging, as
    # llama.cpp's BPE does. Text with such bytes is left to test_tokenizer.py's llama.cpp golden ids.
    assume(not any(ours.token_to_id(BYTE_TO_CHAR[b]) is None for b in text.encode("utf-8")))
    assert ours.encode(text, add_special=False, parse_special=False) == hf.encode(text, add_special_tokens=False).ids


def test_huge_vocabulary_relative_to_the_file():
    # 300,000 empty tokens (8 bytes of file each): a vocabulary in bounded time and memory.
    n = 300_000
    e = Enc()
    e.buf += b"GGUF" + struct.pack("<IQQ", 3, 0, 4)
    for key, s in (("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "gpt2")):
        e.string(key)
        e.u32(VT.STRING)
        e.string(s)
    e.string("tokenizer.ggml.merges")
    e.u32(VT.ARRAY)
    e.buf += struct.pack("<IQ", VT.STRING, 0)
    e.string("tokenizer.ggml.tokens")
    e.u32(VT.ARRAY)
    e.buf += struct.pack("<IQ", VT.STRING, n) + bytes(8 * n)
    data = bytes(e.buf)
    t0 = time.perf_counter()
    tracemalloc.start()
    try:
        tok = Tokenizer.from_gguf(parse(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - t0
    print(f"{n} tokens: {elapsed:.1f} s, peak {peak / 2**20:.0f} MiB for a {len(data) / 2**20:.0f} MiB file")
    assert tok.vocab_size == n and tok.encode("abc") == [] and tok.decode([0, n - 1]) == ""
    assert peak < 40 * len(data) and elapsed < 20


# ---------------------------------------------------------------------------------------------------------------
# Chat templates: random programs from a small Jinja grammar that leans on the dangerous parts

SMALL = TemplateLimits(max_steps=20_000, max_chars=100_000, max_range=5_000, max_depth=20, timeout_s=1.0,
                       max_built_bytes=4_000_000)

NAMES = ["messages", "message", "m", "x", "ns", "ns.v", "loop", "range", "namespace", "cycler", "joiner",
         "raise_exception", "dict", "self", "bos_token", "tools"]
ATTRS = ["content", "role", "__class__", "__init__", "__globals__", "__subclasses__", "__mro__", "_x", "mro",
         "items", "append", "update", "pop", "format", "join", "split", "upper", "translate", "__self__",
         "func_globals", "gi_frame", "f_globals", "index", "length"]
FILTERS = ["upper", "join", "tojson", "list", "sort", "string", "length", "first", "last", "reverse", "trim",
           "e", "safe", "attr('__class__')", "map('string')", "map(attribute='__class__')", "batch(3)",
           "replace('a', 'aaaa')", "indent(8)", "center(300)", "wordwrap(2)", "format(1, 2)", "join('xx')",
           "selectattr('role')", "groupby('role')", "dictsort", "items", "unique", "sum", "int", "float", "abs",
           "truncate(5)", "urlize", "striptags", "title", "default('d')", "pprint", "random"]


def exprs():
    leaves = st.one_of(
        st.sampled_from(NAMES),
        st.integers(-3, 300).map(str), st.sampled_from(["10 ** 9", "99999999", "2 ** 64", "-1"]),
        st.sampled_from(["'a'", "'{0.__class__}'", "'%s%s'", "'x' * 1000", "''", "'{:>99999}'", "'%999d'"]),
        st.sampled_from(["[1, 2]", "[]", "{'a': 1}", "(1,)", "none", "true"]))

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(ATTRS)).map(lambda t: f"{t[0]}.{t[1]}"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(inner, st.lists(inner, max_size=2)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(inner, st.sampled_from(["*", "+", "~", "%", "**", "//", "and", "in", "=="]), inner)
            .map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(inner, st.sampled_from(FILTERS)).map(lambda t: f"({t[0]} | {t[1]})"),
            inner.map(lambda e: f"range({e})"))

    return st.recursive(leaves, extend, max_leaves=6)


def statements():
    expr = exprs()
    simple = st.one_of(
        expr.map(lambda e: "{{ " + e + " }}"),
        st.sampled_from(["text ", "\n", "{{ '<|im_start|>' }}"]),
        expr.map(lambda e: "{% set x = " + e + " %}"),
        expr.map(lambda e: "{% set ns = namespace(v=" + e + ") %}"),
        expr.map(lambda e: "{% set ns.v = " + e + " %}"))

    def extend(inner):
        body = st.lists(inner, min_size=1, max_size=3).map("".join)
        loop_body = st.lists(st.one_of(inner, st.sampled_from(["{% break %}", "{% continue %}"])), min_size=1,
                             max_size=3).map("".join)
        return st.one_of(
            st.tuples(expr, loop_body).map(lambda t: "{% for m in " + t[0] + " %}" + t[1] + "{% endfor %}"),
            st.tuples(expr, body).map(lambda t: "{% for m in " + t[0] + " recursive %}" + t[1]
                                      + "{{ loop(m) }}{% endfor %}"),
            st.tuples(expr, body).map(lambda t: "{% if " + t[0] + " %}" + t[1] + "{% endif %}"),
            body.map(lambda b: "{% macro f(n) %}" + b + "{{ f(n) }}{% endmacro %}{{ f(1) }}"),
            body.map(lambda b: "{% set x %}" + b + "{% endset %}{{ x }}"))

    return st.recursive(simple, extend, max_leaves=8)


@fuzz(400)
@given(st.lists(statements(), min_size=1, max_size=4).map("".join))
def test_random_templates_end_in_text_or_input_error(source):
    source = "{% set x = messages[0] %}{% set ns = namespace(v='ab') %}" + source
    chat, _ = timed(ChatTemplate, source, "<s>", "</s>", limits=SMALL)   # compiling: bounded by the source length
    if isinstance(chat, InputError):
        event(kind(chat))
        return
    t0 = time.perf_counter()
    try:
        out = chat.render([{"role": "user", "content": "hi"}])
    except InputError as e:
        out = e
    elapsed = time.perf_counter() - t0
    event(kind(out))
    # the timeout is checked at every step, so only one slow operation can overrun it
    assert elapsed < SMALL.timeout_s + 30.0, f"{elapsed:.1f} s"   # bounded, with room for a busy machine
    if isinstance(out, str):
        assert len(out) <= SMALL.max_chars
        assert "<module" not in out and "__builtins__" not in out, out[:300]


@fuzz(200)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "system", "tool", "{{ 7*7 }}"]), ANY_TEXT),
                min_size=1, max_size=4),
       st.sampled_from(["{{ 7 * 7 }}", "{% for i in range(10**9) %}{% endfor %}", "{{ ''.__class__ }}", "<|im_end|>",
                        "{%", "}}", "{# #}"]))
def test_message_text_is_data_not_template_code(turns, payload):
    # Whatever a message holds (template syntax, special tokens, lone surrogates) appears verbatim in the prompt:
    # ChatML spelled out independently here.
    messages = [{"role": r, "content": c + payload} for r, c in turns]
    want = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
        "<|im_start|>assistant\n"
    assert render_chat(CHATML_TEMPLATE, messages) == want
