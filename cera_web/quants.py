"""GGML block formats on the host: numpy dequantization, and small reference quantizers.

Every quantized GGML type stores a tensor as a sequence of fixed-size *blocks*; a block holds a fixed number of
consecutive elements of one row (32 for the legacy formats, 256 for the k-quants) and its own scales. The functions
below turn a whole array of blocks into float32 at once: the block bytes are viewed as a 2-D uint8 array
``(n_blocks, bytes_per_block)`` and every field is unpacked with array slicing, never a per-block Python loop.

Shapes here are numpy order (outermost first; the last axis is the innermost one, the one blocks run along). A
GGUF tensor-info lists its shape the other way round (``shape[0]`` innermost); ``dequantize_tensor`` takes care
of that.

This module is used by the float32 reference model (``cera_web.reference``), by tests that build small models,
and to check the WGSL kernels; the GPU path itself never dequantizes a whole model on the host.
"""

from __future__ import annotations

import numpy as np

from cera_web.errors import GGUFFormatError, InputError, UnsupportedModelError
from cera_web.gguf import GGML_BLOCK, GGMLType

QK_K = 256  # elements in a k-quant super-block

def _type_name(ggml_type) -> str:
    try:
        return GGMLType(ggml_type).name
    except ValueError:
        return f"unknown type id {int(ggml_type)}"


def supported_types() -> list:
    """The GGML types ``dequantize`` understands (the rows of cera_web.formats.FORMATS)."""
    from .formats import FORMATS     # the registry names this module's dequantize_* functions: imported when used
    return sorted(FORMATS)


def dequantize(raw, ggml_type, shape) -> np.ndarray:
    """Decode a tensor's bytes into a float32 array of ``shape`` (numpy order: last axis innermost).

    ``raw`` is ``bytes``/``bytearray``/``memoryview`` or a uint8 numpy array holding exactly the tensor's bytes.
    """
    from .formats import FORMATS
    try:
        fn = FORMATS[GGMLType(ggml_type)].dequantize
    except (ValueError, KeyError):
        raise UnsupportedModelError(
            f"tensor type {_type_name(ggml_type)} is not supported by cera_web "
            f"(supported: {', '.join(t.name for t in supported_types())}); use a GGUF quantized to one of those"
        ) from None
    shape = tuple(int(s) for s in shape)
    block_elems, block_bytes = GGML_BLOCK[GGMLType(ggml_type)]
    n_elems = int(np.prod(shape, dtype=np.int64))
    if not shape or shape[-1] % block_elems:
        raise GGUFFormatError(
            f"a {_type_name(ggml_type)} tensor needs rows that are a multiple of {block_elems} elements, "
            f"got shape {shape}; the file is malformed")
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1)
    if data.dtype != np.uint8:
        raise InputError(f"dequantize wants raw bytes (uint8), got an array of {data.dtype}")
    expected = n_elems // block_elems * block_bytes
    if data.size != expected:
        raise GGUFFormatError(
            f"a {_type_name(ggml_type)} tensor of shape {shape} needs {expected} bytes, got {data.size}; "
            "the file is truncated or its tensor table is wrong")
    blocks = data.reshape(-1, block_bytes)
    return fn(blocks).reshape(shape)


def dequantize_tensor(info, raw) -> np.ndarray:
    """Decode one tensor described by a ``cera_web.gguf.TensorInfo`` (GGUF shape order) into numpy order."""
    return dequantize(raw, info.type, tuple(reversed(info.shape)))


# ---------------------------------------------------------------------------------------------------------------
# field helpers

def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """The little-endian float16 at byte ``at`` of every block, as float32 column [n_blocks, 1]."""
    return np.ascontiguousarray(blocks[:, at:at + 2]).view("<f2").astype(np.float32)


