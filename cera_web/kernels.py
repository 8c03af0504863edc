"""WGSL kernel sources, one function per kernel in shaders/.

Each function returns the complete WGSL text for one specialisation: the compile-time constants the kernel's header
comment lists, then shaders/common.wgsl, the weight-format helpers where the kernel reads packed weights, and the
kernel itself. Devices cache pipelines by this text, so equal shapes share one pipeline.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import formats
from .errors import UnsupportedModelError
from .gguf import GGML_BLOCK, GGMLType

# An installed wheel holds the kernels in the package (cera_web/shaders/); a checkout at the repository's top level.
_HERE = Path(__file__).resolve().parent
SHADER_DIR = _HERE / "shaders" if (_HERE / "shaders" / "common.wgsl").exists() else _HERE.parent / "shaders"

# --- tuning switches ---

# The matrix-vector kernel's shape on GPUs for one token a pass (decode), chosen from the adapter's features: rows
# per thread, threads per workgroup, subgroup shuffles. CERA_WEB_MATVEC="rpt=1,wg=64,sg=0" overrides it (benchmarks
# compare shapes in one run; tests force each path).
MATVEC = {"rpt": 1, "wg": 64, "sg": 1, "lanes": 32}
# The int8 kernel's shape on GPUs; CERA_WEB_MATVEC8="lanes=8,wg=256,sg=0" overrides it (benchmarks). lanes 0: by
# the row count (matvec_q8_lanes).
MATVEC8 = {"lanes": 0, "wg": 256, "sg": 1}
QUANTIZE_WG = 128   # quantize_rows' threads (H200 SmolLM2 prefill: 64 54.1/55.9k tok/s, 128 58.5/59.1k; h200-s8-call4)
I8_KB = 2     # 32-blocks a K step of matmul_i8 (H200 session 7 call 4: 2 and 4 within noise of each other, 8 slower)


@dataclass(frozen=True)
class Tuning:
    """Every CERA_WEB_* switch of the kernel choices, read once (Tuning.from_env; a model reads it when it is made)
    or made directly by tests. The defaults are the measured choices; the switches exist for benchmarks comparing
    shapes in one run and for tests forcing a path. None / "": not forced.

    int8          CERA_WEB_INT8=0|1: every int8 path off / also on CPU adapters (int8_enabled, i8_prefill_enabled)
    i8_prefill    CERA_WEB_I8_PREFILL=0|1: prefill products on 8-bit activations off / also on CPU adapters
    aligned       CERA_WEB_ALIGNED=0: weights in the file's layout instead of the aligned one (aligned_enabled)
    tile          CERA_WEB_TILE="64,64,1": matmul_tiled's tile for every product (tiled_tile)
    matvec        CERA_WEB_MATVEC="rpt=1,wg=64,sg=0,lanes=32": matmul.wgsl's decode shape (matvec_shape)
    matvec8       CERA_WEB_MATVEC8="lanes=8,wg=256,sg=0": matvec_q8's shape (matvec_q8_shape)
    quantize_wg   CERA_WEB_QUANTIZE_WG=64|128|256: quantize_rows' threads
    i8_kb         CERA_WEB_I8_KB=N: 32-blocks a K step of matmul_i8
    i8_tr         CERA_WEB_I8_TR=32|64: matmul_i8's tile rows (matmul_i8_rows)
    i8_pair       CERA_WEB_I8_PAIR=0|1: matmul_i8's pairs of tiles for plain products (matmul_i8_tile)
    i8_kg         CERA_WEB_I8_KG=1|2|4: matmul_i8's K groups where they fit (matmul_i8_kgroups)
    i8_split      CERA_WEB_I8_SPLIT=1|2|4|8: matmul_i8's K parts (matmul_i8_split)
    attn_split    CERA_WEB_ATTN_SPLIT=1..64: the decode attention's key ranges at most (attention_split)
    attn_range    CERA_WEB_ATTN_RANGE=64|128|256|512: the fewest keys a range of it takes (attention_range)
    attn_tiled    CERA_WEB_ATTN_TILED=0|1|32|64: the tiled prefill attention (attention_tiled_rows)
    prefill_attn_split  CERA_WEB_PREFILL_ATTN_SPLIT=1|2|4|8: splits of the tiled prefill attention
    argmax_one    CERA_WEB_ARGMAX_PARTS=1: one argmax workgroup for any vocabulary (argmax_parts_count)
    sgmat         CERA_WEB_SGMAT=1: prefill products on subgroup matrices where the adapter has them (off by default:
                  slower than the int8 path on the H200); =emulate: with the built-ins emulated, on any adapter (tests)
    sgmat_block   CERA_WEB_SGMAT_BLOCK="4,2": result matrices a subgroup of matmul_sgmat, tokens x rows (sgmat_shape)
    sgmat_grid    CERA_WEB_SGMAT_GRID="2,2": subgroups a workgroup of matmul_sgmat, tokens x rows (sgmat_shape)
    """
    int8: str = ""
    i8_prefill: str = ""
    aligned: bool = True
    tile: tuple | None = None
    matvec: tuple = ()            # (key, value) overrides of MATVEC
    matvec8: tuple = ()           # (key, value) overrides of MATVEC8
    quantize_wg: int = QUANTIZE_WG
    i8_kb: int = I8_KB
    i8_tr: int | None = None
    i8_pair: bool | None = None
    i8_kg: int | None = None
    i8_split: int | None = None
    attn_split: int | None = None
    attn_range: int | None = None
    attn_tiled: str = ""
    prefill_attn_split: int | None = None
    argmax_one: bool = False
    sgmat: str = ""
    sgmat_block: tuple | None = None
    sgmat_grid: tuple | None = None

    @classmethod
    def from_env(cls, env=None) -> "Tuning":
        """The switches set in ``env`` (default: os.environ); a malformed value raises ValueError naming it."""
        env = os.environ if env is None else env

        def get(name):
            return env.get("CERA_WEB_" + name, "")

        def choice(name, allowed, why):
            value = get(name)
            if value and value not in allowed:
                raise ValueError(f"CERA_WEB_{name}={value!r}: {why}")
            return value

        def number(name, allowed, why):
            value = choice(name, allowed, why)
            return int(value) if value else None

        int8 = choice("INT8", ("0", "1"), "use 0 (off), 1 (on, also on CPU adapters) or leave it unset")
        i8_prefill = choice("I8_PREFILL", ("0", "1"), "use 0 (float32 prefill products), 1 (also on CPU adapters) "
                                                      "or leave it unset")
        aligned = choice("ALIGNED", ("0", "1"), "use 0 (the file's layout) or 1 / unset (aligned)")
        tile = None
        if get("TILE"):
            tile = tuple(int(v) for v in get("TILE").split(","))
            if tile not in TILES:
                raise ValueError(f"CERA_WEB_TILE={get('TILE')}: not one of {TILES}")
        quantize_wg = int(get("QUANTIZE_WG") or QUANTIZE_WG)
        if quantize_wg not in (64, 128, 256):
            raise ValueError(f"CERA_WEB_QUANTIZE_WG={quantize_wg}: 64, 128 or 256")
        attn_split = get("ATTN_SPLIT")
        if attn_split and (not attn_split.isdigit() or not 1 <= int(attn_split) <= 64):
            raise ValueError(f"CERA_WEB_ATTN_SPLIT={attn_split}: a number of key ranges from 1 to 64")
        pair = choice("I8_PAIR", ("0", "1"), "0 or 1")
        return cls(
            int8=int8, i8_prefill=i8_prefill, aligned=aligned != "0", tile=tile,
            matvec=_overrides("CERA_WEB_MATVEC", get("MATVEC"), MATVEC, "rpt=N, wg=N, sg=0|1, lanes=N"),
            matvec8=_overrides("CERA_WEB_MATVEC8", get("MATVEC8"), MATVEC8, "lanes=N, wg=N, sg=0|1"),
            quantize_wg=quantize_wg, i8_kb=int(get("I8_KB") or I8_KB),
            i8_tr=number("I8_TR", ("32", "64"), "64 or 32"),
            i8_pair=None if not pair else pair == "1",
            i8_kg=number("I8_KG", ("1", "2", "4"), "1, 2 or 4"),
            i8_split=number("I8_SPLIT", ("1", "2", "4", "8"), "1, 2, 4 or 8"),
            attn_split=int(attn_split) if attn_split else None,
            attn_range=number("ATTN_RANGE", ("64", "128", "256", "512"), "64, 128, 256 or 512"),
            attn_tiled=choice("ATTN_TILED", ("0", "1", "32", "64"), "0 (attention.wgsl), 1 (also on software "
                              "adapters), 32 or 64 (that kernel), or unset"),
            prefill_attn_split=number("PREFILL_ATTN_SPLIT", ("1", "2", "4", "8"), "1, 2, 4 or 8"),
            argmax_one=get("ARGMAX_PARTS") == "1",
            sgmat=choice("SGMAT", ("0", "1", "emulate"), "use 1 (prefill products on subgroup matrices where the "
                         "adapter has them), 0 or unset (not), emulate (tests: the built-ins in plain WGSL)"),
            sgmat_block=_pair("CERA_WEB_SGMAT_BLOCK", get("SGMAT_BLOCK"), (1, 2, 4)),
            sgmat_grid=_pair("CERA_WEB_SGMAT_GRID", get("SGMAT_GRID"), (1, 2, 4)))

    def matvec_config(self) -> dict:
        cfg = {**MATVEC, **dict(self.matvec)}
        if cfg["lanes"] & (cfg["lanes"] - 1) or not 4 <= cfg["lanes"] <= 32:
            raise ValueError(f"CERA_WEB_MATVEC: lanes={cfg['lanes']} is not a power of two from 4 to 32")
        return cfg

    def matvec8_config(self) -> dict:
        return {**MATVEC8, **dict(self.matvec8)}


def _pair(name: str, text: str, allowed) -> tuple | None:
    """A switch "a,b" of two numbers from allowed (None when unset)."""
    if not text:
        return None
    try:
        pair = tuple(int(v) for v in text.split(","))
    except ValueError:
        pair = ()
    if len(pair) != 2 or not set(pair) <= set(allowed):
        raise ValueError(f"{name}={text!r}: two numbers from {allowed}, e.g. 2,4")
    return pair


def _overrides(name: str, text: str, defaults: dict, form: str) -> tuple:
    """"key=N,key=N" -> ((key, N), ...), each key one of defaults'."""
    out = []
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in defaults or not value.strip().isdigit():
            raise ValueError(f"{name}: {item!r} is not one of {form}")
        out.append((key.strip(), int(value)))
    return tuple(out)


