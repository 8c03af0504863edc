"""Snapshots of a sequence's state (the prompt cache that outlives the process): the KV cache rows and conv states
of a token prefix as bytes, to write to a file (the CLI's --prompt-cache, ChatSession.save) or to the browser's
storage (the page), and to restore later instead of prefilling the prefix again.

Layout (version 1), little-endian:

    b"CERAKV\\x00\\x01"   8 bytes: the format's name and layout version
    u32 n                 bytes of the header that follows
    header                n bytes of UTF-8 JSON: {"model", "kv_cache", "context_size", "tokens", "parts", "crc32",
                          "extra"}
    payload               the parts in order (Model.state_sizes: per attention layer K then V rows [0, len(tokens)) in
                          the cache's element type; per conv layer its [l_cache - 1, hidden] float32 state)

"model" identifies the file: the SHA-256 of its header and tensor table (every byte before the tensor data) and its
size; "crc32" checks the payload. A snapshot is used only when the format, the model, the cache's element type and
context size, the part sizes and the checksum all match; otherwise restore() raises SnapshotError (one line, what
differs) and nothing of the engine's state changes, so the caller recomputes the prompt: a stale, truncated,
corrupted or foreign snapshot never changes an output. The same layout on every backend (GPU and CPU); the logits
after a restore equal those after the prefill that made the snapshot (the same bytes).
"""
from __future__ import annotations

import hashlib
import json
import struct
import zlib

from .errors import SnapshotError

MAGIC = b"CERAKV\x00\x01"
MAX_HEADER = 64 << 20           # a header larger than this is not one of ours (bounds the memory a bad file costs)


def model_identity(engine) -> str:
    """What identifies a model file: SHA-256 of its bytes before the tensor data (header, metadata, tensor table)
    and its size, "sha256:<hex>:<size>" (computed once per engine)."""
    ident = getattr(engine, "_identity", None)
    if ident is None:
        g = engine.gguf
        digest = hashlib.sha256()
        for at in range(0, g.data_offset, 16 << 20):
            digest.update(engine.source.read(at, min(16 << 20, g.data_offset - at)))
        ident = engine._identity = f"sha256:{digest.hexdigest()}:{g.file_size}"
    return ident


def pack(engine, tokens: list[int], parts: list[bytes], extra: dict | None = None) -> bytes:
    """The snapshot of ``tokens`` whose state is ``parts`` (Model.read_state); ``extra``: JSON the caller keeps with
    it (ChatSession: its messages)."""
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    header = json.dumps({"model": model_identity(engine), "kv_cache": engine.model.kv_cache,
                         "context_size": engine.context_size, "tokens": [int(t) for t in tokens],
                         "parts": [len(p) for p in parts], "crc32": crc, "extra": extra or {}},
                        separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, *parts])


def read_header(data) -> dict:
    """The header of snapshot bytes (checked for form only); SnapshotError when they are not a snapshot."""
    data = memoryview(data)
    if len(data) < 12 or bytes(data[:6]) != MAGIC[:6]:
        raise SnapshotError("not a cera_web state snapshot (no CERAKV signature)")
    if bytes(data[:8]) != MAGIC:
        raise SnapshotError(f"a state snapshot of layout version {data[7]}, this version reads {MAGIC[7]}")
    (n,) = struct.unpack("<I", data[8:12])
    if n > MAX_HEADER or 12 + n > len(data):
        raise SnapshotError(f"the snapshot is truncated: its header needs {n} bytes, {len(data) - 12} are there")
    try:
        header = json.loads(bytes(data[12:12 + n]))
    except ValueError:
        raise SnapshotError("the snapshot's header is damaged (not JSON)") from None
    want = {"model": str, "kv_cache": str, "context_size": int, "tokens": list, "parts": list, "crc32": int,
            "extra": dict}
    if not isinstance(header, dict) or any(not isinstance(header.get(k), t) for k, t in want.items()):
        raise SnapshotError("the snapshot's header is damaged (fields missing or of the wrong type)")
    header["offset"] = 12 + n
    return header


def unpack(engine, data) -> tuple[list[int], list[memoryview], dict]:
    """(tokens, parts, extra) of snapshot bytes checked against this engine; SnapshotError says what does not
    match."""
    h = read_header(data)
    data = memoryview(data)
    if h["model"] != model_identity(engine):
        raise SnapshotError("the snapshot was made with another model file (its header or size differs)")
    if h["kv_cache"] != engine.model.kv_cache:
        raise SnapshotError(f"the snapshot holds a {h['kv_cache']} KV cache, this engine keeps {engine.model.kv_cache}")
    if h["context_size"] != engine.context_size:
        raise SnapshotError(f"the snapshot was made with a context of {h['context_size']} tokens, this engine has "
                            f"{engine.context_size}")
    tokens = h["tokens"]
    vocab = engine.model.vocab
    if not all(isinstance(t, int) and 0 <= t < vocab for t in tokens) or len(tokens) >= engine.context_size:
        raise SnapshotError("the snapshot's token ids do not fit this model's vocabulary or context")
    sizes = engine.model.state_sizes(len(tokens)) if tokens else []
    if h["parts"] != sizes:
        raise SnapshotError("the snapshot's state layout differs from this model's")
    at, parts, crc = h["offset"], [], 0
    if at + sum(sizes) != len(data):
        raise SnapshotError(f"the snapshot is truncated or padded: {len(data) - at} payload bytes, "
                            f"{sum(sizes)} expected")
    for n in sizes:
        parts.append(data[at:at + n])
        crc = zlib.crc32(parts[-1], crc)
        at += n
    if crc != h["crc32"]:
        raise SnapshotError("the snapshot's payload is damaged (checksum mismatch)")
    return tokens, parts, h["extra"]


def read_bytes(source) -> bytes:
    """The bytes of a snapshot given as bytes, a path or a binary file object."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if hasattr(source, "read"):
        return source.read()
    with open(source, "rb") as f:
        return f.read()


def write_bytes(target, data: bytes) -> None:
    """Write a snapshot to a binary file object, or to a path (through a temporary file beside it, replaced at once:
    a reader never sees half a snapshot)."""
    if hasattr(target, "write"):
        target.write(data)
        return
    import os
    tmp = f"{os.fspath(target)}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, target)
