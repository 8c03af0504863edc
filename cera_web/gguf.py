"""GGUF reader: header, metadata and tensor table, without touching tensor data.

GGUF (versions 2 and 3, little-endian) is laid out as

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv     x  (string key, u32 value_type, value)
    n_tensors x (string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset)
    padding to `general.alignment` (default 32)
    tensor data; each tensor's offset is relative to the start of this section

where a string is (u64 byte length, UTF-8 bytes) and an array value is (u32 item type, u64 count, items); arrays may
hold arrays. Version 1 used 32-bit counts and lengths and is rejected; version 3 only added big-endian files, which
this reader rejects too (WebGPU and every target here are little-endian).

The parser never sees the whole file. It takes a `read(offset, n) -> bytes` callable and the file size, and pulls
the header through a window that starts at 1 MiB and doubles (the header of a model with a 150k-token vocabulary is a
few MiB), so that in the browser, where every read crosses into JavaScript, a header costs a handful of reads.
Every count, length and offset is checked against the file size before anything is allocated for it, so a corrupt
or hostile file ends in a GGUFFormatError, never in a huge allocation or another exception.
"""

from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass
from typing import Callable, Iterable

from cera_web.errors import GGUFFormatError, UnsupportedModelError

__all__ = [
    "GGMLType", "GGML_BLOCK", "GGUFValueType", "TensorInfo", "GGUFFile",
    "parse_gguf", "open_gguf", "path_reader", "tensor_bytes", "UnreadArray",
]

Reader = Callable[[int, int], bytes]


class GGMLType(enum.IntEnum):
    """Tensor storage types, with the ids ggml assigns them (ids 31-33 and 36-38 were removed from ggml)."""
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


_QK_K = 256  # elements in a "K"-family super-block