def _tuning(tuning: Tuning | None) -> Tuning:
    """The tuning a kernel helper uses: the model's, or (called alone: tests, benchmarks) the environment's now."""
    return tuning if tuning is not None else Tuning.from_env()


MATMUL_ONLY = "// --- matmul only"

@lru_cache(maxsize=None)
def _read(name: str) -> str:
    path = SHADER_DIR / name
    try:
        return path.read_text()
    except OSError as e:  # pragma: no cover - a broken install
        raise FileNotFoundError(f"WGSL kernel {path} is missing ({e.strerror}); reinstall cera_web (its wheel holds cera_web/shaders/)") from None


# A line //#include "name.wgsl" in a kernel's file stands for shaders/name.wgsl (code shared by several kernels: the
# workgroup argmax tree, the tiled attentions' KV loads), resolved when build() assembles the kernel's source. A file
# goes in once however many of the source's files include it (WGSL's module-scope declarations may come in any
# order, and a second copy would declare its names twice).
INCLUDE = re.compile(r'^//#include "([^"]+)"[ \t]*(?://.*)?$', re.M)


def _expand(text: str, where: str, seen: set) -> str:
    """``text`` (of shaders/``where``) with its includes resolved; ``seen``: the files the kernel's source holds."""
    def one(match):
        name = match.group(1)
        if name in seen:
            return f"// {name}: included above"
        if not (SHADER_DIR / name).is_file():
            raise FileNotFoundError(f"shaders/{where} includes {name!r}, which is not in {SHADER_DIR}: fix the "
                                    f"include line (a path under shaders/) or add the file")
        seen.add(name)
        return _expand(_read(name), name, seen)
    return INCLUDE.sub(one, text)


# A kernel whose text has jinja2 line statements (a line "//% for i in range(RT)") is a template, rendered with the
# kernel's constants (and C = "xyzw") so that loops over a thread's few rows or keys are written out as separate
# variables: WGSL arrays indexed in loops were not kept in registers on the H200 (attention_tiled.wgsl, session 16).
TEMPLATE_LINE = re.compile(r"^[ \t]*//%", re.M)


@lru_cache(maxsize=None)
def _template(kernel: str, text: str):
    """The compiled template and the names it reads."""
    import jinja2
    import jinja2.meta
    env = jinja2.Environment(line_statement_prefix="//%", keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
                             autoescape=False)
    return env.from_string(text), jinja2.meta.find_undeclared_variables(env.parse(text))


def _render(kernel: str, text: str, consts: dict) -> str:
    template, names = _template(kernel, text)
    missing = sorted(names - set(consts) - {"C"})
    if missing:
        raise ValueError(f"shaders/{kernel}.wgsl is a template that reads {', '.join(missing)}: pass "
                         f"{'it' if len(missing) == 1 else 'them'} to kernels.build")
    return template.render(C="xyzw", **consts)


def _const(name, value) -> str:
    if isinstance(value, bool):
        return f"const {name}: bool = {'true' if value else 'false'};"
    if isinstance(value, int):
        return f"const {name}: u32 = {value}u;"
    if isinstance(value, float):
        return f"const {name}: f32 = {value!r};"
    raise TypeError(f"constant {name}={value!r}")


def build(kernel: str, *, fmt=None, aligned=False, **consts) -> str:
    """WGSL text of shaders/<kernel>.wgsl specialised with ``consts`` (and weight format ``fmt``, a GGMLType: its
    float32 reader and that reader's shared pieces (formats.FORMATS) follow the kernel; aligned: the weights are in
    the aligned layout, and consts has WROWS, the rows of the bound weight buffer)."""
    parts = ["// generated by cera_web.kernels.build: " + kernel + (f" [{fmt.name}]" if fmt is not None else "")]
    if consts.pop("SGMAT", False):            # subgroup matrices (Chromium's experimental extension, f16 inputs)
        parts += ["enable f16;", "enable subgroups;", "enable chromium_experimental_subgroup_matrix;",
                  "diagnostic(off, chromium.subgroup_matrix_uniformity);"]
    if consts.get("SG"):
        parts.append("enable subgroups;")     # WebGPU's directive (the native device drops it: naga has no need)
    if "KV16" in consts:                      # KVT: the KV cache's element type
        kv16 = consts.pop("KV16")
        if kv16:
            parts.append("enable f16;")       # the KV cache in halves (the device's shader-f16 feature)
        parts.append(f"alias KVT = {'f16' if kv16 else 'f32'};")
    parts += [_const(k, v) for k, v in consts.items()]
    parts.append(_read("common.wgsl"))
    body = _expand(_read(kernel + ".wgsl"), kernel + ".wgsl", {kernel + ".wgsl"})
    if TEMPLATE_LINE.search(body):
        body = _render(kernel, body, consts)
    parts.append(body)   # WGSL declarations are order independent at module scope
    if "gate_act(" in body:
        parts.append(_read("gate_act.wgsl"))
    if fmt is not None:
        found = formats.reader(fmt, "f32", aligned)
        if found is None:
            raise UnsupportedModelError(f"tensor type {GGMLType(fmt).name} has no GPU kernel"
                                        + " in the aligned layout" * aligned + " yet")
        parts += [_read(piece) for piece in found.pieces]
        text = _read(found.file)
        if "fn xin(" not in body:    # block_dot reads the input through xin(): only kernels that define it get it
            text = text.split(MATMUL_ONLY)[0]
        parts.append(text)
    if "SG" in consts:   # a call of a subgroup builtin is an error without the extension, even in dead code
        parts.append(SHUFFLE_XOR if consts["SG"] else NO_SHUFFLE_XOR)
    return "\n".join(parts)


# shuffle_xor(v, m): v of the invocation whose subgroup_invocation_id is this one's XOR m (kernels built with SG);
# the stand-in for kernels built without SG is never called (their SG branches are off)
SHUFFLE_XOR = "fn shuffle_xor(v: vec4<f32>, m: u32) -> vec4<f32> { return subgroupShuffleXor(v, m); }"
NO_SHUFFLE_XOR = "fn shuffle_xor(v: vec4<f32>, m: u32) -> vec4<f32> { return v; }"


def matmul(fmt, K: int, N: int, *, norm=False, eps=0.0, accum=False, glu=False, last_only=False,
           ystride=None, yoff=0, tokens=8, lanes=32, rpt=1, wg=64, sg=False, gelu=False, aligned=False) -> str:
    """See matmul.wgsl. tokens: how many tokens share one pass over the weights (1 suits decode);
    lanes: threads per row (32 on GPUs, 1 on CPU adapters); rpt: rows per thread (with tokens 1 only);
    wg: threads per workgroup; sg: reduce with subgroup shuffles (needs subgroups of at least ``lanes``);
    gelu: GeGLU instead of SwiGLU (gate_act.wgsl); aligned: the weights are in the aligned layout (formats.Aligned).
    Dispatch with matmul_groups(N, lanes, rpt, wg)."""
    tb = 1 if last_only else tokens
    if rpt > 1 and tb > 1:
        raise ValueError("matmul: several rows per thread only for one token a pass")
    if wg % lanes or wg not in (64, 128, 256):
        raise ValueError(f"matmul: {wg} threads a workgroup with {lanes} lanes a row")
    return build("matmul", fmt=fmt, aligned=aligned, **_wrows(aligned, N, glu), K=K, N=N, NORM=norm, EPS=float(eps),
                 ACCUM=accum, GLU=glu, GELU=gelu,
                 LAST_ONLY=last_only, YSTRIDE=N if ystride is None else ystride, YOFF=yoff,
                 TB=tb, LANES=lanes, RPT=rpt, WG=wg, SG=bool(sg and lanes > 1))


TILED_UNROLL = 2    # k values per iteration of matmul_tiled's inner loop (1 or 2)


