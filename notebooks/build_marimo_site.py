#!/usr/bin/env python3
"""Build a marimo WASM notebook site that runs offline, on the Pyodide pinned in assets.json.

    python notebooks/build_marimo_site.py [NOTEBOOK] [OUT]      (default: notebooks/cera_web_marimo.py, marimo-site/)

`marimo export html-wasm` (marimo 0.13.15, whose notebooks run on Pyodide 0.27.x) writes a static site whose worker
loads Pyodide from a CDN and a lock file from marimo's own site. This script then puts Pyodide into the site
(OUT/pyodide/: .assets/pyodide with the marimo-side wheels of assets.json, listed in a copy of pyodide-lock.json) and
points the worker at it (three strings of marimo's bundle, each required to be found, so another marimo release is a
clear error, not a site that silently fetches from elsewhere). Serve OUT with any static file server; the notebook
fetches the cera_web wheel and the model from serve.py (`python serve.py --cors ORIGIN`, ORIGIN that server's).
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MARIMO = "0.13.15"
# lock name -> (asset name, import names, lock dependencies): the pure-Python wheels marimo's worker loads
WHEELS = {
    "marimo-base": ("marimo-wasm-marimo-base", ["marimo"],
                    ["markdown", "pymdown-extensions", "narwhals", "packaging", "pygments", "jedi", "docutils",
                     "pyodide-http"]),
    "markdown": ("marimo-wasm-markdown", ["markdown"], []),
    "pymdown-extensions": ("marimo-wasm-pymdown-extensions", ["pymdownx"], ["markdown"]),
    "narwhals": ("marimo-wasm-narwhals", ["narwhals"], []),
    "docutils": ("marimo-wasm-docutils", ["docutils"], []),
    "pyodide-http": ("marimo-wasm-pyodide-http", ["pyodide_http"], []),
}
LOCAL = '${new URL("../pyodide/",self.location.href).href}'
PATCHES = [   # (pattern in marimo's worker bundle, replacement)
    (re.escape("https://wasm.marimo.app/pyodide-lock.json?v=${e.version}&pyodide=${e.pyodideVersion}"),
     '${new URL("../pyodide/pyodide-lock.json",self.location.href).href}'),
    (re.escape("https://cdn.jsdelivr.net/pyodide/${e.pyodideVersion}/full/"), LOCAL),
    # marimo pins Pyodide 0.27.5; ours is 0.27.7 (same ABI, same lock format)
    (r"_makeSnapshot:(!1|false),lockFileURL", r"_makeSnapshot:\1,checkAPIVersion:false,lockFileURL"),
]


def build(notebook: Path, out: Path) -> Path:
    from cera_web.errors import CeraError
    from cera_web.tools.assets import asset_path, ensure_assets

    import marimo

    if marimo.__version__ != MARIMO:
        raise CeraError(f"marimo {marimo.__version__} is installed; this site builder patches marimo {MARIMO}'s "
                        f"bundle: pip install marimo=={MARIMO}")
    ensure_assets(None, quiet=True)
    ensure_assets(["pyodide-jedi", "pyodide-parso", *(a for a, _, _ in WHEELS.values())], quiet=True)
    if out.exists():
        shutil.rmtree(out)
    done = subprocess.run([sys.executable, "-m", "marimo", "export", "html-wasm", str(notebook), "-o", str(out),
                           "--mode", "run"], capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CeraError(f"marimo export html-wasm {notebook} failed: {last}")
    pyodide = out / "pyodide"
    shutil.copytree(asset_path("pyodide"), pyodide, ignore=shutil.ignore_patterns("wheels"))
    lock = json.loads((pyodide / "pyodide-lock.json").read_text())
    for name, (asset, imports, depends) in WHEELS.items():
        wheel = asset_path(asset)
        shutil.copy(wheel, pyodide / wheel.name)
        lock["packages"][name] = {
            "name": name, "version": wheel.name.split("-")[1], "file_name": wheel.name, "install_dir": "site",
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "package_type": "package",
            "imports": imports, "depends": depends, "unvendored_tests": False}
    (pyodide / "pyodide-lock.json").write_text(json.dumps(lock))
    workers = sorted((out / "assets").glob("worker-*.js"))
    patched = 0
    for js in workers:
        text = js.read_text()
        if "wasm.marimo.app/pyodide-lock.json" not in text:
            continue
        for pattern, replacement in PATCHES:
            text, n = re.subn(pattern, replacement, text)
            if n == 0:
                raise CeraError(f"{js.name} of marimo {MARIMO} has no {pattern!r}; the site would not run offline")
        js.write_text(text)
        patched += 1
    if not patched:
        raise CeraError(f"no worker of the exported site loads Pyodide (looked in {len(workers)} files)")
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    notebook = Path(args[0]) if args else ROOT / "notebooks" / "cera_web_marimo.py"
    print(build(notebook, Path(args[1]) if len(args) > 1 else Path("marimo-site")))
