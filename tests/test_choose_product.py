"""kernels.choose_product: which kernels compute a product, in which shape and dispatch, without a GPU.

The table pins the choices for the models' shapes on three adapters (an H200-like GPU with dot4I8Packed and 48 KiB
of workgroup memory, WebGPU's defaults without subgroups or int8, a CPU adapter); the boundary tests pin each
threshold of the decision from both sides (an off-by-one in a threshold fails one of them). The kernels themselves
are tested against numpy in test_kernels.py, test_gemm8.py, test_matvec_q8.py and test_formats.py.
"""
import pytest

from cera_web import formats, kernels
from cera_web.gguf import GGMLType as G

H200 = kernels.Adapter(is_cpu=False, int8_dot=True, subgroup_size=32, wg_memory=49152, max_threads=1024)
WEBGPU = kernels.Adapter(is_cpu=False)
CPU = kernels.Adapter(is_cpu=True, int8_dot=True)
DEFAULT = kernels.Tuning()


def picks(fmt, rows, cols, tokens, adapter=H200, tuning=DEFAULT, **kw):
    """[(kernel, shape, groups)] of each dispatch, shape: the keyword arguments that pick the kernel's shape."""
    keys = ("tile", "lanes", "tokens", "rpt", "wg", "sg", "rows", "pair", "kgroups", "ksplit")
    return [(d.kernel, {k: d.kwargs[k] for k in keys if k in d.kwargs}, d.groups)
            for d in kernels.choose_product(fmt, rows, cols, tokens, adapter, tuning, **kw)]


def names(*args, **kw):
    return [k for k, _, _ in picks(*args, **kw)]


I8 = {"wg": 128}      # quantize_rows' shape
TABLE = [
    # SmolLM2-135M (hidden 576, ffn 1536, Q4_1 / Q8_0 in the aligned layout) prefilling 512 tokens on the H200:
    # down projection: 144 tiles of 32 rows, 48 blocks a row: two K groups, K in 4 parts added by sum_parts
    ((G.Q4_1, 576, 1536, 512), dict(aligned=True, accum=True),
     [("quantize_rows", I8, (512, 1, 1)),
      ("matmul_i8", {"rows": 32, "pair": False, "kgroups": 2, "ksplit": 4}, (18, 8, 4)),
      ("sum_parts", {}, (3, 512, 1))]),
    ((G.Q4_1, 1536, 576, 512), dict(aligned=True, norm=True, glu=True),      # gate and up: GLU, one K group
     [("quantize_rows", I8, (512, 1, 1)), ("matmul_i8", {"rows": 32, "pair": False, "kgroups": 1}, (48, 8, 1))]),
    ((G.Q4_1, 960, 576, 512), dict(aligned=True, norm=True),                 # Q/K/V
     [("quantize_rows", I8, (512, 1, 1)), ("matmul_i8", {"rows": 32, "pair": False, "kgroups": 2}, (30, 8, 1))]),
    # Llama-3.2-1B Q4_K_M: 8192-row GLU in 64-row tiles; the 2048-row down projection in pairs of 32-row tiles
    ((G.Q4_K, 8192, 2048, 512), dict(norm=True, glu=True),
     [("quantize_rows", I8, (512, 1, 1)), ("matmul_i8", {"rows": 64, "pair": False, "kgroups": 1}, (128, 8, 1))]),
    ((G.Q6_K, 2048, 8192, 512), dict(aligned=True, accum=True),
     [("quantize_rows", I8, (512, 1, 1)), ("matmul_i8", {"rows": 32, "pair": True, "kgroups": 1}, (32, 8, 1))]),
    # the LM head: a prefill chunk's last token on 8-bit activations; all of a chunk's logits on float32 tiles
    ((G.Q8_0, 49152, 576, 64), dict(aligned=True, norm=True, last_only=True, logits=True),
     [("matvec_q8", {"lanes": 8, "wg": 256, "sg": True, "tokens": 1}, (1536, 1, 1))]),
    ((G.Q8_0, 49152, 576, 64), dict(aligned=True, norm=True, logits=True),
     [("matmul_tiled", {"tile": (64, 64, 1)}, (768, 1, 1))]),
    # decode
    ((G.Q4_1, 576, 1536, 1), dict(aligned=True, accum=True),
     [("matvec_q8", {"lanes": 32, "wg": 256, "sg": True, "tokens": 1}, (72, 1, 1))]),
    ((G.Q5_1, 2048, 2048, 1), dict(norm=True),                               # no int8 reader: matmul.wgsl
     [("matmul", {"lanes": 32, "tokens": 1, "rpt": 1, "wg": 64, "sg": True}, (1024, 1, 1))]),
]
TABLE_OTHER = [
    # WebGPU's defaults (no subgroups, no dot4I8Packed, 16 KiB)
    ((G.Q4_K, 2048, 2048, 1), WEBGPU, dict(norm=True),
     [("matmul", {"lanes": 32, "tokens": 1, "rpt": 1, "wg": 64, "sg": False}, (1024, 1, 1))]),
    ((G.Q4_K, 2048, 2048, 64), WEBGPU, dict(norm=True), [("matmul_tiled", {"tile": (32, 32, 4)}, (64, 2, 1))]),
    # a CPU adapter: the norm in a pass of its own, then one row pair a thread, for prefill too
    ((G.Q4_1, 1536, 576, 16), CPU, dict(norm=True),
     [("rmsnorm", {}, (16, 1, 1)), ("matmul", {"lanes": 1, "tokens": 1, "rpt": 2, "wg": 64, "sg": False},
                                    (12, 1, 1))]),
]