# (elements per block, bytes per block). The byte counts spell out each block's fields (scales, mins, quants).
GGML_BLOCK: dict[GGMLType, tuple[int, int]] = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 2 + 16),                  # f16 scale, 32 x 4-bit
    GGMLType.Q4_1: (32, 2 + 2 + 16),              # f16 scale, f16 min, 32 x 4-bit
    GGMLType.Q5_0: (32, 2 + 4 + 16),              # f16 scale, 32 high bits, 32 x 4-bit
    GGMLType.Q5_1: (32, 2 + 2 + 4 + 16),
    GGMLType.Q8_0: (32, 2 + 32),                  # f16 scale, 32 x int8
    GGMLType.Q8_1: (32, 4 + 4 + 32),              # f32 scale, f32 sum, 32 x int8
    GGMLType.Q2_K: (_QK_K, 2 + 2 + _QK_K // 16 + _QK_K // 4),
    GGMLType.Q3_K: (_QK_K, 2 + _QK_K // 4 + _QK_K // 8 + 12),
    GGMLType.Q4_K: (_QK_K, 2 + 2 + 12 + _QK_K // 2),
    GGMLType.Q5_K: (_QK_K, 2 + 2 + 12 + _QK_K // 8 + _QK_K // 2),
    GGMLType.Q6_K: (_QK_K, 2 + _QK_K // 16 + _QK_K // 4 + _QK_K // 2),
    GGMLType.Q8_K: (_QK_K, 4 + _QK_K + 2 * (_QK_K // 16)),
    GGMLType.IQ2_XXS: (_QK_K, 2 + _QK_K // 4),
    GGMLType.IQ2_XS: (_QK_K, 2 + _QK_K // 4 + _QK_K // 32),
    GGMLType.IQ3_XXS: (_QK_K, 2 + _QK_K // 4 + _QK_K // 8),
    GGMLType.IQ1_S: (_QK_K, 2 + _QK_K // 8 + _QK_K // 16),
    GGMLType.IQ4_NL: (32, 2 + 16),
    GGMLType.IQ3_S: (_QK_K, 2 + _QK_K // 4 + _QK_K // 8 + _QK_K // 32 + 4),
    GGMLType.IQ2_S: (_QK_K, 2 + _QK_K // 4 + _QK_K // 16),
    GGMLType.IQ4_XS: (_QK_K, 2 + 2 + _QK_K // 64 + _QK_K // 2),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (_QK_K, _QK_K // 8 + _QK_K // 16 + _QK_K // 32),
    GGMLType.BF16: (1, 2),
    GGMLType.TQ1_0: (_QK_K, 2 + 4 * 13),
    GGMLType.TQ2_0: (_QK_K, 2 + _QK_K // 4),
    GGMLType.MXFP4: (32, 1 + 16),                 # e8m0 scale, 32 x 4-bit
    GGMLType.NVFP4: (64, 4 + 32),
    GGMLType.Q1_0: (128, 2 + 16),
}

# Ids ggml once used for repacked layouts and then removed from the file format.
_REMOVED_TYPES = {31: "Q4_0_4_4", 32: "Q4_0_4_8", 33: "Q4_0_8_8",
                  36: "IQ4_NL_4_4", 37: "IQ4_NL_4_8", 38: "IQ4_NL_8_8"}
_TYPE_BY_ID = {int(t): t for t in GGMLType}

GGML_MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32


class GGUFValueType(enum.IntEnum):
    """Metadata value types."""
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct code of each fixed-size value type (bool is read as a byte and checked to be 0 or 1).
_SCALAR_CODE = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "B",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}
_SCALAR = {t: struct.Struct("<" + c) for t, c in _SCALAR_CODE.items()}
_TYPE_NAME = {int(t): t.name for t in GGUFValueType}
# Fewest bytes an array item of each type can take: fixed size, a string's length field, an array's type+count.
_MIN_ITEM_SIZE = {**{t: s.size for t, s in _SCALAR.items()}, GGUFValueType.STRING: 8, GGUFValueType.ARRAY: 12}

_MAX_ARRAY_NESTING = 16            # arrays of arrays deeper than this are treated as corrupt
_FIRST_WINDOW = 1 << 20            # first read: 1 MiB
_MAX_WINDOW = 8 << 20              # later reads double up to 8 MiB
# Memory budget of a header (issue 17). Arrays of more than _EAGER_ITEMS items are skipped on the first pass and read
# after the tensor table, only if they hold at most 4x the vocabulary (the rows of token_embd.weight) + 1024 items,
# or _NO_MODEL_ITEMS in a file without that tensor; longer ones stay an UnreadArray. Everything kept (strings,
# items, tensor entries) is counted in approximate Python bytes against _MAX_KEPT; one string is at most _MAX_STRING.
_EAGER_ITEMS = 1024
_NO_MODEL_ITEMS = 1 << 20
_MAX_KEPT = 64 << 20
_MAX_STRING = 4 << 20
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_REQUIRED = object()


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table. `shape` is in GGUF order: shape[0] = ne0, the innermost (contiguous)
    dimension, so a PyTorch weight of shape (out, in) has shape (in, out) here."""
    name: str
    shape: tuple[int, ...]
    type: GGMLType
    offset: int          # absolute byte offset of the data in the file
    nbytes: int
    n_elements: int


class UnreadArray:
    """A metadata array the parser left unread: it holds more items than the model can need. Its length is known;
    reading it (`tolist()`, iteration, indexing) raises the GGUFFormatError that says why."""

    def __init__(self, key: str, type: GGUFValueType, count: int, limit: int, why: str):
        self.key, self.type, self.count, self.limit, self.why = key, type, count, limit, why

    def __len__(self) -> int:
        return self.count

    def error(self) -> GGUFFormatError:
        return GGUFFormatError(f"metadata {self.key!r} is an array of {self.count} {self.type.name} items, more than "
                               f"the {self.limit} {self.why}; it was not read. The model file is corrupt.")

    def tolist(self):
        raise self.error()

    def __iter__(self):
        raise self.error()

    def __getitem__(self, k):
        raise self.error()

    def __repr__(self) -> str:
        return f"UnreadArray({self.key!r}, {self.type.name}, count={self.count})"


@dataclass(repr=False)
class GGUFFile:
    """A parsed GGUF header: metadata and tensor table. Holds no tensor data."""
    version: int
    metadata: dict[str, object]
    tensors: dict[str, TensorInfo]   # in file order
    alignment: int
    data_offset: int                 # absolute offset of the tensor data section
    file_size: int

    def get(self, key: str, default: object = None) -> object:
        return self.metadata.get(key, default)

    def require(self, key: str) -> object:
        """The value of metadata `key`; UnsupportedModelError naming the key if the file lacks it."""
        try:
            return self.metadata[key]
        except KeyError:
            arch = self.metadata.get("general.architecture", "unknown")
            raise UnsupportedModelError(
                f"the model file has no metadata key {key!r} (architecture {arch!r}), which cera_web needs to run "
                f"it; the file may come from an old or unusual converter: re-convert it with a current llama.cpp "
                f"convert script") from None

    @property
    def architecture(self) -> str:
        arch = self.require("general.architecture")
        if not isinstance(arch, str):
            raise UnsupportedModelError(
                f"metadata 'general.architecture' should be a string, found {type(arch).__name__} {arch!r}")
        return arch

    def arch_get(self, suffix: str, default: object = _REQUIRED) -> object:
        """metadata[f"{architecture}.{suffix}"], e.g. arch_get("block_count"); without a default a missing key
        raises UnsupportedModelError."""
        key = f"{self.architecture}.{suffix}"
        if default is _REQUIRED:
            return self.require(key)
        return self.metadata.get(key, default)

    def tensor(self, name: str) -> TensorInfo:
        """The tensor called `name`; UnsupportedModelError if the file lacks it."""
        try:
            return self.tensors[name]
        except KeyError:
            raise UnsupportedModelError(
                f"the model file has no tensor {name!r} (architecture "
                f"{self.metadata.get('general.architecture', 'unknown')!r}, {len(self.tensors)} tensors); "
                f"it does not match the layout cera_web expects for this architecture") from None

    def check_tensor_types(self, supported: Iterable[GGMLType], names: Iterable[str] | None = None) -> None:
        """Raise UnsupportedModelError naming the first tensor (of `names`, default all) whose type is not in
        `supported`, the type, and how many tensors share the problem."""
        ok = set(supported)
        infos = self.tensors.values() if names is None else [self.tensor(n) for n in names]
        bad = [t for t in infos if t.type not in ok]
        if bad:
            kinds = sorted({t.type.name for t in bad})
            raise UnsupportedModelError(
                f"tensor {bad[0].name!r} is stored as {bad[0].type.name}, which cera_web cannot run yet "
                f"({len(bad)} tensor(s) use unsupported types: {', '.join(kinds)}; supported: "
                f"{', '.join(sorted(t.name for t in ok))}). Use a file quantized to a supported type.")

    def __repr__(self) -> str:
        return (f"GGUFFile(version={self.version}, architecture={self.metadata.get('general.architecture')!r}, "
                f"{len(self.metadata)} metadata keys, {len(self.tensors)} tensors, alignment={self.alignment}, "
                f"data_offset={self.data_offset}, file_size={self.file_size})")


def _describe_non_gguf(head: bytes) -> str:
    """What a file that lacks the GGUF magic seems to be, for the error message."""
    if not head:
        return "the file is empty"
    text = head.lstrip().lower()
    if text.startswith(b"<"):
        if text.startswith((b"<!doctype html", b"<html")) or b"<html" in text or b"<head" in text:
            return ("it is an HTML page (often a server's error or login page saved in place of the model); "
                    "check the download link")
        return "it starts like XML/HTML text"
    if head.startswith(b"PK\x03\x04"):
        return "it is a ZIP archive (a PyTorch checkpoint, a wheel, or a zipped model?); extract the .gguf first"
    if head.startswith(b"\x1f\x8b"):
        return "it is gzip-compressed; decompress it first"
    if b"git-lfs" in head[:200]:
        return "it is a Git LFS pointer file, not the model itself; fetch the real file"
    if len(head) >= 10 and head[8:10] == b'{"':
        return "it looks like a safetensors file; convert it to GGUF first"
    if text[:1] in (b"{", b"["):
        return "it is JSON text"
    if head[:4] in (b"lmgg", b"fmgg", b"tjgg"):
        return "it is a legacy GGML/GGJT file from before GGUF; re-convert the model to GGUF"
    return f"it starts with the bytes {head[:16]!r}"


class _Cursor:
    """Sequential reader over `read(offset, n)` through a growing window. `pos` is the absolute file position."""

    def __init__(self, read: Reader, size: int, label: str):
        self._read, self.size, self.label = read, size, label
        self.buf, self.base = b"", 0          # the window holds bytes [base, base + len(buf))
        self._window = _FIRST_WINDOW
        self.pos = 0
        self.kept = 0                          # approximate bytes of Python objects built so far (see keep())
        self.stop = size                       # reads need not go past this byte (the tensor table, on a 2nd pass)

    def fail(self, msg: str):
        raise GGUFFormatError(self.label + msg)

    def truncated(self, what: str, end: int):
        self.fail(f"the file is truncated or corrupt: {what} (at byte {self.pos}) runs to byte {end}; expected at "
                  f"least {end} bytes, has {self.size}. If it was downloaded, the download may have been cut short: "
                  f"fetch it again.")

    def need(self, n: int, what: str) -> int:
        """Make bytes [pos, pos+n) available in `buf`; return the index of pos in `buf`."""
        i = self.pos - self.base
        if 0 <= i and i + n <= len(self.buf):
            return i
        end = self.pos + n
        if end > self.size:
            self.truncated(what, end)
        want = max(n, min(self._window, self.stop - self.pos))
        data = self._read(self.pos, want)
        if not isinstance(data, bytes):
            data = bytes(data)
        if len(data) > want:        # never trust bytes past what was asked (and so past the file's end)
            data = data[:want]
        if len(data) < n:
            self.truncated(f"{what} (the reader returned only {len(data)} of {want} bytes)", end)
        self.buf, self.base = data, self.pos
        self._window = min(self._window * 2, _MAX_WINDOW)
        return 0

    def scalar(self, vtype: GGUFValueType, what: str):
        s = _SCALAR[vtype]
        i = self.need(s.size, what)
        v = s.unpack_from(self.buf, i)[0]
        self.pos += s.size
        if vtype is GGUFValueType.BOOL:
            if v > 1:
                self.fail(f"{what} is a bool stored as byte {v}; only 0 and 1 are valid")
            return v == 1
        return v

    def u32(self, what: str) -> int:
        i = self.need(4, what)
        self.pos += 4
        return _U32(self.buf, i)[0]

    def u64(self, what: str) -> int:
        i = self.need(8, what)
        self.pos += 8
        return _U64(self.buf, i)[0]

    def keep(self, nbytes: int, what: str):
        """Count `nbytes` (approximate Python memory) of parsed values against the header's budget."""
        self.kept += nbytes
        if self.kept > _MAX_KEPT:
            self.fail(f"the header needs more than {_MAX_KEPT >> 20} MiB of memory to hold (reached at {what}); no "
                      f"model needs that much: the file is corrupt or hostile")

    def string(self, what: str, keep: bool = True) -> str | None:
        n = self.u64(f"{what} length")
        if n > _MAX_STRING and n <= self.size - self.pos:
            self.fail(f"{what} is a string of {n} bytes, more than the {_MAX_STRING} a model's metadata needs")
        i = self.need(n, what)
        raw = self.buf[i:i + n]
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"{what} is not valid UTF-8 (bad byte at {self.pos + e.start}: {raw[e.start:e.start + 4]!r})")
        self.pos += n
        if not keep:
            return None
        self.keep(49 + n, what)
        return s

    def value(self, vtype: int, what: str, depth: int = 0, keep: bool = True):
        """The value at `pos` (None when not `keep`: walked and checked, nothing built)."""
        if vtype in _SCALAR:
            return self.scalar(GGUFValueType(vtype), what)
        if vtype == GGUFValueType.STRING:
            return self.string(what, keep)
        if vtype != GGUFValueType.ARRAY:
            self.fail(f"{what} has unknown value type id {vtype} (valid ids are 0-12)")
        if depth >= _MAX_ARRAY_NESTING:
            self.fail(f"{what} nests arrays more than {_MAX_ARRAY_NESTING} deep")
        itype = self.u32(f"{what} item type")
        count = self.u64(f"{what} item count")
        if itype not in _TYPE_NAME:
            self.fail(f"{what} is an array of unknown value type id {itype} (valid ids are 0-12)")
        itype = GGUFValueType(itype)
        # Check the count against the bytes left before building anything for it.
        least = count * _MIN_ITEM_SIZE[itype]
        if least > self.size - self.pos:
            self.fail(f"{what} claims {count} items of type {itype.name}, which need at least {least} bytes, but "
                      f"only {self.size - self.pos} bytes remain in the file (expected at least {self.pos + least} "
                      f"bytes, has {self.size}): the file is truncated or corrupt")
        if keep:
            self.keep(56 + 36 * count, what)
        if itype is GGUFValueType.STRING:
            return self.string_array(count, what, keep)
        if itype is GGUFValueType.ARRAY:
            if not keep:
                for k in range(count):
                    self.value(GGUFValueType.ARRAY, f"{what}[{k}]", depth + 1, keep=False)
                return None
            return [self.value(GGUFValueType.ARRAY, f"{what}[{k}]", depth + 1) for k in range(count)]
        if not keep and itype is not GGUFValueType.BOOL:
            self.pos += least           # fixed-size items: nothing to check
            return None
        # Fixed-size items: bulk unpacks of at most a window's worth at a time.
        items: list = []
        step = max(1, _MAX_WINDOW // _MIN_ITEM_SIZE[itype])
        code = _SCALAR_CODE[itype]
        for k in range(0, count, step):
            c = min(step, count - k)
            i = self.need(c * _MIN_ITEM_SIZE[itype], what)
            part = struct.unpack_from(f"<{c}{code}", self.buf, i)
            self.pos += c * _MIN_ITEM_SIZE[itype]
            if itype is GGUFValueType.BOOL:
                if any(b > 1 for b in part):
                    self.fail(f"{what} holds a bool byte other than 0 or 1")
                part = [b == 1 for b in part]
            if keep:
                items.extend(part)
        return items if keep else None

    def string_array(self, count: int, what: str, keep: bool = True) -> list[str] | None:
        """The vocabulary fast path: walk the window with local variables, refill only at its edge."""
        out: list[str] = []
        append = out.append
        buf, base = self.buf, self.base
        i, end = self.pos - base, len(buf)
        k = 0
        kept = 0
        try:
            while k < count:
                if i + 8 <= end:
                    n = _U64(buf, i)[0]
                    j = i + 8 + n
                    if j <= end and n <= _MAX_STRING:
                        if keep:        # a walk only finds the end (UTF-8 is checked when the array is read)
                            append(buf[i + 8:j].decode("utf-8"))
                        kept += n
                        i = j
                        k += 1
                        continue
                # The next string straddles the window's end: move the window (checks against the file size).
                self.pos = base + i
                at = self.need(8, f"{what}[{k}] length")
                n = _U64(self.buf, at)[0]
                if n > _MAX_STRING and n <= self.size - self.pos - 8:
                    self.fail(f"{what}[{k}] is a string of {n} bytes, more than the {_MAX_STRING} a model's "
                              f"metadata needs")
                self.need(8 + n, f"{what}[{k}]")
                buf, base = self.buf, self.base
                i, end = self.pos - base, len(buf)
        except UnicodeDecodeError as e:
            self.pos = base + i
            self.fail(f"{what}[{k}] is not valid UTF-8 (bad byte at {self.pos + 8 + e.start})")
        self.pos = base + i
        if not keep:
            return None
        self.keep(49 * count + kept, what)
        return out


def parse_gguf(read: Reader, file_size: int, *, name: str | None = None) -> GGUFFile:
    """Parse the header and tensor table of a GGUF file of `file_size` bytes, reading it through
    `read(offset, n) -> bytes-like`, which should return the n bytes at `offset` (a shorter answer is accepted as
    long as it holds what the parser needs next). Tensor data is not read, apart from what shares the header's last
    read window (at most 8 MiB). `name`, if given, prefixes error messages."""
    if not isinstance(file_size, int) or file_size < 0:
        raise ValueError(f"file_size must be a non-negative int, got {file_size!r}")
    cur = _Cursor(read, file_size, f"{name}: " if name else "")

    # ---- fixed header
    head = b""
    if file_size:
        cur.need(min(file_size, 64), "the header")
        head = cur.buf[:64]
    if head[:4] != b"GGUF":
        cur.fail(f"not a GGUF file (GGUF files start with the bytes 'GGUF'): {_describe_non_gguf(head)}")
    cur.pos = 4
    version = cur.u32("the version")
    if version & 0xFFFF == 0 and struct.unpack_from(">I", cur.buf, 4)[0] in (1, 2, 3):
        cur.fail("this GGUF file is big-endian; only little-endian GGUF files are supported: "
                 "use the little-endian build of the model")
    if version not in (2, 3):
        extra = ""
        if version == 1:
            extra = " (version 1 used 32-bit lengths; re-convert the model with a current converter)"
        cur.fail(f"unsupported GGUF version {version}; versions 2 and 3 are supported{extra}")
    n_tensors = cur.u64("the tensor count")
    n_kv = cur.u64("the metadata count")
    # A metadata entry takes at least 13 bytes (key length, type, a 1-byte value); a tensor entry at least 24
    # (name length, n_dims, type, offset).
    if 13 * n_kv + 24 * n_tensors > file_size - cur.pos:
        least = cur.pos + 13 * n_kv + 24 * n_tensors
        cur.fail(f"the header claims {n_tensors} tensors and {n_kv} metadata entries, which cannot fit in the "
                 f"file (expected at least {least} bytes, has {file_size}): the file is truncated or corrupt")

    # ---- metadata
    metadata: dict[str, object] = {}
    deferred: list[tuple[str, int, GGUFValueType, int]] = []     # (key, position, item type, count)
    alignment_type = None
    for k in range(n_kv):
        key = cur.string(f"metadata key #{k}")
        if key in metadata:
            cur.fail(f"metadata key {key!r} appears twice")
        cur.keep(120 + len(key), f"metadata {key!r}")
        vtype = cur.u32(f"the value type of metadata {key!r}")
        if vtype == GGUFValueType.ARRAY:
            # A long array is walked (checked, nothing built) now and read after the tensor table, which says how
            # many items the model can need.
            at = cur.pos
            i = cur.need(12, f"metadata {key!r} item type and count")
            itype, count = _U32(cur.buf, i)[0], _U64(cur.buf, i + 4)[0]
            if count > _EAGER_ITEMS and itype in _TYPE_NAME:
                cur.value(vtype, f"metadata {key!r}", keep=False)
                deferred.append((key, at, GGUFValueType(itype), count))
                metadata[key] = None
                if key == "general.alignment":
                    alignment_type = vtype      # refused below
                continue
        metadata[key] = cur.value(vtype, f"metadata {key!r}")
        if key == "general.alignment":
            alignment_type = vtype

    alignment = DEFAULT_ALIGNMENT
    if alignment_type is not None:
        alignment = metadata["general.alignment"]
        if alignment_type != GGUFValueType.UINT32 or alignment <= 0 or alignment & (alignment - 1):
            cur.fail(f"general.alignment must be a power of two stored as uint32, found "
                     f"{_TYPE_NAME.get(alignment_type, alignment_type)} {alignment!r}")

    # ---- tensor table
    table_start = cur.pos
    raw: list[tuple[str, tuple[int, ...], GGMLType, int]] = []
    seen: set[str] = set()
    for t in range(n_tensors):
        tname = cur.string(f"the name of tensor #{t}")
        if tname in seen:
            cur.fail(f"tensor name {tname!r} appears twice")
        seen.add(tname)
        what = f"tensor {tname!r}"
        cur.keep(400 + 2 * len(tname), what)
        n_dims = cur.u32(f"the dimension count of {what}")
        if n_dims > GGML_MAX_DIMS or n_dims == 0:
            cur.fail(f"{what} has {n_dims} dimensions; ggml tensors have at least 1 and at most {GGML_MAX_DIMS}")
        i = cur.need(8 * n_dims, f"the dimensions of {what}")
        shape = struct.unpack_from(f"<{n_dims}q", cur.buf, i)
        cur.pos += 8 * n_dims
        if any(d <= 0 for d in shape):
            cur.fail(f"{what} has shape {list(shape)}: every dimension must be positive")
        type_id = cur.u32(f"the type of {what}")
        gtype = _TYPE_BY_ID.get(type_id)
        if gtype is None:
            old = _REMOVED_TYPES.get(type_id)
            why = (f" ({old}, a repacked layout ggml removed from files; re-convert the model)" if old
                   else " (not a ggml type; the file is corrupt or from a newer ggml)")
            cur.fail(f"{what} has unknown ggml type id {type_id}{why}")
        rel = cur.u64(f"the data offset of {what}")
        raw.append((tname, shape, gtype, rel))

    data_offset = -(-cur.pos // alignment) * alignment

    # ---- the long arrays, up to what the model can need
    embd = next((r for r in raw if r[0] == "token_embd.weight" and len(r[1]) == 2), None)
    if embd is not None:
        limit, why = 4 * embd[1][1] + 1024, f"(4 x the vocabulary of {embd[1][1]} + 1024) this model can need"
    else:
        limit, why = _NO_MODEL_ITEMS, "a file without token_embd.weight can need"
    cur.stop = table_start
    for key, at, itype, count in deferred:
        if count > limit:
            metadata[key] = UnreadArray(key, itype, count, limit, why)
        else:
            cur.pos = at
            metadata[key] = cur.value(GGUFValueType.ARRAY, f"metadata {key!r}")

    # ---- sizes and placement of tensor data
    tensors: dict[str, TensorInfo] = {}
    for tname, shape, gtype, rel in raw:
        what = f"tensor {tname!r}"
        block, block_bytes = GGML_BLOCK[gtype]
        ne0 = shape[0] if shape else 1
        if ne0 % block:
            cur.fail(f"{what} ({gtype.name}, shape {list(shape)}): its first dimension {ne0} is not a multiple of "
                     f"the {gtype.name} block size {block}")
        n_elements = 1
        for d in shape:
            n_elements *= d
        nbytes = n_elements // block * block_bytes
        if rel % alignment:
            cur.fail(f"{what} has data offset {rel}, which is not a multiple of the alignment {alignment}")
        tensors[tname] = TensorInfo(tname, shape, gtype, data_offset + rel, nbytes, n_elements)

    by_offset = sorted(tensors.values(), key=lambda ti: ti.offset + ti.nbytes)
    if by_offset and by_offset[-1].offset + by_offset[-1].nbytes > file_size:
        last = by_offset[-1]   # the tensor whose data ends last says how long the file should be
        end = last.offset + last.nbytes
        cur.fail(f"the file is truncated or corrupt: the data of tensor {last.name!r} ({last.nbytes} bytes at byte "
                 f"{last.offset}) ends at byte {end}; expected at least {end} bytes, has {file_size}. "
                 f"If it was downloaded, the download may have been cut short: fetch it again.")
    by_offset.sort(key=lambda ti: ti.offset)
    for a, b in zip(by_offset, by_offset[1:]):
        if a.offset + a.nbytes > b.offset:
            cur.fail(f"the data of tensor {a.name!r} (bytes {a.offset}-{a.offset + a.nbytes}) overlaps tensor "
                     f"{b.name!r} (from byte {b.offset}): the file is corrupt")

    return GGUFFile(version, metadata, tensors, alignment, data_offset, file_size)


def path_reader(path: str | os.PathLike) -> Reader:
    """A `read(offset, n)` callable over a local file (opens the file per call, so nothing stays open)."""
    def read(offset: int, n: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(n)
    return read


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    """Parse the header of a local GGUF file."""
    from cera_web.source import check_regular_file
    check_regular_file(path)
    return parse_gguf(path_reader(path), os.path.getsize(path), name=os.fspath(path))


def tensor_bytes(read: Reader, info: TensorInfo) -> bytes:
    """The raw (still quantized) bytes of one tensor."""
    data = read(info.offset, info.nbytes)
    if not isinstance(data, bytes):
        data = bytes(data)
    if len(data) != info.nbytes:
        raise GGUFFormatError(
            f"tensor {info.name!r}: expected {info.nbytes} bytes at byte {info.offset}, got {len(data)}: "
            f"the file is truncated (expected at least {info.offset + info.nbytes} bytes); fetch it again")
    return data
