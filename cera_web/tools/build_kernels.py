"""Build the CPU path's WebAssembly kernels: cera_web/cpu_kernels/qmatmul.c -> qmatmul.wasm (wasm32 + simd128).

    python -m cera_web.tools.build_kernels [--force] [--quiet]

The compiler is Zig 0.13.0's `zig cc` (clang) from the pinned PyPI wheel `ziglang` (assets.json "ziglang", fetched
here on first use; Linux x86-64 only). serve.py and tests/run.py call ensure_kernels() after the other assets, so
the README's two commands build it on a fresh machine. The .wasm is an ignored build output beside its source;
.assets/stamps/cpu-kernels.json records the hash of the source, the flags and the compiler it was built from, and
a build runs again only when one of them changed. Standard library only.

Nothing here is fatal: where the compiler cannot be had (another platform, no package index) or the build fails,
one line says so and the CPU path keeps its float32 numpy products (cera_web.cpu_kernels prints the same notice).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from . import assets

SOURCE = Path(__file__).resolve().parents[1] / "cpu_kernels" / "qmatmul.c"
OUTPUT = SOURCE.with_suffix(".wasm")
FLAGS = ["-target", "wasm32-freestanding", "-O3", "-msimd128", "-mbulk-memory", "-nostdlib", "-Wall", "-Werror",
         "-Wl,--no-entry", "-Wl,--strip-all"]


def _say(msg: str, quiet: bool):
    if not quiet:
        print(f"[build_kernels] {msg}", file=sys.stderr, flush=True)


def _key(zig: Path) -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(json.dumps(FLAGS).encode())
    h.update(str(zig.stat().st_size).encode())
    return h.hexdigest()


def ensure_kernels(quiet: bool = False, force: bool = False, root: Path | None = None) -> Path | None:
    """Build qmatmul.wasm unless it is up to date; return its path, or None (one line on stderr says why)."""
    if not (sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64")):
        print("cera_web: no pinned compiler for the CPU kernels on this platform (Linux x86-64 only); the page's CPU "
              "path will use float32 numpy products", file=sys.stderr)
        return None
    try:
        zig_dir = assets.ensure_assets(["ziglang"], quiet=quiet, root=root)["ziglang"]
    except Exception as exc:        # an index that cannot be reached, a changed package: not fatal
        print(f"cera_web: the CPU kernels' compiler could not be fetched ({exc}); the page's CPU path will use "
              "float32 numpy products", file=sys.stderr)
        return None
    zig = Path(zig_dir) / "zig"
    stamp = Path(root or assets.REPO_ROOT) / ".assets" / "stamps" / "cpu-kernels.json"
    key = _key(zig)
    try:
        done = json.loads(stamp.read_text()).get("key") == key and OUTPUT.is_file()
    except (OSError, ValueError):
        done = False
    if done and not force:
        return OUTPUT
    with tempfile.TemporaryDirectory(prefix="cera-zig-") as tmp:
        out = OUTPUT.with_name(f".{OUTPUT.name}.{os.getpid()}.tmp")
        env = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=tmp, ZIG_LOCAL_CACHE_DIR=tmp)
        cmd = [str(zig), "cc", *FLAGS, "-o", str(out), str(SOURCE)]
        _say("$ " + " ".join(cmd[1:]), quiet)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"cera_web: building the CPU kernels failed ({exc}); the page's CPU path will use float32 numpy "
                  "products", file=sys.stderr)
            return None
        if proc.returncode != 0:
            print(f"cera_web: building the CPU kernels failed: {(proc.stderr or proc.stdout).strip()[:2000]}",
                  file=sys.stderr)
            out.unlink(missing_ok=True)
            return None
        os.replace(out, OUTPUT)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"key": key, "output": str(OUTPUT.name)}) + "\n")
    _say(f"built {OUTPUT.relative_to(SOURCE.parents[2])} ({OUTPUT.stat().st_size} bytes)", quiet)
    return OUTPUT


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cera_web.tools.build_kernels", description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="build even when the stamp says it is up to date")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    return 0 if ensure_kernels(quiet=args.quiet, force=args.force) else 1


if __name__ == "__main__":
    sys.exit(main())