@pytest.mark.parametrize("shape,kw,want", TABLE, ids=lambda v: None)
def test_choices_for_the_models_shapes(shape, kw, want):
    assert picks(*shape, **kw) == want


@pytest.mark.parametrize("shape,adapter,kw,want", TABLE_OTHER, ids=lambda v: None)
def test_choices_on_other_adapters(shape, adapter, kw, want):
    assert picks(*shape, adapter, **kw) == want


def test_bindings_and_the_normalised_input():
    """Each dispatch binds by role: the CPU adapter's norm pass writes 'normed', which the product reads with the
    ones as its gain; the int8 path quantizes x (with the gain) into 'xq'."""
    norm, product = kernels.choose_product(G.Q4_1, 1536, 576, 16, CPU, DEFAULT, norm=True, eps=1e-5)
    assert (norm.kernel, norm.args, norm.buffers, norm.what) == ("rmsnorm", (576, 1e-5), ("x", "gain", "normed",
                                                                                          "step"), "norm")
    assert product.buffers == ("w", "normed", "y", "step", "ones") and product.kwargs["norm"] is False
    forced = kernels.Tuning(int8="1")               # int8 forced on a CPU adapter: the norm stays fused
    assert names(G.Q4_1, 1536, 576, 1, CPU, forced, norm=True) == ["matvec_q8"]
    quantize, gemm = kernels.choose_product(G.Q8_0, 576, 576, 64, H200, DEFAULT, norm=True, eps=1e-5)
    assert quantize.buffers == ("x", "xq", "step", "gain") and quantize.kwargs["norm"] is True
    assert gemm.buffers == ("w", "xq", "y", "step")


def test_tokens_thresholds():
    """One token a pass (or the LM head's last token) takes the matrix-vector kernels, two or more the GEMMs; the
    LM head's whole-chunk logits never take 8-bit activations."""
    assert names(G.Q4_1, 2048, 512, 1) == ["matvec_q8"]
    assert names(G.Q4_1, 2048, 512, 2) == ["quantize_rows", "matmul_i8"]
    assert names(G.Q4_1, 2048, 512, 2, logits=True) == ["matmul_tiled"]
    assert names(G.Q4_1, 2048, 512, 2, last_only=True) == ["matvec_q8"]
    no_i8 = kernels.Tuning(i8_prefill="0")
    assert names(G.Q4_1, 2048, 512, 2, tuning=no_i8) == ["matmul_tiled"]
    assert names(G.Q4_1, 2048, 512, 1, tuning=kernels.Tuning(int8="0")) == ["matmul"]
    # matmul.wgsl's tokens a pass: up to 8 on GPUs
    assert picks(G.Q5_1, 64, 2048, 8, tuning=no_i8)[0][0] == "matmul_tiled"
    assert picks(G.Q5_1, 64, 2048 + 16, 8)[0][1]["tokens"] == 8                # K not a multiple of 32: matmul
    assert picks(G.Q5_1, 64, 2048 + 16, 9)[0][1]["tokens"] == 8
    assert picks(G.Q5_1, 64, 2048 + 16, 7)[0][1]["tokens"] == 7


def test_k_alignment_thresholds():
    """The float32 tiles need K a multiple of 32; the int8 GEMM K a multiple of the type's block (Q4_K: 256)."""
    assert names(G.F16, 1024, 1024, 16) == ["matmul_tiled"]
    assert names(G.F16, 1024, 1024 + 16, 16) == ["matmul"]
    assert names(G.Q4_K, 1024, 768, 16) == ["quantize_rows", "matmul_i8"]
    assert names(G.Q4_K, 1024, 768 + 32, 16) == ["matmul_tiled"]
    assert names(G.Q4_K, 1024, 768, 1) == ["matvec_q8"]
    assert names(G.Q4_K, 1024, 768 + 32, 1) == ["matmul"]                         # nor matvec_q8 for decode