def _nibbles_lo_hi(qs: np.ndarray) -> np.ndarray:
    """[n, 16] packed bytes -> [n, 32] values: low nibbles are elements 0..15, high nibbles 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _q5_high_bits(blocks: np.ndarray, at: int) -> np.ndarray:
    """Bit j of the little-endian uint32 at byte ``at`` is the 5th bit of element j -> uint8 [n, 32] of 0/16."""
    qh = np.ascontiguousarray(blocks[:, at:at + 4]).view("<u4")               # [n, 1]
    return (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)  # [n, 32]


# ---------------------------------------------------------------------------------------------------------------
# plain float types

def dequantize_f32(blocks):
    return blocks.reshape(-1).view("<f4").reshape(-1, 1).astype(np.float32, copy=True)


def dequantize_f16(blocks):
    return blocks.reshape(-1).view("<f2").astype(np.float32).reshape(-1, 1)


def dequantize_bf16(blocks):
    # bfloat16 is the top half of a float32
    return (blocks.reshape(-1).view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(-1, 1)


# ---------------------------------------------------------------------------------------------------------------
# legacy 32-element blocks

def dequantize_q4_0(blocks):
    # f16 d | 16 bytes of nibbles;  x = d * (q - 8)
    d = _f16(blocks, 0)
    q = _nibbles_lo_hi(blocks[:, 2:18]).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


def dequantize_q4_1(blocks):
    # f16 d | f16 m | 16 bytes of nibbles;  x = d * q + m
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = _nibbles_lo_hi(blocks[:, 4:20]).astype(np.float32)
    return d * q + m


def dequantize_q5_0(blocks):
    # f16 d | u32 high bits | 16 bytes of nibbles;  x = d * (q - 16)
    d = _f16(blocks, 0)
    q = (_nibbles_lo_hi(blocks[:, 6:22]) | _q5_high_bits(blocks, 2)).astype(np.int8) - np.int8(16)
    return d * q.astype(np.float32)


def dequantize_q5_1(blocks):
    # f16 d | f16 m | u32 high bits | 16 bytes of nibbles;  x = d * q + m
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = (_nibbles_lo_hi(blocks[:, 8:24]) | _q5_high_bits(blocks, 4)).astype(np.float32)
    return d * q + m


def dequantize_q8_0(blocks):
    # f16 d | 32 int8;  x = d * q
    d = _f16(blocks, 0)
    return d * blocks[:, 2:34].view(np.int8).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# k-quants: 256-element super-blocks split into 16 or 8 sub-blocks with their own small scales

def dequantize_q2_k(blocks):
    # scales[16] (low nibble scale, high nibble min) | qs[64] (2-bit) | f16 d | f16 dmin
    # element n*128 + j*32 + l (n<2, j<4, l<32) = bits 2j..2j+1 of qs[n*32 + l], sub-block n*8 + j*2 + l//16
    n = blocks.shape[0]
    sc = blocks[:, 0:16].reshape(n, 2, 4, 2, 1)
    d, dmin = _f16(blocks, 80).reshape(n, 1, 1, 1, 1), _f16(blocks, 82).reshape(n, 1, 1, 1, 1)
    shifts = (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
    q = (blocks[:, 16:80].reshape(n, 2, 1, 32) >> shifts) & 3                  # [n, 2, 4, 32]
    q = q.reshape(n, 2, 4, 2, 16).astype(np.float32)
    dl = d * (sc & 0x0F).astype(np.float32)
    ml = dmin * (sc >> 4).astype(np.float32)
    return (dl * q - ml).reshape(n, QK_K)


def _q3_k_scales(s: np.ndarray) -> np.ndarray:
    """12 packed bytes -> 16 signed 6-bit scales: low 4 bits from bytes 0..7 (low then high nibbles),
    top 2 bits from bytes 8..11 (bit pairs 0-1, 2-3, 4-5, 6-7)."""
    i = np.arange(16)
    low = (s[:, i % 8] >> (4 * (i // 8)).astype(np.uint8)) & 0x0F
    high = (s[:, 8 + i % 4] >> (2 * (i // 4)).astype(np.uint8)) & 0x03
    return (low | (high << 4)).astype(np.int8) - np.int8(32)


def dequantize_q3_k(blocks):
    # hmask[32] | qs[64] (low 2 bits) | scales[12] | f16 d
    # element n*128 + j*32 + l: low bits 2j.. of qs[n*32 + l]; high bit (n*4 + j) of hmask[l]; value = q - 4 when
    # that high bit is clear; sub-block n*8 + j*2 + l//16
    n = blocks.shape[0]
    d = _f16(blocks, 108).reshape(n, 1, 1, 1, 1)
    sc = _q3_k_scales(blocks[:, 96:108]).reshape(n, 2, 4, 2, 1).astype(np.float32)
    shifts = (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
    low = (blocks[:, 32:96].reshape(n, 2, 1, 32) >> shifts) & 3                # [n, 2, 4, 32]
    bit = np.arange(8, dtype=np.uint8).reshape(1, 2, 4, 1)
    high = (blocks[:, 0:32].reshape(n, 1, 1, 32) >> bit) & 1                  # [n, 2, 4, 32]
    q = low.astype(np.int8) - np.int8(4) * (1 - high).astype(np.int8)
    q = q.reshape(n, 2, 4, 2, 16).astype(np.float32)
    return ((d * sc) * q).reshape(n, QK_K)


def _k4_scales_mins(s: np.ndarray):
    """12 packed bytes -> 8 6-bit scales and 8 6-bit mins (the Q4_K/Q5_K packing).
    Sub-blocks 0..3: bytes 0..3 / 4..7 low 6 bits; sub-blocks 4..7: nibbles of bytes 8..11 plus the top 2 bits
    of bytes 0..3 / 4..7."""
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc.astype(np.float32), mn.astype(np.float32)


def dequantize_q4_k(blocks):
    # f16 d | f16 dmin | scales[12] | qs[128]
    # element j*64 + h*32 + l (j<4, h<2, l<32) = nibble h of qs[j*32 + l], sub-block 2j + h
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0).reshape(n, 1, 1, 1), _f16(blocks, 2).reshape(n, 1, 1, 1)
    sc, mn = _k4_scales_mins(blocks[:, 4:16])
    qs = blocks[:, 16:144].reshape(n, 4, 1, 32)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.float32)       # [n, 4, 2, 32]
    dl = d * sc.reshape(n, 4, 2, 1)
    ml = dmin * mn.reshape(n, 4, 2, 1)
    return (dl * q - ml).reshape(n, QK_K)


def dequantize_q5_k(blocks):
    # f16 d | f16 dmin | scales[12] | qh[32] | qs[128]
    # as Q4_K, plus the 5th bit of element j*64 + h*32 + l is bit (2j + h) of qh[l]
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0).reshape(n, 1, 1, 1), _f16(blocks, 2).reshape(n, 1, 1, 1)
    sc, mn = _k4_scales_mins(blocks[:, 4:16])
    qs = blocks[:, 48:176].reshape(n, 4, 1, 32)
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=2)                           # [n, 4, 2, 32]
    bit = np.arange(8, dtype=np.uint8).reshape(1, 4, 2, 1)
    high = (blocks[:, 16:48].reshape(n, 1, 1, 32) >> bit) & 1                    # [n, 4, 2, 32]
    q = (low | (high << 4)).astype(np.float32)
    dl = d * sc.reshape(n, 4, 2, 1)
    ml = dmin * mn.reshape(n, 4, 2, 1)
    return (dl * q - ml).reshape(n, QK_K)


def dequantize_q6_k(blocks):
    # ql[128] (low 4 bits) | qh[64] (high 2 bits) | int8 scales[16] | f16 d
    # element n*128 + k*32 + l (n<2, k<4, l<32): nibble k//2 of ql[n*64 + (k%2)*32 + l],
    # bits 2k..2k+1 of qh[n*32 + l]; value = q - 32; sub-block n*8 + k*2 + l//16
    n = blocks.shape[0]
    d = _f16(blocks, 208).reshape(n, 1, 1, 1, 1)
    sc = blocks[:, 192:208].view(np.int8).reshape(n, 2, 4, 2, 1).astype(np.float32)
    ql = blocks[:, 0:128].reshape(n, 2, 1, 2, 32)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(n, 2, 4, 32)   # k = nibble*2 + half
    shifts = (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
    high = (blocks[:, 128:192].reshape(n, 2, 1, 32) >> shifts) & 3             # [n, 2, 4, 32]
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)
    q = q.reshape(n, 2, 4, 2, 16).astype(np.float32)
    return ((d * sc) * q).reshape(n, QK_K)


def dequantize_q8_k(blocks):
    # f32 d | int8 qs[256] | int16 bsums[16] (sums of 16-element groups, not needed to decode)
    d = np.ascontiguousarray(blocks[:, 0:4]).view("<f4").astype(np.float32)
    return d * blocks[:, 4:260].view(np.int8).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# reference quantizers (round-to-nearest, as ggml's scalar reference code): for building test models

def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: halves round away from zero (numpy's ``round`` rounds them to even)."""
    r = np.round(x)
    t = np.trunc(x)
    tie = np.abs(x - t) == 0.5
    return np.where(tie, t + np.sign(x), r)


