"""Tests of cera_web.gguf against the `gguf` package (writer and reader), the real SmolLM2 file, and hand-built
corrupt files."""

from __future__ import annotations

import random
import struct
import tracemalloc
from pathlib import Path

import gguf  # the reference implementation (a test dependency)
import numpy as np
import pytest

from cera_web import gguf as cg
from cera_web.errors import GGUFFormatError, UnsupportedModelError
from cera_web.gguf import GGML_BLOCK, GGMLType, open_gguf, parse_gguf, tensor_bytes

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The default model file, put in place by the asset fetcher."""
    path = REPO / ".assets" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.skip(f"{path.relative_to(REPO)} is missing; fetch the pinned assets first")
    return path


def bytes_reader(data: bytes):
    def read(offset: int, n: int) -> bytes:
        return data[offset:offset + n]
    return read


def parse_bytes(data: bytes) -> cg.GGUFFile:
    return parse_gguf(bytes_reader(data), len(data))


# ---------------------------------------------------------------------------------------------------------------
# A small hand encoder for files the gguf writer cannot or will not produce (corrupt ones, v1, empty arrays).

def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)
def gstr(s): b = s.encode() if isinstance(s, str) else s; return u64(len(b)) + b  # noqa: E702
def kv(key, vtype, payload: bytes): return gstr(key) + u32(vtype) + payload
def kv_u32(key, v): return kv(key, VT.UINT32, u32(v))
def kv_str(key, s): return kv(key, VT.STRING, gstr(s))


def tinfo(name, dims, ttype, offset):
    return gstr(name) + u32(len(dims)) + b"".join(struct.pack("<q", d) for d in dims) + u32(ttype) + u64(offset)


def build(kvs=(), tinfos=(), data=b"", *, version=3, alignment=32, n_tensors=None, n_kv=None) -> bytes:
    head = (b"GGUF" + u32(version) + u64(len(tinfos) if n_tensors is None else n_tensors)
            + u64(len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + b"".join(tinfos))
    pad = -len(head) % alignment
    return head + b"\0" * pad + data


def f32_tensor_file(**kw):
    """Two F32 tensors, 4 and 8 elements, at offsets 0 and 32."""
    tis = [tinfo("a", [4], QT.F32, 0), tinfo("b", [8], QT.F32, 32)]
    return build([kv_str("general.architecture", "test")], tis, bytes(range(64)), **kw)


def expect_error(data: bytes, *fragments: str) -> str:
    with pytest.raises(GGUFFormatError) as e:
        parse_bytes(data)
    msg = str(e.value)
    for frag in fragments:
        assert frag in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------------------------
# Tables

def test_types_and_block_sizes_match_gguf_package():
    ours = {t.name: int(t) for t in GGMLType}
    theirs = {t.name: int(t) for t in QT}
    assert ours == theirs
    assert set(GGML_BLOCK) == set(GGMLType)
    for t in GGMLType:
        assert GGML_BLOCK[t] == gguf.GGML_QUANT_SIZES[QT(int(t))], t.name
    assert {int(t): t.name for t in cg.GGUFValueType} == {int(t): t.name for t in VT}


# ---------------------------------------------------------------------------------------------------------------
# Files written by the gguf package, compared with its reader

SCALARS = [  # key, value, type
    ("t.u8", 255, VT.UINT8), ("t.i8", -128, VT.INT8), ("t.u16", 65535, VT.UINT16), ("t.i16", -32768, VT.INT16),
    ("t.u32", 2**32 - 1, VT.UINT32), ("t.i32", -(2**31), VT.INT32), ("t.u64", 2**64 - 1, VT.UINT64),
    ("t.i64", -(2**63), VT.INT64), ("t.f32", 0.1, VT.FLOAT32), ("t.f64", 0.1, VT.FLOAT64),
    ("t.true", True, VT.BOOL), ("t.false", False, VT.BOOL), ("t.str", "héllo ☃ 𝄞", VT.STRING),
    ("t.empty_str", "", VT.STRING),
]
ARRAYS = [  # key, items, item type
    ("a.u8", [0, 1, 255], VT.UINT8), ("a.i8", [-128, 0, 127], VT.INT8), ("a.u16", [0, 65535], VT.UINT16),
    ("a.i16", [-32768, 5], VT.INT16), ("a.u32", [1, 2**32 - 1], VT.UINT32), ("a.i32", [-1, 3, -(2**31)], VT.INT32),
    ("a.u64", [2**64 - 1, 0], VT.UINT64), ("a.i64", [-(2**63), 7], VT.INT64),
    ("a.f32", [0.5, -1.25, 3.4e38, 1e-45], VT.FLOAT32), ("a.f64", [1e308, -0.1], VT.FLOAT64),
    ("a.bool", [True, False, True], VT.BOOL), ("a.str", ["", "x", "Ġthe", "日本語", "<|im_end|>"], VT.STRING),
]
NESTED = {  # arrays of arrays: the gguf reader flattens these, so they are compared with what was written
    "n.ints": [[1, 2, 3], [4], [5, 6]],
    "n.strs": [["a", "bc"], ["déf"]],
    "n.deep": [[[1], [2, 3]], [[4, 5, 6]]],
}
TENSORS = [  # name, numpy shape (outermost first), type
    ("f32.2d", (3, 5), QT.F32), ("f16.3d", (2, 4, 6), QT.F16), ("i8.1d", (7,), QT.I8),
    ("q8_0", (3, 64), QT.Q8_0), ("q4_1", (2, 32), QT.Q4_1), ("q4_k", (2, 256), QT.Q4_K),
    ("iq2_xxs.4d", (1, 2, 1, 256), QT.IQ2_XXS), ("bf16", (4, 8), QT.BF16), ("scalar.like", (1,), QT.F32),
]


def f32(x):  # the float32 value nearest x, as the file stores it
    return float(np.float32(x))


def write_reference(path: Path, alignment: int | None = None, endian=None) -> dict:
    """Write a GGUF file with every value type and several tensor types; return the tensor payloads."""
    kw = {} if endian is None else {"endianess": endian}
    w = gguf.GGUFWriter(str(path), "testarch", **kw)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, val, vt in SCALARS:
        w.add_key_value(key, val, vt)
    for key, items, vt in ARRAYS:
        w.add_key_value(key, items, VT.ARRAY, sub_type=vt)
    for key, items in NESTED.items():
        w.add_array(key, items)
    w.add_uint32("testarch.block_count", 2)
    rng = np.random.default_rng(0)
    payloads = {}
    for name, shape, qt in TENSORS:
        if qt in (QT.F32, QT.F16):
            arr = rng.standard_normal(shape).astype(np.float32 if qt == QT.F32 else np.float16)
            w.add_tensor(name, arr)
        elif qt == QT.I8:
            arr = rng.integers(-100, 100, shape, dtype=np.int8)
            w.add_tensor(name, arr)
        else:  # quantized or bf16: raw bytes with a byte shape
            block, size = gguf.GGML_QUANT_SIZES[qt]
            byte_shape = (*shape[:-1], shape[-1] // block * size)
            arr = rng.integers(0, 256, byte_shape, dtype=np.uint8)
            w.add_tensor(name, arr, raw_dtype=qt)
        payloads[name] = arr.tobytes()
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return payloads


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "ref.gguf"
    payloads = write_reference(path, alignment=64)
    return path, payloads


def compare_with_gguf_reader(path: Path, g: cg.GGUFFile, skip_keys=()):
    r = gguf.GGUFReader(str(path))
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert list(g.metadata) == list(fields)
    for key, field in fields.items():
        if key in skip_keys:
            continue
        assert g.metadata[key] == field.contents(), key
        assert type(g.metadata[key]) is type(field.contents()), key
    assert g.data_offset == r.data_offset
    assert g.version == r.fields["GGUF.version"].contents()
    assert len(g.tensors) == len(r.tensors)
    for t, rt in zip(g.tensors.values(), r.tensors):
        assert t.name == rt.name
        assert t.shape == tuple(int(d) for d in rt.shape)
        assert int(t.type) == int(rt.tensor_type)
        assert t.offset == rt.data_offset
        assert t.nbytes == rt.n_bytes
        assert t.n_elements == rt.n_elements
    return r


def test_written_file_matches_gguf_reader(reference_file):
    path, payloads = reference_file
    g = open_gguf(path)
    assert g.version == 3 and g.alignment == 64 and g.file_size == path.stat().st_size
    assert g.data_offset % 64 == 0
    r = compare_with_gguf_reader(path, g, skip_keys=NESTED)

    # Values as written (float32 rounded the way the file stores it).
    for key, val, vt in SCALARS:
        want = f32(val) if vt == VT.FLOAT32 else val
        assert g.metadata[key] == want and type(g.metadata[key]) is type(want), key
    for key, items, vt in ARRAYS:
        want = [f32(x) for x in items] if vt == VT.FLOAT32 else items
        assert g.metadata[key] == want, key
        assert all(type(a) is type(b) for a, b in zip(g.metadata[key], want)), key
    for key, items in NESTED.items():
        assert g.metadata[key] == items, key
    assert g.architecture == "testarch" and g.arch_get("block_count") == 2

    # Tensors: names in file order, GGUF shape order (ne0 first), absolute offsets, bytes.
    assert list(g.tensors) == [name for name, _, _ in TENSORS]
    read = cg.path_reader(path)
    for (name, shape, qt), rt in zip(TENSORS, r.tensors):
        t = g.tensors[name]
        assert t.shape == tuple(reversed(shape)) and t.type == GGMLType(int(qt))
        assert t.offset % 64 == 0
        data = tensor_bytes(read, t)
        assert data == payloads[name] == rt.data.tobytes()


def test_default_alignment(tmp_path):
    path = tmp_path / "a32.gguf"
    write_reference(path)
    g = open_gguf(path)
    assert g.alignment == 32 and "general.alignment" not in g.metadata
    assert g.data_offset % 32 == 0
    assert all(t.offset % 32 == 0 for t in g.tensors.values())
    compare_with_gguf_reader(path, g, skip_keys=NESTED)


def test_version_2_parses_like_version_3(reference_file):
    # v2 and v3 differ only in that v3 may be big-endian; a little-endian v3 file with the version set to 2 is a
    # valid v2 file.
    path, _ = reference_file
    data = path.read_bytes()
    assert data[4:8] == u32(3)
    g3 = parse_bytes(data)
    g2 = parse_bytes(data[:4] + u32(2) + data[8:])
    assert g2.version == 2
    assert (g2.metadata, g2.tensors, g2.alignment, g2.data_offset) == (g3.metadata, g3.tensors, g3.alignment,
                                                                      g3.data_offset)


def test_version_1_rejected():
    # v1 used 32-bit counts: the smallest possible v1 header.
    expect_error(b"GGUF" + u32(1) + u32(0) + u32(0) + b"\0" * 16, "unsupported GGUF version 1")


def test_future_version_rejected():
    expect_error(build(version=4), "unsupported GGUF version 4")


def test_big_endian_rejected(tmp_path):
    path = tmp_path / "be.gguf"
    write_reference(path, endian=gguf.GGUFEndian.BIG)
    with pytest.raises(GGUFFormatError, match="big-endian"):
        open_gguf(path)


def test_empty_arrays_and_no_tensors():
    kvs = [kv("e.u32", VT.ARRAY, u32(VT.UINT32) + u64(0)), kv("e.str", VT.ARRAY, u32(VT.STRING) + u64(0)),
           kv("e.nested", VT.ARRAY, u32(VT.ARRAY) + u64(2) + u32(VT.INT8) + u64(0) + u32(VT.STRING) + u64(1)
              + gstr("z"))]
    g = parse_bytes(build(kvs))
    assert g.metadata == {"e.u32": [], "e.str": [], "e.nested": [[], ["z"]]}
    assert g.tensors == {}


# ---------------------------------------------------------------------------------------------------------------
# The real model file

def test_smollm2_matches_gguf_reader(smollm2_gguf):
    size = smollm2_gguf.stat().st_size
    calls = []
    base = cg.path_reader(smollm2_gguf)

    def read(offset, n):
        calls.append((offset, n))
        return base(offset, n)

    g = parse_gguf(read, size)
    # 49152 tokens and 48900 merges in a couple of buffered reads, not thousands of small ones, and without
    # reading the 96 MB of tensor data.
    assert len(calls) <= 4, calls
    assert sum(n for _, n in calls) < 16 << 20

    compare_with_gguf_reader(smollm2_gguf, g)
    assert g.architecture == "llama"
    assert len(g.metadata["tokenizer.ggml.tokens"]) == 49152 == g.arch_get("vocab_size")
    assert g.arch_get("block_count") == 30 and g.arch_get("embedding_length") == 576
    assert g.tensors["token_embd.weight"].shape == (576, 49152)
    assert g.tensors["token_embd.weight"].type == GGMLType.Q8_0
    assert {t.type for t in g.tensors.values()} == {GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.F32}
    g.check_tensor_types([GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.F32])  # does not raise
    last = max(g.tensors.values(), key=lambda t: t.offset)
    assert last.offset + last.nbytes <= size


def test_large_vocab_parses():
    # A Qwen-sized vocabulary: 151936 tokens, scores and types.
    rng = random.Random(1)
    alphabet = "abcdefghĠéぁ中"
    tokens = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) + str(i) for i in range(151936)]
    kvs = [kv("tokenizer.ggml.tokens", VT.ARRAY, u32(VT.STRING) + u64(len(tokens)) + b"".join(map(gstr, tokens))),
           kv("tokenizer.ggml.scores", VT.ARRAY, u32(VT.FLOAT32) + u64(len(tokens))
              + struct.pack(f"<{len(tokens)}f", *range(len(tokens)))),
           kv("tokenizer.ggml.token_type", VT.ARRAY, u32(VT.INT32) + u64(len(tokens)) + u32(1) * len(tokens))]
    data = build(kvs)
    g = parse_bytes(data)   # speed is measured, not asserted: the bulk-unpacking paths make this ~0.1 s
    assert g.metadata["tokenizer.ggml.tokens"] == tokens
    assert g.metadata["tokenizer.ggml.scores"] == [float(i) for i in range(len(tokens))]
    assert g.metadata["tokenizer.ggml.token_type"] == [1] * len(tokens)


def test_tiny_windows_give_the_same_result(reference_file, monkeypatch):
    # Force window refills inside strings, string arrays, numeric arrays and the tensor table.
    path, _ = reference_file
    want = open_gguf(path)
    monkeypatch.setattr(cg, "_FIRST_WINDOW", 7)
    monkeypatch.setattr(cg, "_MAX_WINDOW", 13)
    calls = []
    base = cg.path_reader(path)

    def read(offset, n):
        calls.append(n)
        return base(offset, n)

    got = parse_gguf(read, path.stat().st_size)
    assert len(calls) > 50
    assert (got.metadata, got.tensors, got.data_offset) == (want.metadata, want.tensors, want.data_offset)


# ---------------------------------------------------------------------------------------------------------------
# GGUFFile helpers

def test_helpers_raise_unsupported_model(reference_file):
    g = open_gguf(reference_file[0])
    assert g.get("t.u8") == 255 and g.get("nope") is None and g.get("nope", 3) == 3
    assert g.require("t.str") == "héllo ☃ 𝄞"
    with pytest.raises(UnsupportedModelError, match="'testarch.rope.freq_base'"):
        g.arch_get("rope.freq_base")
    assert g.arch_get("rope.freq_base", 1e4) == 1e4
    with pytest.raises(UnsupportedModelError, match="'missing.key'"):
        g.require("missing.key")
    with pytest.raises(UnsupportedModelError, match="'output.weight'"):
        g.tensor("output.weight")
    assert g.tensor("q4_1").type == GGMLType.Q4_1
    with pytest.raises(UnsupportedModelError, match=r"'q4_k' is stored as Q4_K.*IQ2_XXS, Q4_K"):
        g.check_tensor_types([GGMLType.F32, GGMLType.F16, GGMLType.I8, GGMLType.Q8_0, GGMLType.Q4_1,
                              GGMLType.BF16])
    g.check_tensor_types([GGMLType.F32], names=["f32.2d"])
    assert "testarch" in repr(g) and "9 tensors" in repr(g)


def test_missing_architecture():
    g = parse_bytes(build([kv_u32("x", 1)]))
    with pytest.raises(UnsupportedModelError, match="general.architecture"):
        g.architecture
    g = parse_bytes(build([kv_u32("general.architecture", 1)]))
    with pytest.raises(UnsupportedModelError, match="should be a string"):
        g.architecture


def test_tensor_bytes_short_read(reference_file):
    g = open_gguf(reference_file[0])
    t = g.tensors["q8_0"]
    with pytest.raises(GGUFFormatError, match="truncated"):
        tensor_bytes(lambda o, n: b"\0" * (n - 1), t)


# ---------------------------------------------------------------------------------------------------------------
# Not GGUF, truncated

@pytest.mark.parametrize("content, fragment", [
    (b"<!DOCTYPE html><html><head><title>404 Not Found</title>", "HTML page"),
    (b"\n  <html><body>Access denied</body></html>", "HTML page"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + b"\0" * 40, "ZIP archive"),
    (b"\x1f\x8b\x08\x00" + b"\0" * 30, "gzip"),
    (b"version https://git-lfs.example/spec/v1\noid sha256:abc\nsize 98362432\n", "Git LFS pointer"),
    (struct.pack("<Q", 30) + b'{"__metadata__":{}}' + b" " * 11, "safetensors"),
    (b'{"error": "not found"}', "JSON"),
    (b"tjgg\x03\x00\x00\x00" + b"\0" * 30, "legacy GGML"),
    (b"", "empty"),
    (b"GG", "b'GG'"),
    (b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09", "starts with the bytes"),
])
def test_not_a_gguf_file(content, fragment):
    expect_error(content, "not a GGUF file", fragment)


def test_open_gguf_names_the_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"<html>Bad Gateway</html>")
    with pytest.raises(GGUFFormatError, match="model.gguf.*not a GGUF file.*HTML"):
        open_gguf(path)


def test_truncated_in_tensor_data(reference_file):
    data = reference_file[0].read_bytes()
    g = parse_bytes(data)
    last = list(g.tensors.values())[-1]
    end = last.offset + last.nbytes
    cut = data[:end - 10]
    expect_error(cut, "truncated", f"expected at least {end} bytes, has {len(cut)}", repr(last.name))


def test_truncated_in_header(reference_file):
    data = reference_file[0].read_bytes()
    for cut in (10, 30, 100, 500, 1000):
        expect_error(data[:cut], "truncated", "expected at least", f"bytes, has {cut}")


def test_truncated_just_after_magic():
    expect_error(b"GGUF\x03\x00", "truncated", "expected at least 8 bytes, has 6")


def test_reader_returning_too_much_data():
    # Bytes a reader returns past the file size are ignored: here they would complete the cut-off string.
    data = build([kv_str("k", "abcdef")], alignment=1)
    cut = data[:-3]
    with pytest.raises(GGUFFormatError, match="truncated"):
        parse_gguf(lambda o, n: data[o:o + n + 100], len(cut))


def test_reader_returning_short_data(reference_file):
    data = reference_file[0].read_bytes()
    # A reader that returns less than the window asked for, but enough to go on, is fine...
    g = parse_gguf(lambda o, n: data[o:o + max(n // 3, 12)], len(data))
    assert g.metadata == parse_bytes(data).metadata
    # ...one that returns less than the parser needs is an error, not a misparse.
    with pytest.raises(GGUFFormatError, match="reader returned only 3 of"):
        parse_gguf(lambda o, n: data[o:o + 3], len(data))


# ---------------------------------------------------------------------------------------------------------------
# Corrupt headers, one case each

def test_string_length_past_end():
    expect_error(build([kv("k", VT.STRING, u64(10**12) + b"abc")]), "metadata 'k'", "truncated",
                 "at least 1000000000")


def test_key_length_past_end():
    expect_error(build([u64(2**63) + b"x" * 20]), "metadata key #0", "truncated")


def test_array_count_cannot_fit():
    expect_error(build([kv("arr", VT.ARRAY, u32(VT.UINT64) + u64(2**40) + u64(1))]),
                 "'arr' claims 1099511627776 items of type UINT64", "truncated or corrupt")
    expect_error(build([kv("s", VT.ARRAY, u32(VT.STRING) + u64(10**9) + gstr("a"))]), "items of type STRING")
    expect_error(build([kv("n", VT.ARRAY, u32(VT.ARRAY) + u64(10**9))]), "items of type ARRAY")


def test_absurd_counts():
    expect_error(build(n_kv=2**62), "4611686018427387904 metadata entries", "cannot fit in the file")
    expect_error(build(n_tensors=10**6), "1000000 tensors", "cannot fit")


def test_too_many_dims():
    expect_error(build([], [tinfo("t", [1, 1, 1, 1, 1], QT.F32, 0)], b"\0" * 4), "'t' has 5 dimensions",
                 "at most 4")


@pytest.mark.parametrize("dims", [[0], [4, 0], [-1], [4, -8], [2**63 - 1, -(2**63)]])
def test_zero_or_negative_dims(dims):
    expect_error(build([], [tinfo("t", dims, QT.F32, 0)], b"\0" * 64), "every dimension must be positive")


def test_row_not_multiple_of_block():
    expect_error(build([], [tinfo("q", [48, 2], QT.Q4_0, 0)], b"\0" * 256),
                 "first dimension 48 is not a multiple of the Q4_0 block size 32")
    expect_error(build([], [tinfo("k", [128], QT.Q4_K, 0)], b"\0" * 256), "Q4_K block size 256")


def test_tensor_overlap():
    data = build([], [tinfo("a", [8], QT.F32, 0), tinfo("b", [8], QT.F32, 0)], b"\0" * 64)
    expect_error(data, "'a'", "overlaps tensor 'b'")
    data = build([], [tinfo("a", [16], QT.F32, 0), tinfo("b", [8], QT.F32, 32)], b"\0" * 96)
    expect_error(data, "overlaps")


def test_tensor_outside_file():
    expect_error(build([], [tinfo("a", [8], QT.F32, 2**62)], b"\0" * 32), "data of tensor 'a'", "truncated")
    expect_error(build([], [tinfo("huge", [2**40, 2**20], QT.F32, 0)], b"\0" * 32), "'huge'", "truncated")


def test_tensor_offset_misaligned():
    expect_error(build([], [tinfo("a", [4], QT.F32, 4)], b"\0" * 64), "not a multiple of the alignment 32")


def test_duplicate_tensor_names():
    expect_error(build([], [tinfo("w", [8], QT.F32, 0), tinfo("w", [8], QT.F32, 32)], b"\0" * 64),
                 "tensor name 'w' appears twice")


def test_duplicate_metadata_keys():
    expect_error(build([kv_u32("a.b", 1), kv_u32("a.b", 2)]), "metadata key 'a.b' appears twice")


def test_bad_utf8():
    expect_error(build([kv("k", VT.STRING, gstr(b"ok\xff\xfe"))]), "metadata 'k' is not valid UTF-8")
    expect_error(build([kv(b"\xc3(", VT.UINT8, b"\x01")]), "metadata key #0 is not valid UTF-8")
    expect_error(build([kv("v", VT.ARRAY, u32(VT.STRING) + u64(3) + gstr("a") + gstr("b") + gstr(b"\xed\xa0\x80"))]),
                 "metadata 'v'[2] is not valid UTF-8")
    expect_error(build([], [tinfo(b"bad\x80", [4], QT.F32, 0)], b"\0" * 32), "tensor #0 is not valid UTF-8")


def test_unknown_value_type():
    expect_error(build([kv("k", 13, u32(0))]), "'k' has unknown value type id 13")
    expect_error(build([kv("k", VT.ARRAY, u32(99) + u64(1) + u32(0))]), "array of unknown value type id 99")


def test_bad_bool():
    expect_error(build([kv("b", VT.BOOL, b"\x02")]), "bool stored as byte 2")
    expect_error(build([kv("b", VT.ARRAY, u32(VT.BOOL) + u64(3) + b"\x00\x01\x07")]), "other than 0 or 1")


def test_array_nesting_limit():
    depth = 40
    payload = b"".join(u32(VT.ARRAY) + u64(1) for _ in range(depth)) + u32(VT.UINT8) + u64(0)
    expect_error(build([kv("deep", VT.ARRAY, payload)]), "nests arrays more than 16 deep")


def test_unknown_tensor_type():
    expect_error(build([], [tinfo("t", [32], 99, 0)], b"\0" * 256), "'t' has unknown ggml type id 99")
    expect_error(build([], [tinfo("t", [32], 31, 0)], b"\0" * 256), "Q4_0_4_4")


def test_bad_alignment():
    expect_error(build([kv_u32("general.alignment", 48)], alignment=48), "power of two")
    expect_error(build([kv_u32("general.alignment", 0)]), "power of two")
    expect_error(build([kv_str("general.alignment", "32")]), "stored as uint32")


def test_hand_built_file_parses():
    # The encoder above is right: the uncorrupted file parses and matches the gguf package.
    g = parse_bytes(f32_tensor_file())
    assert [(t.name, t.shape, t.offset - g.data_offset, t.nbytes) for t in g.tensors.values()] == [
        ("a", (4,), 0, 16), ("b", (8,), 32, 32)]


# ---------------------------------------------------------------------------------------------------------------
# Mini-fuzz: random byte flips and cuts of a small valid file end in a parse or a GGUFFormatError, nothing else,
# and never in a large allocation.

@pytest.fixture(scope="module")
def small_valid_file(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "small.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "bc", "Ġd"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.0, -3.0])
    w.add_array("x.nested", [[1, 2], [3]])
    w.add_tensor("w.f32", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("w.q8", np.zeros((2, 34), dtype=np.uint8), raw_dtype=QT.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = path.read_bytes()
    parse_bytes(data)
    return data


def test_mini_fuzz(small_valid_file, monkeypatch):
    data = small_valid_file
    outcomes = {"ok": 0, "error": 0}
    tracemalloc.start()
    try:
        for seed in range(300):
            rng = random.Random(seed)
            buf = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(buf))
                mode = rng.random()
                if mode < 0.5:
                    buf[pos] ^= 1 << rng.randrange(8)
                elif mode < 0.8:
                    buf[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
                else:
                    buf[pos:pos + 8] = rng.randbytes(8)
            if rng.random() < 0.3:
                del buf[rng.randrange(len(buf)):]
            # Odd seeds read through tiny windows, so corrupt lengths also hit the window-refill paths.
            monkeypatch.setattr(cg, "_FIRST_WINDOW", 16 if seed % 2 else 1 << 20)
            monkeypatch.setattr(cg, "_MAX_WINDOW", 64 if seed % 2 else 8 << 20)
            tracemalloc.reset_peak()
            try:
                parse_bytes(bytes(buf))
                outcomes["ok"] += 1
            except GGUFFormatError:
                outcomes["error"] += 1
            peak = tracemalloc.get_traced_memory()[1]
            assert peak < (4 << 20), f"seed {seed}: parsing a {len(buf)}-byte file allocated {peak} bytes"
    finally:
        tracemalloc.stop()
    print(outcomes)
    assert outcomes["error"] > 100 and outcomes["ok"] > 5, outcomes


# ---------------------------------------------------------------------------------------------------------------
# Memory tied to what the model needs, never to the file's size (issue 17)

def test_zero_dims_rejected():
    expect_error(build([], [tinfo("t", [], QT.F32, 0)], b"\0" * 32), "'t' has 0 dimensions", "at least 1")


def peak_of(fn):
    """(result or GGUFFormatError, tracemalloc peak in bytes) of fn()."""
    tracemalloc.start()
    try:
        try:
            out = fn()
        except GGUFFormatError as e:
            out = e
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def file_with_long_array(itype, count: int, item: bytes, vocab: int = 64) -> bytes:
    """A model-like file: a token embedding of `vocab` rows, and a metadata array of `count` real items."""
    kvs = [kv_str("general.architecture", "test"),
           kv("junk", VT.ARRAY, u32(itype) + u64(count) + item * count)]
    return build(kvs, [tinfo("token_embd.weight", [32, vocab], QT.F32, 0)], bytes(32 * vocab * 4))


@pytest.mark.parametrize("itype, item", [(VT.UINT8, b"\x07"), (VT.FLOAT32, b"\0\0\x80?")])
def test_long_array_beyond_the_model_is_left_unread(itype, item):
    # 50 M uint8 / 12.5 M float32 items that really are in the file: old code built a list of them (1.58 GiB /
    # 1.2 GiB for the files); now they are walked, not read, and the header costs a few MiB.
    count = (50 << 20) // len(item)
    data = file_with_long_array(itype, count, item)
    g, peak = peak_of(lambda: parse_bytes(data))
    print(f"{itype.name}: {count} items, {len(data) >> 20} MiB file, peak {peak / 2**20:.1f} MiB")
    assert peak < 8 << 20
    junk = g.metadata["junk"]
    assert isinstance(junk, cg.UnreadArray) and len(junk) == count and junk.limit == 4 * 64 + 1024
    with pytest.raises(GGUFFormatError, match=f"'junk' is an array of {count} {itype.name} items, more than the "
                                              f"1280 .4 x the vocabulary of 64"):
        junk.tolist()
    assert g.tensors["token_embd.weight"].shape == (32, 64)


def test_long_array_within_the_model_is_read():
    # up to 4 x the vocabulary (64 rows) + 1024 items: read as a list, like every short array
    g = parse_bytes(file_with_long_array(VT.UINT16, 1280, struct.pack("<H", 513)))
    assert g.metadata["junk"] == [513] * 1280
    g = parse_bytes(file_with_long_array(VT.UINT16, 1281, struct.pack("<H", 513)))
    assert isinstance(g.metadata["junk"], cg.UnreadArray)


def test_flipped_count_bit_in_the_real_model(smollm2_gguf):
    # One flipped bit in tokenizer.ggml.token_type's count (49152 | 1 << 24): old code built 16.8 M ints (+835 MiB)
    # before the format error.
    data = bytearray(smollm2_gguf.read_bytes())
    key = b"tokenizer.ggml.token_type"
    at = data.index(key) + len(key) + 8          # past the value type and the item type
    assert struct.unpack_from("<Q", data, at)[0] == 49152
    struct.pack_into("<Q", data, at, 49152 | 1 << 24)
    data = bytes(data)
    out, peak = peak_of(lambda: parse_bytes(data))
    print(f"peak {peak / 2**20:.1f} MiB: {out}")
    assert isinstance(out, GGUFFormatError) and "truncated or corrupt" in str(out)
    assert peak < 16 << 20


def test_tokenizer_refuses_an_unread_array():
    from cera_web.tokenizer import Tokenizer
    toks = b"".join(gstr(f"t{i}") for i in range(2000))
    kvs = [kv_str("tokenizer.ggml.model", "gpt2"), kv("tokenizer.ggml.merges", VT.ARRAY, u32(VT.STRING) + u64(0)),
           kv("tokenizer.ggml.tokens", VT.ARRAY, u32(VT.STRING) + u64(2000) + toks)]
    g = parse_bytes(build(kvs, [tinfo("token_embd.weight", [32, 4], QT.F32, 0)], bytes(512)))
    with pytest.raises(GGUFFormatError, match="'tokenizer.ggml.tokens' is an array of 2000 STRING items"):
        Tokenizer.from_gguf(g)


def test_long_array_as_alignment_is_refused():
    data = build([kv("general.alignment", VT.ARRAY, u32(VT.UINT8) + u64(2000) + bytes(2000))])
    expect_error(data, "general.alignment must be a power of two stored as uint32")


def test_string_longer_than_any_metadata_needs():
    expect_error(build([kv_str("general.architecture", "x" * (5 << 20))]), "a string of 5242880 bytes, more than")


def test_header_memory_budget():
    # 70,000 keys of 1 KiB: each fine, together more than the 64 MiB a header may take (old code: ~80 MiB kept).
    kvs = [kv_u32(f"k{i:05d}" + "x" * 1000, i) for i in range(70_000)]
    expect_error(build(kvs), "needs more than 64 MiB of memory")