def test_k_split_thresholds():
    """K in parts where a product has fewer than I8_SPLIT_TILES (192) tiles and rows of I8_SPLIT_BLOCKS (32) blocks
    or more: 191 tiles of 32 rows split, 192 do not; 32 blocks split, 31 do not; never GLU."""
    assert kernels.I8_SPLIT_TILES == 192 and kernels.I8_SPLIT_BLOCKS == 32
    split = ["quantize_rows", "matmul_i8", "sum_parts"]
    assert names(G.Q8_0, 191 * 32, 1024, 64) == split
    assert names(G.Q8_0, 192 * 32, 1024, 64) == ["quantize_rows", "matmul_i8"]
    assert names(G.Q8_0, 576, 32 * 32, 512) == split
    assert names(G.Q8_0, 576, 31 * 32, 512) == ["quantize_rows", "matmul_i8"]
    assert names(G.Q8_0, 576, 1024, 512, glu=True) == ["quantize_rows", "matmul_i8"]
    assert picks(G.Q8_0, 576, 1024, 512, tuning=kernels.Tuning(i8_split=2))[1][1]["ksplit"] == 2


def test_split_weight_with_k_parts():
    """A weight split across buffers (row ranges) with K in parts: each range its own matmul_i8 writing parts of its
    rows, then sum_parts adding them into y at the range's column offset (the path a rebound loop variable broke)."""
    plan = kernels.choose_product(G.Q4_1, 576, 1536, 512, H200, DEFAULT, parts=[(0, 288), (288, 288)],
                                  accum=True, ystride=600, yoff=8)
    assert [(d.kernel, d.part) for d in plan] == [("quantize_rows", None), ("matmul_i8", 0), ("sum_parts", 0),
                                                  ("matmul_i8", 1), ("sum_parts", 1)]
    for d in plan[1::2]:
        assert d.args == (G.Q4_1, 1536, 288) and d.kwargs["ksplit"] == 4 and d.kwargs["tmax"] == 512
        assert d.scratch == 4 * 4 * 512 * 288 and d.buffers == ("w", "xq", "sums", "step")
    assert [d.kwargs["yoff"] for d in plan[2::2]] == [8, 8 + 288]
    assert all(d.kwargs["ystride"] == 600 and d.kwargs["accum"] for d in plan[2::2])
    # without K parts: each range at its offset, straight into y
    plan = kernels.choose_product(G.Q4_1, 2048, 2048, 1, H200, DEFAULT, parts=[(0, 1024), (1024, 1024)])
    assert [(d.kernel, d.part, d.kwargs["yoff"], d.kwargs["ystride"]) for d in plan] == [
        ("matvec_q8", 0, 0, 2048), ("matvec_q8", 1, 1024, 2048)]


def test_workgroup_memory_thresholds():
    """matvec_q8 holds the quantized row in workgroup memory: Q8_0 rows of 13,088 fit 16 KiB (16,376 bytes), rows
    of 13,120 do not (16,416: matmul.wgsl)."""
    assert kernels.matvec_q8_memory(13088, 8, 256, True) == 16376
    assert names(G.Q8_0, 2048, 13088, 1, WEBGPU, kernels.Tuning(int8="1")) == ["matmul"]   # no dot4I8Packed
    adapter = kernels.Adapter(is_cpu=False, int8_dot=True, subgroup_size=32)
    assert names(G.Q8_0, 2048, 13088, 1, adapter) == ["matvec_q8"]
    assert names(G.Q8_0, 2048, 13120, 1, adapter) == ["matmul"]
    exact = kernels.Adapter(is_cpu=False, int8_dot=True, subgroup_size=32, wg_memory=16376)
    assert names(G.Q8_0, 2048, 13088, 1, exact) == ["matvec_q8"]           # the limit itself fits
    short = kernels.Adapter(is_cpu=False, int8_dot=True, subgroup_size=32, wg_memory=16375)
    assert names(G.Q8_0, 2048, 13088, 1, short) == ["matmul"]