def _blocks_of(x, block: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % block:
        raise InputError(f"quantizing needs rows that are a multiple of {block} elements, got shape {x.shape}")
    return x.reshape(-1, block)


def _as_f16_bytes(v: np.ndarray) -> np.ndarray:
    return v.astype("<f2").reshape(-1, 1).view(np.uint8)


def quantize_q8_0(x) -> np.ndarray:
    """float32 array (last axis a multiple of 32) -> Q8_0 bytes, uint8 of shape (*x.shape[:-1], row_bytes)."""
    x = np.asarray(x, dtype=np.float32)
    b = _blocks_of(x, 32)
    d = np.abs(b).max(axis=1, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = _round_half_away(b * inv).astype(np.int8)
    out = np.concatenate([_as_f16_bytes(d), q.view(np.uint8)], axis=1)
    return out.reshape(*x.shape[:-1], -1)


def quantize_q4_0(x) -> np.ndarray:
    """float32 array (last axis a multiple of 32) -> Q4_0 bytes, uint8 of shape (*x.shape[:-1], row_bytes).

    The scale maps the element of largest magnitude to -8 exactly (ggml's choice), so the 16 levels are used fully.
    """
    x = np.asarray(x, dtype=np.float32)
    b = _blocks_of(x, 32)
    idx = np.abs(b).argmax(axis=1)
    extreme = b[np.arange(b.shape[0]), idx].reshape(-1, 1)                     # signed value of largest |x|
    d = extreme / np.float32(-8)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(np.trunc(b * inv + np.float32(8.5)), 15).astype(np.uint8)  # truncation, as the C cast
    packed = q[:, :16] | (q[:, 16:] << 4)
    out = np.concatenate([_as_f16_bytes(d), packed], axis=1)
    return out.reshape(*x.shape[:-1], -1)


def quantize_q4_1(x) -> np.ndarray:
    """float32 array (last axis a multiple of 32) -> Q4_1 bytes, uint8 of shape (*x.shape[:-1], row_bytes)."""
    x = np.asarray(x, dtype=np.float32)
    b = _blocks_of(x, 32)
    lo = b.min(axis=1, keepdims=True)
    hi = b.max(axis=1, keepdims=True)
    d = (hi - lo) / np.float32(15)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(np.trunc((b - lo) * inv + np.float32(0.5)), 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    out = np.concatenate([_as_f16_bytes(d), _as_f16_bytes(lo), packed], axis=1)
    return out.reshape(*x.shape[:-1], -1)


# -- the GPU's aligned layout ------------------------------------------------------------------------------------

def aligned_layout(raw, ggml_type) -> np.ndarray:
    """A buffer of whole blocks of a type with an aligned layout (cera_web.formats: Aligned; any number of rows, in row
    order) in that layout: uint8, its regions one after the other, padded with zeros to a multiple of 4 bytes.
    shaders/repack.wgsl makes this layout on the GPU at upload; this function is its specification (and the tests')."""
    from .formats import FORMATS
    regions = FORMATS[GGMLType(ggml_type)].aligned.regions
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1)
    blocks = data.reshape(-1, GGML_BLOCK[GGMLType(ggml_type)][1])
    out = np.concatenate([blocks[:, o:o + n].reshape(-1) for o, n in regions])
    return np.concatenate([out, np.zeros(-out.size % 4, np.uint8)])
