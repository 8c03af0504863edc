"""Block dequantization and the reference quantizers, checked against the `gguf` package (an independent
implementation of the same formats)."""

import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import quants as gq  # noqa: E402

from cera_web.errors import GGUFFormatError, InputError, UnsupportedModelError  # noqa: E402
from cera_web.gguf import GGML_BLOCK, GGMLType  # noqa: E402
from cera_web.quants import (  # noqa: E402
    dequantize, dequantize_tensor, quantize_q4_0, quantize_q4_1, quantize_q8_0, supported_types)

# byte offsets of the f16 scale/min fields inside one block of each type
F16_FIELDS = {
    GGMLType.Q4_0: [0], GGMLType.Q4_1: [0, 2], GGMLType.Q5_0: [0], GGMLType.Q5_1: [0, 2],
    GGMLType.Q8_0: [0], GGMLType.Q2_K: [80, 82], GGMLType.Q3_K: [108], GGMLType.Q4_K: [0, 2],
    GGMLType.Q5_K: [0, 2], GGMLType.Q6_K: [208],
}

# extreme and ordinary scales: largest f16, tiny normal, subnormal, zero, negative zero, negatives
SPECIAL_SCALES = np.array([65504.0, -65504.0, 6.1035156e-05, 5.9604645e-08, 0.0, -0.0, -1.0, 1.0, -0.0123, 3.5],
                          dtype=np.float16)


def random_blocks(ggml_type, rows, blocks_per_row, rng):
    """Random bytes for rows x blocks_per_row blocks, with every f16 field set to a finite value (a mix of
    random ordinary values and the special ones above)."""
    _, bb = GGML_BLOCK[ggml_type]
    data = rng.integers(0, 256, size=(rows * blocks_per_row, bb), dtype=np.uint8)
    for at in F16_FIELDS.get(ggml_type, []):
        vals = (rng.standard_normal(data.shape[0]) * 0.05).astype(np.float16)
        special = rng.random(data.shape[0]) < 0.3
        vals[special] = rng.choice(SPECIAL_SCALES, size=int(special.sum()))
        data[:, at:at + 2] = vals.view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, blocks_per_row * bb)


@pytest.mark.parametrize("ggml_type", list(F16_FIELDS))
def test_dequantize_matches_gguf_package(ggml_type):
    rng = np.random.default_rng(int(ggml_type))
    be, _ = GGML_BLOCK[ggml_type]
    rows, bpr = 7, 5                                                    # rows several blocks long
    raw = random_blocks(ggml_type, rows, bpr, rng)
    ours = dequantize(raw.tobytes(), ggml_type, (rows, bpr * be))
    ref = gq.dequantize(raw, gguf.GGMLQuantizationType(int(ggml_type)))
    assert ours.dtype == np.float32 and ours.shape == (rows, bpr * be) == ref.shape
    assert np.isfinite(ours).all()
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("ggml_type", [GGMLType.F32, GGMLType.F16, GGMLType.BF16])
def test_float_types_match_gguf_package(ggml_type):
    rng = np.random.default_rng(5)
    _, bb = GGML_BLOCK[ggml_type]
    raw = rng.integers(0, 256, size=(3, 64 * bb), dtype=np.uint8)   # includes inf/nan bit patterns
    ours = dequantize(raw, ggml_type, (3, 64))
    ref = gq.dequantize(raw, gguf.GGMLQuantizationType(int(ggml_type))).astype(np.float32)
    np.testing.assert_array_equal(ours, ref)                         # nan == nan here


def test_q8_k_by_definition():
    # the gguf package has no Q8_K dequantizer: decode by the format's definition, block by block
    rng = np.random.default_rng(15)
    n = 6
    d = np.array([1.5, -0.0, 0.0, 3e-20, -7.25e10, 0.001], dtype="<f4")
    qs = rng.integers(-128, 128, size=(n, 256), dtype=np.int8)
    bsums = qs.reshape(n, 16, 16).astype(np.int16).sum(axis=2)
    raw = b"".join(d[i].tobytes() + qs[i].tobytes() + bsums[i].astype("<i2").tobytes() for i in range(n))
    ours = dequantize(raw, GGMLType.Q8_K, (2, 3 * 256))
    expect = np.stack([np.float32(struct.unpack("<f", d[i].tobytes())[0]) * qs[i].astype(np.float32)
                       for i in range(n)]).reshape(2, 768)
    np.testing.assert_array_equal(ours, expect)