def test_tile_thresholds():
    """matmul_tiled's tile: 64 x 64 from 256 such tiles; else long rows (K >= 1024) in K groups; N >= 1024 64 x 32;
    N >= 768 or passes of up to 32 tokens 64 x 32 in 2 K groups; else 64 x 64."""
    t = kernels.Tuning(int8="0")
    tile = lambda n, k, tokens: picks(G.F16, n, k, tokens, tuning=t)[0][1]["tile"]    # noqa: E731
    assert tile(2048, 992, 512) == (64, 64, 1) and tile(1984, 992, 512) == (64, 32, 1)   # 256 / 248 tiles
    assert tile(704, 1024, 512) == (32, 32, 4) and tile(704, 992, 512) == (64, 64, 1)
    assert tile(1024, 992, 64) == (64, 32, 1) and tile(1008, 992, 64) == (64, 32, 2)
    assert tile(768, 992, 64) == (64, 32, 2) and tile(752, 992, 64) == (64, 64, 1)
    assert tile(704, 992, 32) == (64, 32, 2) and tile(704, 992, 33) == (64, 64, 1)
    assert tile(704, 992, 33) != picks(G.F16, 704, 992, 33, tuning=kernels.Tuning(int8="0", tile=(32, 32, 4)))[0][1]


def test_the_formats_registry():
    """One row per type the package reads: block geometry from the file format's table, a dequantizer, a float32
    reader for every GPU type, and the aligned layout's regions covering whole blocks' bytes once."""
    from cera_web.gguf import GGML_BLOCK
    assert formats.GPU_TYPES == set(formats.FORMATS) - {G.Q8_K}
    assert set(formats.types_with("matvec_q8")) == {G.Q4_0, G.Q4_1, G.Q5_0, G.Q8_0, G.Q4_K, G.Q5_K, G.Q6_K}
    assert set(formats.types_with("matmul_i8")) == {G.Q4_0, G.Q4_1, G.Q5_0, G.Q8_0, G.Q4_K, G.Q6_K}
    assert formats.ALIGNED_TYPES == {G.Q4_1, G.Q8_0, G.Q6_K}
    # matvec_q8 on aligned Q4_1 / Q8_0 reads a whole block an item: rows of 256 blocks or more take at most 16 lanes
    assert {t for t in formats.ALIGNED_TYPES if formats.FORMATS[t].aligned.block_items} == {G.Q4_1, G.Q8_0}
    assert picks(G.Q8_0, 2048, 8192, 1, aligned=True)[0][1]["lanes"] == 16
    assert picks(G.Q8_0, 2048, 8192, 1, aligned=False)[0][1]["lanes"] == 32
    assert picks(G.Q6_K, 2048, 8192, 1, aligned=True)[0][1]["lanes"] == 32
    for t, row in formats.FORMATS.items():
        assert (row.block_elems, row.block_bytes) == GGML_BLOCK[t]
        for path in formats.PATHS:
            for aligned in (False, True):
                r = row.reader(path, aligned)
                if r is not None:      # every file it names exists
                    assert all((kernels.SHADER_DIR / f).is_file() for f in r.files()), (t.name, path, aligned)
        if row.aligned is not None:
            covered = sorted(b for o, n in row.aligned.regions for b in range(o, o + n))
            assert covered == list(range(row.block_bytes)), t.name
    with pytest.raises(ValueError, match="kernel path 'f16'"):
        formats.FORMATS[G.Q4_1].reader("f16")


def test_tuning_reads_every_switch_by_its_name():
    env = {"CERA_WEB_INT8": "1", "CERA_WEB_I8_PREFILL": "0", "CERA_WEB_ALIGNED": "0", "CERA_WEB_TILE": "64,32,2",
           "CERA_WEB_MATVEC": "lanes=16,sg=0", "CERA_WEB_MATVEC8": "lanes=8,wg=128", "CERA_WEB_QUANTIZE_WG": "64",
           "CERA_WEB_I8_KB": "4", "CERA_WEB_I8_TR": "64", "CERA_WEB_I8_PAIR": "0", "CERA_WEB_I8_KG": "4",
           "CERA_WEB_I8_SPLIT": "8", "CERA_WEB_ATTN_SPLIT": "3", "CERA_WEB_ATTN_TILED": "32",
           "CERA_WEB_PREFILL_ATTN_SPLIT": "2", "CERA_WEB_ARGMAX_PARTS": "1", "CERA_WEB_ATTN_RANGE": "128"}
    assert kernels.Tuning.from_env(env) == kernels.Tuning(
        int8="1", i8_prefill="0", aligned=False, tile=(64, 32, 2), matvec=(("lanes", 16), ("sg", 0)),
        matvec8=(("lanes", 8), ("wg", 128)), quantize_wg=64, i8_kb=4, i8_tr=64, i8_pair=False, i8_kg=4, i8_split=8,
        attn_split=3, attn_tiled="32", prefill_attn_split=2, argmax_one=True, attn_range=128)
    assert kernels.Tuning.from_env({}) == kernels.Tuning()
    assert kernels.Tuning().quantize_wg == kernels.QUANTIZE_WG and kernels.Tuning().i8_kb == kernels.I8_KB
    for name, bad in [("INT8", "yes"), ("TILE", "16,16,1"), ("MATVEC", "rows=2"), ("I8_SPLIT", "3"),
                      ("ATTN_SPLIT", "65"), ("ATTN_TILED", "2"), ("I8_TR", "48"), ("QUANTIZE_WG", "32"),
                      ("ATTN_RANGE", "100")]:
        with pytest.raises(ValueError, match=f"CERA_WEB_{name}"):
            kernels.Tuning.from_env({f"CERA_WEB_{name}": bad})