def tiled_tile(N: int, K: int, T: int, tuning: Tuning | None = None) -> tuple[int, int, int]:
    """Tile of matmul_tiled for N rows of K and passes of up to T tokens: (rows, tokens, K groups). Each thread
    computes 4 rows x 4 tokens, so small products have few threads: long rows split K over 4 thread groups, mid-sized
    N over 2 (measured on the H200 with SmolLM2's shapes, docs/bench/h200-gemm-*); products with at least 256 tiles
    of 64 x 64 take those (Llama-3.2-1B on the H200: 6,494 -> 8,595 tok/s prefill, docs/bench/h200-s3-call2-*). CERA_WEB_TILE="64,64,1" forces
    one of TILES for every product (benchmarks)."""
    forced = _tuning(tuning).tile
    if forced:
        return forced
    if -(-N // 64) * -(-T // 64) >= 256:     # enough 64x64 tiles to fill the GPU (1B-class shapes: +32% prefill)
        return (64, 64, 1)
    if K >= 1024:
        return (32, 32, 4)
    if N >= 1024:
        return (64, 32, 1)
    if N >= 768 or T <= 32:
        return (64, 32, 2)
    return (64, 64, 1)


def tiled_step(tile, glu: bool) -> int:
    """K per step of matmul_tiled: the largest that fits 16 KiB of workgroup memory, at most 2 items of weights
    and 2 of inputs a thread, and the K groups' reduction (WG / 2 vec4s) in the weights' space."""
    tr, tt, ks = tile
    wg = tr * tt // 16 * ks
    halves = 2 if glu else 1
    for kt in (32, 16, 8):
        mem = 16 * (halves * kt * tr // 4 + kt * tt // 4) + 4 * tt + 4 * wg
        if (mem <= 16384 and halves * tr * kt // 8 <= 2 * wg and tt * kt // 4 <= 2 * wg
                and halves * kt * tr // 4 >= wg // 2 and kt // ks >= 2):
            return kt
    raise ValueError(f"tile {tile} does not fit")


def tiled_groups(N: int, T: int, tile) -> tuple[int, int, int]:
    """Dispatch of matmul_tiled: one workgroup per tile."""
    return (-(-N // tile[0]), -(-T // tile[1]), 1)


TILES = [(64, 64, 1), (64, 32, 1), (64, 32, 2), (32, 32, 4)]   # the shapes tiled_tile picks (tests run each)


def matmul_tiled(fmt, K: int, N: int, *, norm=False, eps=0.0, accum=False, glu=False, ystride=None, yoff=0,
                 tile=(64, 64, 1), gelu=False, aligned=False) -> str:
    """See matmul_tiled.wgsl: the prefill form of matmul (K a multiple of 32); tile: (rows, tokens, K groups), one
    of TILES, dispatched with tiled_groups(N, T, tile); aligned: as in matmul()."""
    if tuple(tile) not in TILES:
        raise ValueError(f"tile {tile}: not one of {TILES}")
    tr, tt, ks = tile
    return build("matmul_tiled", fmt=fmt, aligned=aligned, **_wrows(aligned, N, glu), K=K, N=N, NORM=norm,
                 EPS=float(eps), ACCUM=accum, GLU=glu, GELU=gelu,
                 YSTRIDE=N if ystride is None else ystride, YOFF=yoff, TR=tr, TT=tt, KS=ks, U=TILED_UNROLL,
                 KT=tiled_step(tile, glu))


# --- subgroup matrices (prefill): half_rows + dequant_half + matmul_sgmat, where the browser's adapter offers them ---

SGMAT_GRID = (2, 2)             # subgroups of a matmul_sgmat workgroup: tokens x rows
SGMAT_SLAB_BYTES = 64 << 20     # the f16 copy of a weight's rows (dequant_half) at most: larger weights go in slabs
HALF_WG = 128                   # threads of half_rows and dequant_half


SGMAT_BLOCK = (4, 2)    # result matrices a subgroup: tokens x rows (GLU has as many more for the up rows); the
                        # fastest of five shapes on the H200


def sgmat_shape(config, glu: bool, tuning: Tuning | None = None) -> dict:
    """matmul_sgmat's tile for an adapter's subgroup matrix configuration (M, N, K, subgroup size): SGMAT_GRID
    subgroups of SGMAT_BLOCK result matrices (CERA_WEB_SGMAT_GRID / _BLOCK="tokens,rows": benchmarks); tile tokens /
    rows, threads and workgroup memory bytes."""
    sm, sn, sk, sg = config
    gt, gr = _tuning(tuning).sgmat_grid or SGMAT_GRID
    bt, br = _tuning(tuning).sgmat_block or SGMAT_BLOCK
    return {"tokens": gt * bt * sm, "rows": gr * br * sn, "threads": gt * gr * sg,
            "memory": 4 * gt * gr * (2 if glu else 1) * sm * sn, "bt": bt, "br": br, "gt": gt, "gr": gr}


EMULATED = (16, 8, 16, 32)      # CERA_WEB_SGMAT=emulate's configuration (M != N: a swapped index fails)


def sgmat_config(adapter, tuning: Tuning | None = None) -> tuple | None:
    """The subgroup matrix configuration prefill products use: with CERA_WEB_SGMAT=1 the adapter's
    (Adapter.subgroup_matrix), with CERA_WEB_SGMAT=emulate EMULATED on any adapter (tests), else none. Off by
    default: on the H200 in Chromium 156 the int8 path prefills faster (Llama-3.2-1B shape, 512 tokens: 15,653
    tok/s against 13,488 with the best shape of matmul_sgmat, docs/bench/h200-s18-sgmat4.jsonl)."""
    flag = _tuning(tuning).sgmat
    if flag == "emulate":
        return EMULATED
    return getattr(adapter, "subgroup_matrix", None) if flag == "1" else None


def sgmat_enabled(adapter, cols: int, glu: bool, tuning: Tuning | None = None) -> bool:
    """Whether a prefill product over rows of ``cols`` runs on subgroup matrices (half_rows, dequant_half,
    matmul_sgmat): where the device has an f16 x f16 -> f32 configuration (Adapter.subgroup_matrix: Chromium's
    chromium-experimental-subgroup-matrix, e.g. NVIDIA's tensor cores; wgpu-py and software adapters have none),
    cols is a multiple of 8 and of the configuration's K, and the tile fits the workgroup memory and threads; only
    with CERA_WEB_SGMAT=1 (sgmat_config: off by default, measured slower than the int8 path)."""
    config = sgmat_config(adapter, tuning)
    if config is None or cols % 8 or cols % config[2]:
        return False
    shape = sgmat_shape(config, glu, tuning)
    return shape["memory"] <= adapter.wg_memory and shape["threads"] <= adapter.max_threads


def pick_subgroup_matrix(configs, subgroup_min, subgroup_max) -> tuple | None:
    """The subgroup matrix configuration matmul_sgmat uses, as (M, N, K, subgroup size), from an adapter's
    GPUSubgroupMatrixConfigs (dicts of componentType, resultComponentType, M, N, K): f16 inputs with f32 results and
    M, N, K of 8, 16 or 32, the largest M x N; None where there is none or the adapter's subgroups vary in size
    (the kernel places its subgroups by a fixed size). The H200 in Chromium 156 offers 16 x 16 x 16 among others."""
    if not subgroup_min or subgroup_min != subgroup_max:
        return None
    fits = [(c["M"], c["N"], c["K"]) for c in configs
            if c["componentType"] == "f16" and c["resultComponentType"] == "f32"
            and all(c[d] in (8, 16, 32) for d in "MNK")]
    return (*max(fits, key=lambda f: (f[0] * f[1], -f[2])), subgroup_min) if fits else None


def sgmat_slabs(N: int, K: int, config, glu: bool, tuning: Tuning | None = None) -> list[tuple[int, int]]:
    """A weight's rows in slabs [(first row, rows)] whose f16 copies (gate and up rows with GLU, each rounded up to
    the tile's rows) fit SGMAT_SLAB_BYTES; at least one tile of rows a slab."""
    tr = sgmat_shape(config, glu, tuning)["rows"]
    per_tile = (2 if glu else 1) * tr * K * 2
    rows = max(1, SGMAT_SLAB_BYTES // per_tile) * tr
    return [(r0, min(rows, N - r0)) for r0 in range(0, N, rows)]


def half_rows(K: int, *, norm=False, eps=0.0) -> str:
    """See half_rows.wgsl: [T, K] f32 (RMS-normalised with NORM) -> f16; dispatch (T, 1, 1)."""
    return build("half_rows", K=K, NORM=norm, EPS=float(eps), WG=HALF_WG)


def dequant_half(fmt, K: int, N: int, r0: int, rows: int, rows_padded: int, *, glu=False, aligned=False) -> str:
    """See dequant_half.wgsl: rows r0 .. r0 + rows of a weight of N rows (2N stacked with GLU) -> f16, the up rows
    from rows_padded on. Dispatch with dequant_half_groups."""
    return build("dequant_half", fmt=fmt, aligned=aligned, **_wrows(aligned, N, glu), K=K, N=N, R0=r0, S=rows,
                 SP=rows_padded, GLU=glu, WG=HALF_WG)


def dequant_half_groups(K: int, rows: int, glu: bool) -> tuple[int, int, int]:
    return spread(-(-(2 if glu else 1) * rows * K // 8 // HALF_WG))


def sgmat_groups(N: int, T: int, config, glu: bool = False, tuning: Tuning | None = None) -> tuple[int, int, int]:
    """Dispatch of matmul_sgmat: one workgroup per tile of tokens x rows."""
    shape = sgmat_shape(config, glu, tuning)
    return (-(-N // shape["rows"]), -(-T // shape["tokens"]), 1)


def matmul_sgmat(K: int, N: int, *, config, accum=False, glu=False, gelu=False, ystride=None, yoff=0,
                 emulate=False, block=None, grid=SGMAT_GRID) -> str:
    """See matmul_sgmat.wgsl: N rows (a slab) of the product on subgroup matrices of ``config`` (M, N, K, subgroup
    size; Adapter.subgroup_matrix) from the f16 copies half_rows and dequant_half write; K a multiple of the
    configuration's K. Dispatch with sgmat_groups. emulate: plain WGSL in place of the subgroup matrix built-ins
    (tests, on any adapter); block: (tokens, rows) result matrices a subgroup (default SGMAT_BLOCK); grid: (tokens,
    rows) subgroups a workgroup."""
    sm, sn, sk, sg = config
    if K % sk:
        raise ValueError(f"matmul_sgmat: K = {K} is not a multiple of the configuration's {sk}")
    bt, br = block or SGMAT_BLOCK
    tr = grid[1] * br * sn
    return build("matmul_sgmat", SGMAT=not emulate, K=K, S=N, SP=-(-N // tr) * tr, ACCUM=accum, GLU=glu, GELU=gelu,
                 YSTRIDE=N if ystride is None else ystride, YOFF=yoff, SM=sm, SN=sn, SK=sk, SGSIZE=sg,
                 GT=grid[0], GR=grid[1], BT=bt, BR=br, EMULATE=emulate)


def sgmat_product(fmt, rows: int, cols: int, tokens: int, config, parts, x: str, gain: str, *, norm, eps, glu,
                  gelu, accum, ystride, yoff, aligned, emulate=False, tuning: Tuning | None = None) -> list:
    """choose_product's dispatches on subgroup matrices: the inputs to f16 once (half_rows, scratch "xh"), then per
    row range and slab of it the rows to f16 (dequant_half, scratch "wh") and their product (matmul_sgmat)."""
    shape = sgmat_shape(config, glu, tuning)
    t_pad = -(-tokens // shape["tokens"]) * shape["tokens"]
    out = [Dispatch("half_rows", (cols,), {"norm": norm, "eps": float(eps)}, (tokens, 1, 1), (x, "xh", "step", gain),
                    what="half", scratch=2 * t_pad * cols)]
    for i, (r0, n) in enumerate(parts):
        for s0, s in sgmat_slabs(n, cols, config, glu, tuning):
            sp = -(-s // shape["rows"]) * shape["rows"]
            out.append(Dispatch("dequant_half", (fmt, cols, n, s0, s, sp), {"glu": glu, "aligned": aligned},
                                dequant_half_groups(cols, s, glu), ("w", "wh"), i, what="half",
                                scratch=2 * (2 if glu else 1) * sp * cols))
            out.append(Dispatch("matmul_sgmat", (cols, s), {"config": config, "accum": accum, "glu": glu,
                                                            "gelu": gelu, "ystride": ystride, "yoff": yoff + r0 + s0,
                                                            "emulate": emulate, "block": (shape["bt"], shape["br"]),
                                                            "grid": (shape["gt"], shape["gr"])},
                                sgmat_groups(s, tokens, config, glu, tuning), ("wh", "xh", "y", "step"), i))
    return out


# --- int8 activations (prefill): quantize_rows.wgsl + matmul_i8.wgsl with dot4I8Packed ---

Q8_BLOCK_BYTES = 40          # an activation block of quantize_rows: d, s (f32) and 32 int8
I8_FILL = 256     # workgroups that fill the H200 (about two per SM) with matmul_i8's 64 x 64 tiles


def quantize_rows(K: int, *, norm=False, eps=0.0, wg: int | None = None) -> str:
    """See quantize_rows.wgsl: [T, K] f32 (RMS-normalised with NORM) -> 8-bit blocks of 32; dispatch (T, 1, 1).
    wg: threads a workgroup (default: the tuning's, QUANTIZE_WG)."""
    if K % 32:
        raise ValueError(f"quantize_rows: K = {K} is not a multiple of 32")
    wg = wg or _tuning(None).quantize_wg
    if wg not in (64, 128, 256):
        raise ValueError(f"quantize_rows: {wg} threads (64, 128 or 256)")
    return build("quantize_rows", K=K, NORM=norm, EPS=float(eps), WG=wg)


def i8_prefill_enabled(dev, tuning: Tuning | None = None) -> bool:
    """Whether prefill products run on 8-bit activations (quantize_rows + matmul_i8.wgsl) for the types that have
    it (a matmul_i8 reader in formats.FORMATS): by default on GPUs whose WGSL has dot4I8Packed (H200: the GEMMs at 25-34
    TFLOP/s against the float32 tiles' 16-18, 1B prefill +49%: docs/bench/h200-s7-call4-*). CERA_WEB_I8_PREFILL=0
    (or CERA_WEB_INT8=0, every int8 path) switches it off; CPU adapters keep matmul.wgsl, as for every prefill product,
    unless CERA_WEB_I8_PREFILL=1 (or CERA_WEB_INT8=1) forces it there too: tests."""
    t = _tuning(tuning)
    flag, every = t.i8_prefill, t.int8
    if flag == "0" or every == "0" or not getattr(dev, "int8_dot", False):
        return False
    return flag == "1" or every == "1" or not dev.is_cpu


def matmul_i8_rows(N: int, T: int, tuning: Tuning | None = None) -> int:
    """Rows of matmul_i8's workgroup tile (64 or 32) for N rows and passes of up to T tokens: 32 where 64-row tiles
    would give fewer than I8_FILL workgroups (SmolLM2's 576-row products), else 64; CERA_WEB_I8_TR=64|32 forces one
    (benchmarks)."""
    forced = _tuning(tuning).i8_tr
    if forced:
        return forced
    return 64 if matmul_i8_tiles(N, T, 64) >= I8_FILL else 32


def matmul_i8_tile(N: int, T: int, glu: bool = False, tuning: Tuning | None = None) -> tuple[int, bool]:
    """(rows, pair) of matmul_i8 for N rows and passes of up to T tokens. A plain product whose 64-row tiles number
    I8_FILL or more runs in pairs (PAIR: 8 rows x 4 tokens a thread, 2 x 32-row tiles: the same 64 x 64 tile as
    64 rows without PAIR, on half the threads, each activation read feeding twice the rows); every other product
    takes matmul_i8_rows. CERA_WEB_I8_PAIR=0|1 forces pairs off or on for plain products, CERA_WEB_I8_TR the rows
    (benchmarks)."""
    t = _tuning(tuning)
    forced = t.i8_pair
    if glu or forced is False or (forced is None and matmul_i8_tiles(N, T, 64) < I8_FILL):
        return matmul_i8_rows(N, T, t), False
    return (t.i8_tr if forced and t.i8_tr else 32), True


def matmul_i8_tiles(N: int, T: int, rows: int, pair: bool = False) -> int:
    """Workgroup tiles of a matmul_i8 product (matmul_i8_groups without the K parts)."""
    gx, gy, _ = matmul_i8_groups(N, T, rows, pair=pair)
    return gx * gy


def matmul_i8(fmt, K: int, N: int, *, accum=False, glu=False, ystride=None, yoff=0, gelu=False, aligned=False,
              kb: int | None = None, rows: int = 64, pair: bool = False, kgroups: int = 1, ksplit: int = 1,
              tmax: int = 0) -> str:
    """See matmul_i8.wgsl: the prefill product on quantize_rows' blocks (K a multiple of the type's block), weights in
    the file's layout or the aligned one; rows: the workgroup tile's (64 or 32; twice that with pair, 8 rows a thread:
    matmul_i8_tile); kgroups: K groups sharing a tile (matmul_i8_kgroups); ksplit > 1: K in that many parts written
    [ksplit, tmax, N] for sum_parts (matmul_i8_split; plain products: no GLU, ACCUM or column offset); dispatch
    matmul_i8_groups(N, T, rows, ksplit, pair). kb: blocks a K step (default: the tuning's, I8_KB)."""
    kb = kb or _tuning(None).i8_kb
    found = formats.reader(fmt, "matmul_i8", aligned)
    two = 2 if glu or pair else 1
    fits = (rows in (32, 64) and kb >= 1 and two * kb <= 4 and 64 * kb <= 4 * rows   # an item a thread
            and kgroups in (1, 2, 4) and (kgroups == 1 or two * kb >= 2) and not (glu and pair))
    split_ok = ksplit == 1 or (ksplit > 1 and tmax >= 1 and not (glu or accum or yoff) and ystride in (None, N))
    if found is None or K % GGML_BLOCK[fmt][0] or not fits or not split_ok:
        raise ValueError(f"matmul_i8: {GGMLType(fmt).name} rows of {K}, {kb} blocks a step, tiles of {rows} rows (a "
                         f"type with a matmul_i8 reader, K a multiple of its block, 64 or 32 rows, at most one weight and one "
                         f"activation block a thread a step: kb <= 2 with GLU, pairs or 32 rows, <= 4 otherwise; "
                         f"pairs without GLU; 1, 2 or 4 K groups, which need kb >= 2 without GLU or pairs; K parts: "
                         f"plain products, with tmax)")
    text = build("matmul_i8", K=K, N=N, ACCUM=accum, GLU=glu, GELU=gelu, PAIR=pair,
                 YSTRIDE=N if ystride is None else ystride, YOFF=yoff, TR=rows, KB=kb, KG=kgroups, KS=ksplit,
                 TMAX=max(tmax, 1), **_wrows(aligned, N, glu))
    head, _, rest = text.partition("\n")     # WebGPU recommends the directive where the language feature is used
    return "\n".join([head, REQUIRES_I8, rest, *(_read(f) for f in found.files())])


def matmul_i8_memory(rows: int, kgroups: int = 1, glu: bool = False, kb: int | None = None,
                     pair: bool = False) -> int:
    """Bytes of workgroup memory of a matmul_i8 tile (see its staging arrays; kb: default the tuning's)."""
    kb = kb or _tuning(None).i8_kb
    r4, halves = rows // 4, 2 if glu or pair else 1
    return 16 * kgroups * (halves * kb * r4 * (8 + 2 + 1) + kb * 16 * (8 + 2))


I8_KG_FILL = 256   # tiles below which a product's K is shared by more thread groups (as I8_FILL)
I8_KG_MAX = 2      # groups then (H200, SmolLM2 prefill: 1 group 55.3k tok/s, 2 56.5k, 4 52.9k; h200-s8-call3)


def matmul_i8_kgroups(N: int, T: int, rows: int, glu: bool, wg_memory: int, max_threads: int,
                      pair: bool = False, tuning: Tuning | None = None) -> int:
    """K groups of a matmul_i8 tile (more threads on a product with few tiles, which alone leave the GPU's cores
    waiting on latencies: SmolLM2's 576-row products): 1 for GLU products and where rows x 64-token tiles number
    I8_KG_FILL or more, else I8_KG_MAX or fewer as the device's workgroup size (rows * 4 * groups threads) and
    memory allow. CERA_WEB_I8_KG=1|2|4 forces it where it fits (benchmarks)."""
    t = _tuning(tuning)
    if t.i8_kg:
        want = t.i8_kg
    elif glu or matmul_i8_tiles(N, T, rows, pair) >= I8_KG_FILL:
        return 1
    else:
        want = I8_KG_MAX
    while want > 1 and (rows * 4 * want > max_threads
                        or matmul_i8_memory(rows, want, glu, t.i8_kb, pair) > wg_memory):
        want //= 2
    return want


def matmul_i8_groups(N: int, T: int, rows: int = 64, ksplit: int = 1, pair: bool = False) -> tuple[int, int, int]:
    """Dispatch of matmul_i8: a workgroup per tile of rows (2 rows with pair) x 64 tokens and K part."""
    return (-(-N // (2 * rows if pair else rows)), -(-T // 64), ksplit)


I8_SPLIT_TILES = 192   # tiles below which a long product's K goes in parts (about the SMs of a large GPU: 132)
I8_SPLIT_BLOCKS = 32   # 32-blocks a row from which it does (8 a part at 4 parts)


def matmul_i8_split(N: int, T: int, K: int, rows: int, glu: bool = False, pair: bool = False,
                    tuning: Tuning | None = None) -> int:
    """K parts of a matmul_i8 product of N rows x K for passes of up to T tokens: 4 where its tiles number under
    I8_SPLIT_TILES (about one workgroup an SM or fewer) and rows have I8_SPLIT_BLOCKS blocks or more, else 1; never
    GLU products (the gate needs whole sums). Only SmolLM2's down projection among the benchmark shapes (144 tiles,
    48 blocks): its 512-token product 73 -> 59 us a layer (H200, h200-s8-call1/final profiles); products with more
    tiles lost (1B's 256: 15.4k -> 15.2k tok/s prefill, call 1). CERA_WEB_I8_SPLIT=1|2|4|8 forces (benchmarks)."""
    forced = _tuning(tuning).i8_split
    if glu:
        return 1
    if forced:
        return forced
    return 4 if matmul_i8_tiles(N, T, rows, pair) < I8_SPLIT_TILES and K // 32 >= I8_SPLIT_BLOCKS else 1


def sum_parts(N: int, ksplit: int, tmax: int, *, ystride: int | None = None, yoff: int = 0, accum: bool = False) -> str:
    """See sum_parts.wgsl: a split matmul_i8's K parts added into its output."""
    return build("sum_parts", N=N, KS=ksplit, TMAX=tmax, YSTRIDE=N if ystride is None else ystride, YOFF=yoff,
                 ACCUM=accum)


def sum_parts_groups(N: int, T: int) -> tuple[int, int, int]:
    return (-(-N // 256), T, 1)


def aligned_enabled(tuning: Tuning | None = None) -> bool:
    """Whether the types with an aligned layout (formats.ALIGNED_TYPES) go to the GPU in it (the default;
    CERA_WEB_ALIGNED=0 keeps the file's layout, for benchmarks)."""
    return _tuning(tuning).aligned


def _wrows(aligned: bool, N: int, glu: bool) -> dict:
    """The aligned layout's WROWS constant (rows of the bound weight buffer: 2N with GLU's stacked gate and up)."""
    return {"WROWS": 2 * N if glu else N} if aligned else {}


def repack(fmt) -> str:
    """See repack.wgsl: file blocks of a type with an aligned layout (formats.ALIGNED_TYPES) into that layout.
    Dispatch with spread(repack_groups(fmt, blocks))."""
    if fmt not in formats.ALIGNED_TYPES:
        raise ValueError(f"repack: {GGMLType(fmt).name} has no aligned layout")
    found = formats.FORMATS[fmt].aligned.regions
    regions = list(found) + [(0, 4)] * (3 - len(found))     # unused ones: never read
    return build("repack", B=GGML_BLOCK[fmt][1], NR=len(found),
                 **{f"{k}{i}": v for i, (o, z) in enumerate(regions) for k, v in (("O", o), ("Z", z))})


def repack_groups(fmt, blocks: int) -> int:
    """Workgroups of repack.wgsl for a slab of ``blocks`` blocks (one thread an output word)."""
    words = sum(-(-blocks * z // 4) for _, z in formats.FORMATS[fmt].aligned.regions)
    return max(1, -(-words // 256))


def block_elems(fmt) -> int:
    """Elements per BLOCK of a format's block_dot (see the format files)."""
    match = re.search(r"const BLOCK: u32 = (\d+)u;", _read(formats.reader(fmt, "f32").file))
    return int(match.group(1))


def lanes_for(blocks_per_row: int, cpu: bool) -> int:
    """Threads per matmul row: 1 on CPU adapters; on GPUs up to 32, but no more than the row has blocks."""
    if cpu:
        return 1
    lanes = 32
    while lanes > 4 and lanes > blocks_per_row:
        lanes //= 2
    return lanes


def matmul_groups(N: int, lanes: int = 32, rpt: int = 1, wg: int = 64) -> int:
    """Workgroups of matmul.wgsl for N rows (pass through spread())."""
    return -(-N // (wg // lanes * rpt))


# CPU adapters (lavapipe, SwiftShader: one thread a row, every pass of any length): two rows a thread, so each input
# load serves both. Software rasterizers load buffers lane by lane, which makes the input loads (32 a 32-weight block,
# against 5-9 words of weights) the cost of a product; lavapipe, session 11 (bench_kernels --lanes 1 --variants):
# Q8_0 49152x576 (SmolLM2's LM head) 154 -> 107 ms, Q4_1 1536x576 x 16 tokens 81 -> 49 ms; 3 or 4 rows were slower
# (more live registers than AVX2 has).
CPU_RPT = 2


def matvec_shape(blocks_per_row: int, T: int, cpu: bool, subgroup_size: int | None,
                 tuning: Tuning | None = None) -> dict:
    """kwargs of matmul() for a product of T tokens a pass over rows of blocks_per_row blocks on this adapter:
    lanes, tokens, rpt, wg, sg (subgroup_size: the adapter's smallest subgroup, None without subgroups)."""
    lanes = lanes_for(blocks_per_row, cpu)
    shape = {"lanes": lanes, "tokens": 1 if cpu else min(T, 8), "rpt": CPU_RPT if cpu else 1, "wg": 64, "sg": False}
    if cpu:
        return shape
    cfg = _tuning(tuning).matvec_config()
    while lanes > cfg["lanes"]:
        lanes //= 2
    shape["lanes"] = lanes
    shape["sg"] = bool(cfg["sg"]) and subgroup_size is not None and subgroup_size >= lanes
    shape["wg"] = max(cfg["wg"], lanes)
    if shape["tokens"] == 1:
        shape["rpt"] = cfg["rpt"]
    return shape


# --- matrix-vector products with 8-bit activations (matvec_q8.wgsl; issue 13) ---

# the directive of the kernels on 8-bit activations (types with a matvec_q8 / matmul_i8 reader, formats.py)
REQUIRES_I8 = "requires packed_4x8_integer_dot_product;"

def matvec_q8_lanes(rows: int | None, wg: int = 256, block_items: int | None = None) -> int:
    """Lanes a row for N = rows outputs: the fewest (8, 16 or 32) that still give at least 256 workgroups (each
    workgroup quantizes the input once, so fewer, fuller workgroups cost less, until the GPU runs short of them).
    H200, session 4 call 1 (bench_kernels --variants8): 16384x2048 best at 8 lanes (Q4_1 929 GB/s against 849 at 16,
    783 at 32), 2048x8192 and 2048x2048 at 32 (Q4_1 499 against 465 / 342). None: 16.
    block_items: the row's items when an item is a whole 32-weight block (the aligned layout): rows of 256 or more
    take at most 16 lanes (H200, session 7 call 2, 2048x8192: Q4_1 618 GB/s at 16 lanes against 586 at 32, Q8_0 937
    against 877; 2048x2048 stays best at 32)."""
    if not rows:
        return 16
    lanes = 8
    while lanes < 32 and rows * lanes // wg < 256:
        lanes *= 2
    if block_items is not None and block_items >= 256:
        lanes = min(lanes, 16)
    return lanes


def int8_enabled(dev, tuning: Tuning | None = None) -> bool:
    """Whether decode products use matvec_q8 on this device: it needs WGSL's packed_4x8_integer_dot_product
    (dev.int8_dot) and a GPU; CERA_WEB_INT8=0 switches it off, CERA_WEB_INT8=1 forces it on a CPU adapter too."""
    flag = _tuning(tuning).int8
    if flag == "0" or not getattr(dev, "int8_dot", False):
        return False
    return flag == "1" or not dev.is_cpu


# lanes a row at most of matvec_q8 on a split decode attention's partial results (XSPLIT): every workgroup combines
# the ranges for the whole input, so fewer workgroups (8 lanes: 32 rows each) do that less often. H200, session 19
# (docs/bench/h200-s19-long-lanes.jsonl), decode after 3,584 tokens: 1B 729 -> 752 tok/s, 1.5B 448 -> 457 (4 lanes:
# 738, 452); after 16 tokens: 976 -> 970, 567 -> 562
XSPLIT_LANES = 8


def matvec_q8_memory(K: int, lanes: int, wg: int, sg: bool) -> int:
    """Bytes of workgroup memory matvec_q8 uses for rows of K."""
    return K + 8 * (K // 32) + 16 * (1 if sg and lanes > 1 else wg)


def matvec_q8_shape(fmt, K: int, cpu: bool, subgroup_size: int | None, wg_memory: int = 16384,
                    rows: int | None = None, aligned: bool = False, tuning: Tuning | None = None,
                    split_input: bool = False) -> dict | None:
    """kwargs of matvec_q8() (lanes, wg, sg) for rows of K of type fmt on this adapter (rows: the product's output
    count, which picks the lanes; split_input: the input is a split attention's partial results, at most
    XSPLIT_LANES lanes), or None where the int8 kernel does not apply (another type, K not a multiple of the format's
    block, the quantized row past wg_memory bytes)."""
    if formats.reader(fmt, "matvec_q8") is None or K % GGML_BLOCK[fmt][0]:
        return None
    if cpu:
        shape = {"lanes": 1, "wg": 64, "sg": False}
    else:
        cfg = _tuning(tuning).matvec8_config()
        layout = formats.FORMATS[fmt].aligned
        whole = aligned and layout is not None and layout.block_items     # an item a block (Q6_K's: 64 weights)
        lanes = matvec_q8_lanes(rows, cfg["wg"], K // 32 if whole else None)
        lanes, wg = cfg["lanes"] or (min(lanes, XSPLIT_LANES) if split_input else lanes), cfg["wg"]
        if lanes & (lanes - 1) or not 1 <= lanes <= 32 or wg not in (64, 128, 256) or wg < lanes:
            raise ValueError(f"CERA_WEB_MATVEC8: lanes={lanes} (a power of two up to 32), wg={wg} (64, 128, 256)")
        shape = {"lanes": lanes, "wg": wg,
                 "sg": bool(cfg["sg"]) and subgroup_size is not None and subgroup_size >= lanes}
    if matvec_q8_memory(K, **shape) > wg_memory:
        return None
    return shape


def matvec_q8(fmt, K: int, N: int, *, norm=False, eps=0.0, accum=False, glu=False, last_only=False,
              ystride=None, yoff=0, lanes=16, wg=256, sg=False, gelu=False, xsplit=(1, 32), aligned=False,
              tokens=1) -> str:
    """See matvec_q8.wgsl: matmul()'s product for passes of one token (and LAST_ONLY), with the input quantized to
    8-bit blocks and dot4I8Packed. xsplit: (SPLIT, head_dim) of a split decode attention whose partial results are the
    input (attention_split()); aligned: the weights are in the aligned layout (formats.Aligned); tokens: a verify
    pass's tokens, each computed by workgroups of its own as a one-token pass computes it. Dispatch with
    spread(matvec_q8_groups(N, lanes, wg, tokens))."""
    found = formats.reader(fmt, "matvec_q8", aligned)
    if found is None:
        raise ValueError(f"matvec_q8: no int8 kernel for {GGMLType(fmt).name}" + " in the aligned layout" * aligned)
    if K % 32 or wg % lanes or lanes & (lanes - 1) or xsplit[1] % 32 or K % xsplit[1] or tokens < 1 or (
            last_only and tokens > 1):
        raise ValueError(f"matvec_q8: K={K}, {lanes} lanes, {wg} threads, split input {xsplit}, {tokens} tokens"
                         + " with LAST_ONLY" * last_only)
    sg = bool(sg and lanes > 1)
    text = build("matvec_q8", K=K, N=N, NORM=norm, EPS=float(eps), ACCUM=accum, GLU=glu, GELU=gelu,
                 LAST_ONLY=last_only, YSTRIDE=N if ystride is None else ystride, YOFF=yoff, LANES=lanes, WG=wg,
                 SG=sg, PARTIAL=1 if sg else wg, XSPLIT=xsplit[0], XHD=xsplit[1], TOKENS=tokens,
                 **_wrows(aligned, N, glu))
    head, _, rest = text.partition("\n")      # the directive goes before any declaration
    return "\n".join([head, REQUIRES_I8, rest, *(_read(f) for f in found.files())])


def matvec_q8_groups(N: int, lanes: int = 16, wg: int = 256, tokens: int = 1) -> int:
    """Workgroups of matvec_q8.wgsl for N rows and `tokens` tokens side by side (pass through spread())."""
    return tokens * -(-N // (wg // lanes))


def rope_store(q_heads: int, kv_heads: int, head_dim: int, neox: bool, qk_norm: bool = False,
               eps: float = 1e-6, kv16: bool = False) -> str:
    """See rope_store.wgsl; kv16: the KV cache holds f16 (needs the device's shader-f16; Engine.load kv_cache)."""
    return build("rope_store", QH=q_heads, KVH=kv_heads, HD=head_dim, NEOX=neox, QK_NORM=qk_norm, EPS=float(eps),
                 KV16=kv16)


def decode_heads(q_heads: int, kv_heads: int, head_dim: int) -> int:
    """Query heads a workgroup of attention_decode.wgsl computes together (GB): a group's G = q_heads / kv_heads heads
    in the fewest blocks of at most 4 (a key's scores of a block are a vec4), as even as they come (6: 3 + 3, 7: 4 +
    3); 1 for heads over 256 wide (their queries would crowd out the scores' workgroup memory)."""
    group = q_heads // kv_heads
    if head_dim > 256:
        return 1
    blocks = -(-group // 4)
    return -(-group // blocks)


def attention_decode(q_heads: int, kv_heads: int, head_dim: int, neox: bool, scale: float, qk_norm: bool = False,
                     eps: float = 1e-6, window: int = 0, kv16: bool = False, split: int = 1, mode: str = "step",
                     keys_a_range: int | None = None) -> str:
    """See attention_decode.wgsl. Keys are scored as many a pass as fit 16 KiB of workgroup memory beside the block's
    queries (decode_heads), at most 1024 (fewer passes, fewer barriers: 677 -> 701 tok/s on the H200,
    docs/bench/h200-s2-keys*.json). kv16: the KV cache holds f16. split > 1: up to that many key ranges of at least
    keys_a_range keys (attention_range), partial results for matvec_q8's XSPLIT. mode: "step" (a decode step: store
    and attend), or for a pass of T tokens "store" then "attend" (attention_decode_groups)."""
    gb = decode_heads(q_heads, kv_heads, head_dim)
    free = 16384 - 4 * (gb + 2) * head_dim - 16 * 256      # bytes beside q, k, v and the reductions' scratch
    keys = 1 << max(6, min(10, (free // 16).bit_length() - 1))    # a key's scores: a vec4
    return build("attention_decode", QH=q_heads, KVH=kv_heads, HD=head_dim, NEOX=neox,
                 QK_NORM=qk_norm, EPS=float(eps), SCALE=float(scale), KEYS=keys, WINDOW=window, KV16=kv16,
                 SPLIT=split, RANGE=keys_a_range or ATTENTION_RANGE, MODE=("step", "store", "attend").index(mode),
                 GB=gb)


def attention_decode_groups(q_heads: int, kv_heads: int, head_dim: int, split: int = 1, tokens: int = 1,
                            mode: str = "step") -> tuple:
    """attention_decode.wgsl's dispatch: a workgroup per block of query heads (decode_heads), key range and token;
    "store": per key/value head and token."""
    if mode == "store":
        return (kv_heads, 1, tokens)
    blocks = -(-(q_heads // kv_heads) // decode_heads(q_heads, kv_heads, head_dim))
    return (kv_heads * blocks, split, tokens)


ATTENTION_RANGE = 256      # the fewest keys a range of a split decode attention takes
SPLIT_KEYS = 4096          # keys past which the ranges of a split decode attention lengthen


def attention_range(tuning: Tuning | None = None) -> int:
    """The fewest keys a range of a split decode attention takes: ATTENTION_RANGE, or CERA_WEB_ATTN_RANGE."""
    return _tuning(tuning).attn_range or ATTENTION_RANGE


def attention_split(context: int, head_dim: int, tuning: Tuning | None = None) -> int:
    """Key ranges (at most) of a split decode attention whose output feeds matvec_q8: one per attention_range()
    positions of the context, at most SPLIT_KEYS / that (16 of 256 keys: the ranges lengthen past 4,096 keys); 1 (no
    split) where the head is not a multiple of 32 wide. Each step uses as many ranges as its keys need, so short
    contexts run one workgroup a head as without a split. CERA_WEB_ATTN_SPLIT=N forces at most N (1: off;
    benchmarks)."""
    forced = _tuning(tuning).attn_split
    if forced:
        split = forced
    else:
        keys = attention_range(tuning)
        split = min(SPLIT_KEYS // keys, -(-context // keys))
    return split if head_dim % 32 == 0 else 1


def embed(fmt, K: int, N: int, *, row0: int = 0, vocab: int | None = None, scale: float = 1.0,
          aligned: bool = False) -> str:
    """See embed.wgsl: rows row0 .. row0 + N of a table of ``vocab`` rows (default: the whole table, N), times
    ``scale`` (Gemma: sqrt(K)); aligned: the table is in the aligned layout."""
    return build("embed", fmt=fmt, aligned=aligned, **_wrows(aligned, N, False), K=K, N=N, ROW0=row0,
                 VOCAB=N if vocab is None else vocab, SCALE=float(scale))


def rmsnorm(K: int, eps: float, rows_per_token: int = 1, accum: bool = False) -> str:
    """See rmsnorm.wgsl; accum: Y += the normalised rows (a post-norm residual add, Gemma)."""
    return build("rmsnorm", K=K, RPT=rows_per_token, EPS=float(eps), ACCUM=accum)


def rope(heads: int, head_dim: int, neox: bool, at_pos: bool) -> str:
    return build("rope", HEADS=heads, HD=head_dim, NEOX=neox, AT_POS=at_pos)


def attention_tile(head_dim: int) -> tuple[int, int]:
    """(ROWS, BK) of attention.wgsl: query rows a workgroup (one thread per vec4 of each row's output, at most 256
    threads) and keys a tile: as many as fit 16 KiB of workgroup memory beside the rows' queries and scores, at most
    ROWS so that each thread fetches at most one vec4 of the tile's keys and one of its values."""
    d4 = head_dim // 4
    rows = 256 // d4
    words = 4096 - rows * (d4 * 4 + 1)            # f32 words left beside the queries (and one per row's scores)
    return rows, min(rows, words // ((2 * d4 + 1) * 4 + rows))   # a key: padded key row, value row, a score a row


def attention(heads: int, kv_heads: int, head_dim: int, scale: float, window: int = 0, kv16: bool = False) -> str:
    """See attention.wgsl; window: keys limited to the last ``window`` positions (sliding-window layers; 0: all);
    kv16: the KV cache holds f16."""
    rows, keys = attention_tile(head_dim)
    return build("attention", HEADS=heads, KV_HEADS=kv_heads, HD=head_dim, SCALE=float(scale), ROWS=rows, BK=keys,
                 WINDOW=window, KV16=kv16)


def attention_groups(heads: int, kv_heads: int, head_dim: int, T: int) -> tuple[int, int, int]:
    """Dispatch of attention.wgsl for passes of up to T tokens: per KV head, the T * heads / kv_heads query rows."""
    rows = attention_tile(head_dim)[0]
    return (kv_heads, -(-T * (heads // kv_heads) // rows), 1)


ATTENTION_TILED_MEMORY = 16 * (32 * 16 * 3)   # bytes of attention_tiled.wgsl's workgroup memory, 32 rows of 64 (24 KiB)
ATTENTION_TILED_SG_MEMORY = 32768              # and with subgroups: 64 rows of 64, or 32 rows of 128


def attention_tiled_fits(head_dim: int, wg_memory: int, cpu: bool = False, tuning: Tuning | None = None) -> bool:
    """Whether attention_tiled.wgsl serves this head size on a device with wg_memory bytes of workgroup memory
    without subgroups (heads of 64 in 32 rows: 24 KiB), on GPUs (cpu: a software adapter keeps attention.wgsl).
    CERA_WEB_ATTN_TILED=0 keeps attention.wgsl (benchmarks); =1 takes the tiled kernel on software adapters too
    (tests)."""
    return attention_tiled_rows(head_dim, wg_memory, cpu, tuning=tuning) > 0


def attention_tiled_rows(head_dim: int, wg_memory: int, cpu: bool = False, subgroup_size: int | None = None,
                         tuning: Tuning | None = None) -> int:
    """Query rows a workgroup of attention_tiled.wgsl for heads of head_dim on this device (0: attention.wgsl): for
    heads of 64, 64 on GPUs with subgroups of 8 or more and 32 KiB of workgroup memory, else 32 (24 KiB, no
    subgroups); for heads of 128, 32 (subgroups of 8+, 32 KiB); 0 for other head sizes, smaller devices, software
    adapters. CERA_WEB_ATTN_TILED=0 keeps attention.wgsl, =1 takes the tiled kernel on software adapters too (tests),
    =32 or =64 forces that many rows where they fit, on any adapter (tests, benchmarks)."""
    flag = _tuning(tuning).attn_tiled
    if head_dim not in (64, 128) or flag == "0" or (cpu and not flag):
        return 0
    shuffles = wg_memory >= ATTENTION_TILED_SG_MEMORY and subgroup_size is not None and subgroup_size >= 8
    if head_dim == 128:
        return 32 if shuffles and flag != "64" else 0
    if shuffles and flag != "32":
        return 64
    return 32 if wg_memory >= ATTENTION_TILED_MEMORY and flag != "64" else 0


# (head size, rows a workgroup) -> (keys a tile, subgroup shuffles) of attention_tiled.wgsl's three tile shapes
ATTENTION_TILES = {(64, 32): (32, False), (64, 64): (32, True), (128, 32): (16, True)}


def attention_tiled(heads: int, kv_heads: int, head_dim: int, scale: float, window: int = 0, kv16: bool = False,
                    split: int = 1, tmax: int = 0, rows: int = 32) -> str:
    """See attention_tiled.wgsl: attention.wgsl's result in register tiles of `rows` query rows (attention_tiled_rows
    picks them) by 32 keys (16 for heads of 128); with split > 1 it writes parts for attention_combine (passes of up
    to tmax tokens)."""
    tile = ATTENTION_TILES.get((head_dim, rows))
    if tile is None or heads % kv_heads or split < 1 or (split > 1 and tmax < 1):
        raise ValueError(f"attention_tiled: heads of 64 in 32 or 64 rows, or of 128 in 32 (got {head_dim}, {rows}), "
                         f"{heads} heads on {kv_heads} KV heads, split {split} (>= 1; a split needs tmax)")
    keys, sg = tile
    return build("attention_tiled", HEADS=heads, KV_HEADS=kv_heads, HD=head_dim, BR=rows, BC=keys, SG=sg,
                 RT=rows // 16, KT=keys // 8, OT=head_dim // 32, SCALE=float(scale), WINDOW=window, KV16=kv16,
                 SPLIT=split, TMAX=max(tmax, 1))


def attention_tiled_groups(heads: int, kv_heads: int, T: int, split: int = 1, rows: int = 32) -> tuple[int, int, int]:
    """Dispatch of attention_tiled(64).wgsl for passes of up to T tokens: per KV head, `rows` query rows a workgroup,
    split workgroups a row block."""
    return (kv_heads, -(-T * (heads // kv_heads) // rows), split)


ATTN_FILL = 256    # workgroups below which a prefill attention is split (H200: SmolLM2's 144 gain from 2 splits)


def attention_prefill_split(heads: int, kv_heads: int, T: int, rows: int = 32, tuning: Tuning | None = None) -> int:
    """Splits of attention_tiled's key tiles for passes of up to T tokens (rows: the kernel's rows a workgroup,
    attention_tiled_rows): 1, or the fewest of 2, 4, 8 that give
    ATTN_FILL workgroups (SmolLM2's 3 KV heads give 144 unsplit at T = 512, about one 128-thread workgroup an SM of
    an H200: 2 splits took its 512-token attention from 70 to 58 us, 4 to 63; 1B's 512 workgroups lost with any
    split; docs/bench/h200-s8-call2-*). CERA_WEB_PREFILL_ATTN_SPLIT=N forces N (benchmarks; CERA_WEB_ATTN_SPLIT is
    the decode attention's)."""
    forced = _tuning(tuning).prefill_attn_split
    if forced:
        return forced
    groups = kv_heads * -(-T * (heads // kv_heads) // rows)
    split = 1
    while split < 8 and groups * split < ATTN_FILL:
        split *= 2
    return split


def attention_combine(heads: int, head_dim: int, split: int, tmax: int) -> str:
    """See attention_combine.wgsl: merges attention_tiled's split parts."""
    return build("attention_combine", HEADS=heads, D4=head_dim // 4, SPLIT=split, TMAX=tmax)


def attention_combine_groups(heads: int, head_dim: int, T: int) -> tuple[int, int, int]:
    return (-(-heads * head_dim // 4 // 64), T, 1)


def swiglu(F: int, gelu: bool = False) -> str:
    return build("swiglu", F=F, GELU=gelu)


def argmax(V: int, pairs: bool = False, rows: bool = False) -> str:
    """See argmax.wgsl: over V logits, or (pairs) over V (value, index) pairs from argmax_parts, or (rows) over
    each row of [tokens, V] logits (dispatch (rows, 1, 1))."""
    return build("argmax", V=V, PAIRS=pairs, ROWS=rows)


ARGMAX_SLICE = 2048     # logits a workgroup of argmax_parts


def argmax_parts_count(V: int, tuning: Tuning | None = None) -> int:
    """Workgroups of argmax_parts for a vocabulary of V (1: the single-workgroup argmax is used alone). Two stages
    from 8k entries; CERA_WEB_ARGMAX_PARTS=1 forces one (benchmarks)."""
    if V <= 8192 or _tuning(tuning).argmax_one:
        return 1
    return -(-V // ARGMAX_SLICE)


def argmax_parts(V: int) -> str:
    """See argmax_parts.wgsl; dispatch (argmax_parts_count(V), 1, 1)."""
    return build("argmax_parts", V=V, SLICE=ARGMAX_SLICE)


def spread(groups: int, max_per_dim: int = 65535) -> tuple[int, int, int]:
    """Workgroup counts (x, y, 1) covering ``groups`` flat workgroups (see flat_group in common.wgsl)."""
    if groups <= max_per_dim:
        return (groups, 1, 1)
    y = -(-groups // max_per_dim)
    return (-(-groups // y), y, 1)


# --- LFM2 (its conv blocks in cera_web/models/transformer.py) ---

MAX_L_CACHE = 16    # the longest short convolution (LFM2 shortconv.l_cache) conv1d.wgsl is built for


def conv1d(H: int, L: int) -> str:
    """LFM2 short convolution over a pass of tokens with its rolling state (see shaders/conv1d.wgsl)."""
    if not 2 <= L <= MAX_L_CACHE:
        raise UnsupportedModelError(f"a short convolution of length {L} is not supported (2..{MAX_L_CACHE})")
    return build("conv1d", H=H, L=L)


# --- which kernel computes a product: choose_product ---

@dataclass(frozen=True)
class Adapter:
    """What the kernel choices need to know of a device: a software (CPU) adapter or a GPU, WGSL's dot4I8Packed
    (int8_dot), the smallest subgroup (None without subgroups), workgroup memory bytes and threads a workgroup, and
    the f16 subgroup matrix configuration (M, N, K, subgroup size) where the device has one (sgmat_enabled)."""
    is_cpu: bool
    int8_dot: bool = False
    subgroup_size: int | None = None
    wg_memory: int = 16384
    max_threads: int = 256
    subgroup_matrix: tuple | None = None

    @classmethod
    def of(cls, dev) -> "Adapter":
        limits = dev.limits
        return cls(is_cpu=dev.is_cpu, int8_dot=bool(getattr(dev, "int8_dot", False)), subgroup_size=dev.subgroup_size,
                   wg_memory=int(limits.get("max-compute-workgroup-storage-size", 16384)),
                   max_threads=min(int(limits.get("max-compute-invocations-per-workgroup", 256)),
                                   int(limits.get("max-compute-workgroup-size-x", 256))),
                   subgroup_matrix=getattr(dev, "subgroup_matrix", None))


@dataclass
class Dispatch:
    """One dispatch of a product: the kernels function that builds its WGSL (``kernel``, called with args and
    kwargs), its workgroups, and its bindings by role:
      w       the weight buffer of row range ``part`` (an index into choose_product's parts)
      x, y    the product's input and output; gain: the norm gain (ones without a norm); step: the step uniform
      normed  the pre-normalised input (CPU adapters: rmsnorm as its own pass); ones: a buffer of ones
      xq      the input quantized to 8-bit blocks (quantize_rows)
      sums    K parts of a split product (``scratch`` bytes), added into y by sum_parts
      xh, wh  the f16 copies of the input and of a slab of the weight's rows (``scratch`` bytes: the one it writes)
    ``what``: "norm", "quantize" and "half" for the passes over the input (and the weight's f16 copy), None for the
    product's own dispatches."""
    kernel: str
    args: tuple
    kwargs: dict
    groups: tuple
    buffers: tuple
    part: int | None = None
    scratch: int = 0
    what: str | None = None

    def wgsl(self) -> str:
        return globals()[self.kernel](*self.args, **self.kwargs)

    @property
    def scratch_role(self) -> str | None:
        """The scratch role this dispatch writes (``scratch`` bytes of it): sums, xh or wh."""
        return next((r for r in ("sums", "xh", "wh") if r in self.buffers), None)


def choose_product(fmt, rows: int, cols: int, tokens: int, adapter: Adapter, tuning: Tuning, *, parts=None,
                   aligned: bool = False, norm: bool = False, eps: float = 0.0, glu: bool = False, gelu: bool = False,
                   accum: bool = False, last_only: bool = False, logits: bool = False, ystride: int | None = None,
                   yoff: int = 0, xsplit: tuple = (1, 32), each: bool = False) -> list[Dispatch]:
    """The dispatches of y (+)= W · x for W of ``rows`` x ``cols`` of type fmt and passes of up to ``tokens`` tokens on
    ``adapter``, in order. parts: the weight's row ranges [(first row, rows)], one buffer each (a weight too big for
    one binding, GPUModel.pieces; default one); aligned: the weight is in the aligned layout; norm: x is
    RMS-normalised (eps) with a gain first; glu / gelu / accum / last_only / ystride / yoff: see matmul.wgsl; logits:
    the LM head (its logits are read back, so never on 8-bit activations in prefill); xsplit: x holds a split decode
    attention's partial results (matvec_q8 only); each: every token is computed as a one-token pass computes it
    (speculative decoding's verify passes: their logits are a decode step's).

    The choice, in order:
    1. CPU adapters without the int8 kernels normalise x in a pass of its own (rmsnorm.wgsl): the norm fused into
       matmul.wgsl loads each input twice more, lane by lane on software adapters.
    2. Prefill passes (tokens > 1, not last_only, not the LM head) where sgmat_enabled and the type has a float32
       reader (every GPU type): on the adapter's subgroup matrices (sgmat_product: half_rows, then per row range and
       slab dequant_half and matmul_sgmat).
    3. Prefill passes (tokens > 1, not last_only, not the LM head) on 8-bit activations where i8_prefill_enabled and
       the type has a matmul_i8 reader in this layout and cols is a multiple of its block: quantize_rows once, then
       per row range matmul_i8 with matmul_i8_tile's tile, matmul_i8_kgroups' K groups and, where matmul_i8_split
       says so, K in parts added by sum_parts.
    4. Else per row range: GPU prefill passes with cols a multiple of 32: matmul_tiled (tiled_tile); one-token passes
       and the LM head where int8_enabled and matvec_q8_shape fits: matvec_q8 (at most XSPLIT_LANES lanes a row on
       a split attention's partial results); the rest matmul.wgsl (matvec_shape).
    With each, a pass of several tokens takes the dispatches of a one-token pass: matvec_q8 with a one-token pass's
    shape and workgroups of its own for each token, or matmul.wgsl in its one-token shape looping over the tokens
    (CPU adapters and types without an int8 reader); each token's sums are a decode step's (2, 3 and the tiles then
    do not apply)."""
    parts = list(parts) if parts is not None else [(0, rows)]
    ystride = ystride or rows
    int8 = int8_enabled(adapter, tuning)
    out = []
    x, gain = "x", "gain" if norm else "ones"
    if norm and adapter.is_cpu and not int8:
        out.append(Dispatch("rmsnorm", (cols, float(eps)), {}, (tokens, 1, 1), ("x", "gain", "normed", "step"),
                            what="norm"))
        x, gain, norm = "normed", "ones", False
    row = formats.FORMATS.get(fmt)
    one = tokens == 1 or last_only
    q8 = [matvec_q8_shape(fmt, cols, adapter.is_cpu, adapter.subgroup_size, adapter.wg_memory, n, aligned, tuning,
                          split_input=xsplit[0] > 1)
          if int8 and (one or each) else None for _, n in parts]
    prefill = tokens > 1 and not last_only and not logits and not each
    if (prefill and sgmat_enabled(adapter, cols, glu, tuning) and formats.reader(fmt, "f32", aligned) is not None
            and cols % block_elems(fmt) == 0):
        return out + sgmat_product(fmt, rows, cols, tokens, sgmat_config(adapter, tuning), parts, x, gain,
                                   norm=norm, eps=eps, glu=glu, gelu=gelu, accum=accum, ystride=ystride, yoff=yoff,
                                   aligned=aligned, emulate=_tuning(tuning).sgmat == "emulate", tuning=tuning)
    if (prefill and i8_prefill_enabled(adapter, tuning)
            and formats.reader(fmt, "matmul_i8", aligned) is not None and cols % row.block_elems == 0):
        out.append(Dispatch("quantize_rows", (cols,), {"norm": norm, "eps": float(eps), "wg": tuning.quantize_wg},
                            (tokens, 1, 1), (x, "xq", "step", gain), what="quantize"))
        for i, (r0, n) in enumerate(parts):
            tr, pair = matmul_i8_tile(n, tokens, glu, tuning)
            kg = matmul_i8_kgroups(n, tokens, tr, glu, adapter.wg_memory, adapter.max_threads, pair, tuning)
            split = matmul_i8_split(n, tokens, cols, tr, glu, pair, tuning)
            shape = {"rows": tr, "pair": pair, "kgroups": kg, "kb": tuning.i8_kb, "aligned": aligned}
            if split == 1:
                out.append(Dispatch("matmul_i8", (fmt, cols, n), {"accum": accum, "glu": glu, "gelu": gelu,
                                                                  "ystride": ystride, "yoff": yoff + r0, **shape},
                                    matmul_i8_groups(n, tokens, tr, pair=pair), ("w", "xq", "y", "step"), i))
                continue
            out.append(Dispatch("matmul_i8", (fmt, cols, n), {"ksplit": split, "tmax": tokens, **shape},
                                matmul_i8_groups(n, tokens, tr, split, pair), ("w", "xq", "sums", "step"), i,
                                scratch=4 * split * tokens * n))
            out.append(Dispatch("sum_parts", (n, split, tokens), {"ystride": ystride, "yoff": yoff + r0,
                                                                  "accum": accum},
                                sum_parts_groups(n, tokens), ("sums", "y", "step"), i))
        return out
    buffers = ("w", x, "y", "step", gain)
    for i, (r0, n) in enumerate(parts):
        common = dict(norm=norm, eps=float(eps), ystride=ystride, yoff=yoff + r0, aligned=aligned, accum=accum,
                      glu=glu, gelu=gelu)
        if tokens > 1 and not last_only and not each and cols % 32 == 0 and not adapter.is_cpu:
            tile = tiled_tile(n, cols, tokens, tuning)
            out.append(Dispatch("matmul_tiled", (fmt, cols, n), {**common, "tile": tile},
                                tiled_groups(n, tokens, tile), buffers, i))
            continue
        shape = q8[i]
        if shape is not None:
            side = tokens if each and not last_only else 1      # a verify pass's tokens side by side
            out.append(Dispatch("matvec_q8", (fmt, cols, n), {**common, **shape, "last_only": last_only,
                                                              "xsplit": tuple(xsplit), "tokens": side},
                                spread(matvec_q8_groups(n, shape["lanes"], shape["wg"], side)), buffers, i))
            continue
        if xsplit[0] > 1:
            raise RuntimeError(f"a split attention's output ({xsplit[0]} parts) needs matvec_q8, which does not apply "
                             f"to {GGMLType(fmt).name} rows of {cols} here")
        shape = matvec_shape(cols // block_elems(fmt), 1 if last_only or each else tokens, adapter.is_cpu,
                             adapter.subgroup_size, tuning)      # with each: a one-token pass's shape, looped
        out.append(Dispatch("matmul", (fmt, cols, n), {**common, **shape, "last_only": last_only},
                            spread(matmul_groups(n, shape["lanes"], shape["rpt"], shape["wg"])), buffers, i))
    return out