def test_legacy_layout_by_hand():
    # one Q4_1 block built by hand: d = 0.5, m = -1, element j = j % 16 (low nibbles 0..15, high nibbles 0..15)
    qs = bytes((j | (j << 4)) for j in range(16))
    raw = np.float16(0.5).tobytes() + np.float16(-1).tobytes() + qs
    out = dequantize(raw, GGMLType.Q4_1, (32,))
    np.testing.assert_array_equal(out, 0.5 * (np.arange(32) % 16) - 1)
    # Q5_0: the high bit of element k is bit k of the u32; set it for odd elements only
    qh = sum(1 << k for k in range(1, 32, 2))
    raw = np.float16(2).tobytes() + struct.pack("<I", qh) + bytes(16)
    out = dequantize(raw, GGMLType.Q5_0, (1, 32))
    np.testing.assert_array_equal(out[0], np.where(np.arange(32) % 2 == 1, 0.0, -32.0))


def test_unsupported_type_is_named():
    with pytest.raises(UnsupportedModelError, match="IQ2_XXS"):
        dequantize(bytes(66), GGMLType.IQ2_XXS, (256,))
    assert GGMLType.Q4_1 in supported_types() and GGMLType.IQ2_XXS not in supported_types()


def test_wrong_sizes_are_format_errors():
    with pytest.raises(GGUFFormatError, match="needs 68 bytes, got 34"):
        dequantize(bytes(34), GGMLType.Q8_0, (64,))
    with pytest.raises(GGUFFormatError, match="multiple of 32"):
        dequantize(bytes(34), GGMLType.Q8_0, (2, 16))
    with pytest.raises(InputError):
        dequantize(np.zeros(9, np.float32), GGMLType.Q8_0, (32,))


def test_dequantize_tensor_uses_gguf_shape_order():
    class Info:  # the fields of cera_web.gguf.TensorInfo that matter here
        type = GGMLType.Q8_0
        shape = (64, 3)                                            # GGUF order: 64 innermost
    raw = random_blocks(GGMLType.Q8_0, 3, 2, np.random.default_rng(0))
    out = dequantize_tensor(Info, raw.tobytes())
    assert out.shape == (3, 64)
    np.testing.assert_array_equal(out, gq.dequantize(raw, gguf.GGMLQuantizationType.Q8_0))


def _data(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, :32] = 0.0                                                  # an all-zero block
    x[1, :32] = 2.5                                                  # a constant block
    x[2, 5] = -40.0                                                  # an outlier
    x[3, :32] = np.float32(0.5) * np.arange(-16, 16)                 # exact ties for the rounding rules
    return x


@pytest.mark.parametrize("quantize, qtype", [
    (quantize_q8_0, GGMLType.Q8_0), (quantize_q4_0, GGMLType.Q4_0), (quantize_q4_1, GGMLType.Q4_1)])
def test_quantizers_match_gguf_package(quantize, qtype):
    rng = np.random.default_rng(1)
    x = _data(rng, (6, 96))
    ours = quantize(x)
    ref = gq.quantize(x, gguf.GGMLQuantizationType(int(qtype)))
    assert ours.dtype == np.uint8 and ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)


# worst-case error of each format for a block with values in [lo, hi] (amax = largest |x|): half a step (Q4_0: a
# whole step on the side opposite its extreme value) plus the f16 rounding of the stored scale and min
ROUND_TRIP_BOUND = {
    GGMLType.Q8_0: lambda lo, hi, amax: 0.5 * amax / 127 + amax * 2.0**-10,
    GGMLType.Q4_0: lambda lo, hi, amax: amax / 8 + amax * 2.0**-10,
    GGMLType.Q4_1: lambda lo, hi, amax: 0.5 * (hi - lo) / 15 + (np.abs(lo) + hi - lo) * 2.0**-10,
}


@pytest.mark.parametrize("quantize, qtype", [
    (quantize_q8_0, GGMLType.Q8_0), (quantize_q4_0, GGMLType.Q4_0), (quantize_q4_1, GGMLType.Q4_1)])
def test_quantize_round_trip_error(quantize, qtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 128)).astype(np.float32) * 3
    back = dequantize(quantize(x), qtype, x.shape)
    blocks = x.reshape(-1, 32)
    bound = ROUND_TRIP_BOUND[qtype](blocks.min(1), blocks.max(1), np.abs(blocks).max(1))
    err = np.abs(back - x).reshape(-1, 32).max(1)
    assert (err <= bound).all()
    assert (err > 0).any()                                     # it really is lossy: the check has teeth