def test_split_attention_output_takes_fewer_lanes():
    """The product on a split attention's partial results (xsplit) takes at most XSPLIT_LANES lanes a row (each
    workgroup combines every range), the same product on plain input the lanes its row count gives."""
    def lanes(**kw):
        return [d.kwargs["lanes"] for d in kernels.choose_product(G.Q4_K, 2048, 2048, 1, H200, DEFAULT, **kw)]
    assert lanes() == [32] and lanes(xsplit=(16, 64)) == [kernels.XSPLIT_LANES] == [8]
    assert lanes(xsplit=(1, 64)) == [32]


def test_decode_attention_ranges():
    """attention_split: a range per attention_range() keys of the context (256; CERA_WEB_ATTN_RANGE), up to 4,096
    keys' worth (then the ranges lengthen); none for heads not a multiple of 32 wide; CERA_WEB_ATTN_SPLIT forces it."""
    split = kernels.attention_split
    assert [split(c, 64) for c in (256, 257, 4096, 4097, 32768)] == [1, 2, 16, 16, 16]
    assert split(4096, 48) == 1
    r64 = kernels.Tuning(attn_range=64)
    assert kernels.attention_range(r64) == 64 and kernels.attention_range() == kernels.ATTENTION_RANGE == 256
    assert [split(c, 64, r64) for c in (64, 65, 4096, 8192)] == [1, 2, 64, 64]
    assert [split(c, 64, kernels.Tuning(attn_range=512)) for c in (512, 513, 8192)] == [1, 2, 8]
    assert split(4096, 64, kernels.Tuning(attn_split=3)) == 3


@pytest.mark.parametrize("adapter", [H200, WEBGPU, CPU], ids=["h200", "webgpu", "cpu"])
@pytest.mark.parametrize("fmt", [G.F32, G.F16, G.Q4_1, G.Q4_K, G.Q5_1, G.Q6_K, G.Q8_0], ids=lambda f: G(f).name)
def test_each_token_of_a_verify_pass_gets_the_decode_steps_dispatches(adapter, fmt):
    """Speculative decoding's verify pass (each=True, 16 tokens) must compute every token as a decode step does, or a
    kept draft can differ from the token plain decoding draws: the same kernels with the same constants, on every
    adapter and format, with norms, GLU, accumulation and weights in row ranges. What differs: matvec_q8 runs the
    tokens side by side (TOKENS = 16, 16 times the workgroups); matmul.wgsl loops over them (same grid); the LM head
    differs by LAST_ONLY (a decode step keeps its one row), and CPU adapters' norm pass by its grid (a workgroup a
    token). Without each, 16 tokens take the prefill products (pinned above), which round differently on GPUs."""
    def flat(groups):
        return groups[0] * groups[1] * groups[2]

    def sig(tokens, **kw):
        out = []
        for d in kernels.choose_product(fmt, 1536, 576, tokens, adapter, DEFAULT, **kw):
            side = d.kwargs.get("tokens", 1)
            assert side == (16 if d.kernel == "matvec_q8" and tokens == 16 and not kw.get("last_only") else 1)
            out.append((d.kernel, d.args, {k: v for k, v in d.kwargs.items() if k not in ("last_only", "tokens")},
                        -(-flat(d.groups) // side) if d.kernel != "rmsnorm" else None, d.buffers))
        return out
    for kw in (dict(norm=True, eps=1e-5, glu=True), dict(accum=True), dict(parts=[(0, 1024), (1024, 512)])):
        assert sig(16, each=True, **kw) == sig(1, **kw), kw
    assert sig(16, each=True, norm=True, logits=False) == sig(1, norm=True, last_only=True)
    if not adapter.is_cpu:
        assert sig(16, norm=True, glu=True) != sig(1, norm=True, glu=True)
