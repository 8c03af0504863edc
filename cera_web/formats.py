"""The weight-format registry: one row per GGML type that cera_web reads.

A row says everything the rest of the package needs to know about a type:
- its block geometry (elements and bytes a block: gguf.GGML_BLOCK, the file format's table of every GGML type);
- its numpy dequantizer (cera_web.quants: uint8[n_blocks, bytes a block] -> float32[n_blocks, elements a block]);
- the WGSL file that reads it on each kernel path, with the shared pieces that file needs (each path is optional:
  a type without one runs the next path down):
    f32        shaders/formats/: dequantized to float32 inside matmul.wgsl, matmul_tiled.wgsl and embed.wgsl (every
               type the GPU supports has it);
    matvec_q8  shaders/formats_matvec_q8/: products of one token a pass (decode, the LM head) on 8-bit activations;
    matmul_i8  shaders/formats_matmul_i8/: prefill products on 8-bit activations;
- its aligned layout, where it has one: the byte regions of a block (integers, scales, d) that the GPU stores one
  region of every block after the other (shaders/repack.wgsl makes it at upload, quants.aligned_layout is its
  specification), and the files that read that layout on each path.

Why the aligned layout: Q4_1, Q8_0 and Q6_K blocks are 20, 34 and 210 bytes, so a block's integers never (Q4_1, Q8_0)
or only every other block (Q6_K) start on a word or 16-byte boundary, and a GPU kernel would read them a word (or a
shifted pair of words) at a time. Regions make every block's integers 16-byte aligned (one or two 16-byte loads a
Q4_1 / Q8_0 block), in the same number of bytes (the end padded to a word).

How the kernels pick a path and a shape for a product: kernels.choose_product.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import quants
from .gguf import GGML_BLOCK, GGMLType

PATHS = ("f32", "matvec_q8", "matmul_i8")      # the kernel paths a row may name a reader for


@dataclass(frozen=True)
class Reader:
    """The WGSL that reads one format on one kernel path: ``file`` (under shaders/) after ``pieces``, the shared
    files it uses (their functions, e.g. byte-addressed reads), in the order build() appends them."""
    file: str
    pieces: tuple[str, ...] = ()

    def files(self) -> tuple[str, ...]:
        return (*self.pieces, self.file)


@dataclass(frozen=True)
class Aligned:
    """A type's aligned layout: ``regions`` ((offset in the block, bytes) each, in the order they are stored), the
    reader of that layout on each path, and whether its matvec_q8 reader's item is a whole 32-weight block
    (``block_items``: the lanes a row then follow the row's blocks, kernels.matvec_q8_lanes)."""
    regions: tuple[tuple[int, int], ...]
    f32: Reader
    matvec_q8: Reader | None = None
    matmul_i8: Reader | None = None
    block_items: bool = False


@dataclass(frozen=True)
class Format:
    type: GGMLType
    dequantize: Callable
    f32: Reader | None = None
    matvec_q8: Reader | None = None
    matmul_i8: Reader | None = None
    aligned: Aligned | None = None

    @property
    def block_elems(self) -> int:
        return GGML_BLOCK[self.type][0]

    @property
    def block_bytes(self) -> int:
        return GGML_BLOCK[self.type][1]

    def reader(self, path: str, aligned: bool = False) -> Reader | None:
        """The reader of this type on ``path`` (one of PATHS) in the file's layout or the aligned one (None where
        there is none)."""
        if path not in PATHS:
            raise ValueError(f"kernel path {path!r}: one of {', '.join(PATHS)}")
        if aligned:
            return getattr(self.aligned, path) if self.aligned is not None else None
        return getattr(self, path)


def _f(name, *pieces):
    return Reader(f"formats/{name}.wgsl", tuple(f"formats/{p}.wgsl" for p in pieces))


def _mv(name, *pieces):    # pieces: formats/ or formats_matvec_q8/ files, named with their folder
    return Reader(f"formats_matvec_q8/{name}.wgsl", tuple(f"{p}.wgsl" for p in pieces))


def _mm(name, *pieces):
    return Reader(f"formats_matmul_i8/{name}.wgsl", tuple(f"formats/{p}.wgsl" for p in pieces))


_WORDS, _KQUANT = "formats_matvec_q8/words", "formats_matvec_q8/kquant"
_BYTES, _KSCALES = "formats/bytes", "formats/kscales"

T = GGMLType
FORMATS: dict[GGMLType, Format] = {row.type: row for row in [
    Format(T.F32, quants.dequantize_f32, f32=_f("f32")),
    Format(T.F16, quants.dequantize_f16, f32=_f("f16")),
    Format(T.BF16, quants.dequantize_bf16, f32=_f("bf16")),
    Format(T.Q4_0, quants.dequantize_q4_0, f32=_f("q4_0", "bytes"), matvec_q8=_mv("q4_0", _BYTES),
           matmul_i8=_mm("q4_0", "bytes")),
    Format(T.Q4_1, quants.dequantize_q4_1, f32=_f("q4_1"), matvec_q8=_mv("q4_1"), matmul_i8=_mm("q4_1"),
           aligned=Aligned(((4, 16), (0, 4)), f32=_f("q4_1a"), matvec_q8=_mv("q4_1a"), matmul_i8=_mm("q4_1a"),
                           block_items=True)),
    Format(T.Q5_0, quants.dequantize_q5_0, f32=_f("q5_0", "bytes"), matvec_q8=_mv("q5_0", _BYTES),
           matmul_i8=_mm("q5_0", "bytes")),
    Format(T.Q5_1, quants.dequantize_q5_1, f32=_f("q5_1")),
    Format(T.Q8_0, quants.dequantize_q8_0, f32=_f("q8_0", "bytes"), matvec_q8=_mv("q8_0", _BYTES),
           matmul_i8=_mm("q8_0", "bytes"),
           aligned=Aligned(((2, 32), (0, 2)), f32=_f("q8_0a", "bytes"), matvec_q8=_mv("q8_0a"),
                           matmul_i8=_mm("q8_0a"), block_items=True)),
    Format(T.Q2_K, quants.dequantize_q2_k, f32=_f("q2_k")),
    Format(T.Q3_K, quants.dequantize_q3_k, f32=_f("q3_k", "bytes")),
    Format(T.Q4_K, quants.dequantize_q4_k, f32=_f("q4_k", "kscales"),
           matvec_q8=_mv("q4_k", _KSCALES, _WORDS, _KQUANT), matmul_i8=_mm("q4_k", "kscales")),
    Format(T.Q5_K, quants.dequantize_q5_k, f32=_f("q5_k", "kscales"),
           matvec_q8=_mv("q5_k", _KSCALES, _WORDS, _KQUANT)),
    Format(T.Q6_K, quants.dequantize_q6_k, f32=_f("q6_k", "bytes", "q6"),
           matvec_q8=_mv("q6_k", _BYTES, _WORDS, "formats_matvec_q8/q6"), matmul_i8=_mm("q6_k", "bytes"),
           aligned=Aligned(((0, 192), (192, 16), (208, 2)), f32=_f("q6_ka", "q6"), matvec_q8=_mv("q6_ka", _WORDS),
                           matmul_i8=_mm("q6_ka"))),
    Format(T.Q8_K, quants.dequantize_q8_k),      # intermediate type of ggml's k-quant dots: host only
]}
del T


def reader(fmt, path: str, aligned: bool = False) -> Reader | None:
    """The reader of type fmt on kernel ``path`` in the given layout, or None (no row, or no reader there)."""
    row = FORMATS.get(fmt)
    return row.reader(path, aligned) if row is not None else None


def types_with(path: str, aligned: bool = False) -> list[GGMLType]:
    """The types that have a reader on ``path`` (in the aligned layout: that have one, and the layout)."""
    return [t for t, row in FORMATS.items() if row.reader(path, aligned) is not None]


GPU_TYPES = frozenset(types_with("f32"))             # the types the GPU model reads at all
ALIGNED_TYPES = frozenset(t for t, row in FORMATS.items() if row.aligned is not None)
