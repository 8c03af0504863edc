#!/usr/bin/env python3
"""Serve the cera_web page and its pinned assets on this machine.

    python serve.py [--host 127.0.0.1] [--port 8000] [--allow-host NAME] [--cors ORIGIN] [--no-fetch]
                    [--models default|all] [--verbose]

First makes sure the assets in assets.json are fetched (see cera_web/tools/assets.py), then serves:

    /                    web/index.html
    /web/...             web/
    /pyodide/...         .assets/pyodide/   (Pyodide core, numpy, wheels/ for jinja2 + markupsafe)
    /pyodide/wheels/cera_web-VERSION-py3-none-any.whl
                         the cera_web wheel (VERSION from pyproject.toml), built in memory with zipfile from
                         cera_web/**/*.py and shaders/**/*.wgsl (as cera_web/shaders/), the layout `pip wheel .` gives;
                         built once, rebuilt when a source file changes (its size or modification time). The page's
                         worker, cera.js, the notebooks and web/bench.html all install this one wheel
    /models/...          .assets/models/    (GGUF files; Range requests, ETag, Last-Modified)
    /pyscript/...        .assets/pyscript/  (only when that optional asset was fetched)
    /models/index.json   {"models": [...]}: the models of assets.json present on disk, for the page's menu
    /pyodide/wheels/index.json   {"wheels": [file names]}: the wheels the worker installs (cera_web's and those in
                         the folder), listed per request (unless such a file exists; a static host serves a written
                         copy: `python serve.py --write-wheel DIR` writes the wheel)

and nothing else: no listings, no dot files, nothing outside those folders (symlinks included).

Every response carries Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy:
require-corp, so the page is cross-origin isolated (SharedArrayBuffer, fine-grained timers). That is
harmless here because everything the page loads comes from this same origin.

Cross-origin use (a notebook site or a page on another origin fetching the model, the wheel and Pyodide): none
by default (Cross-Origin-Resource-Policy: same-origin, no CORS headers). `--cors ORIGIN` (repeatable; `*` for any)
answers requests whose Origin header is ORIGIN with Access-Control-Allow-Origin (and the preflight, OPTIONS, for
Range and revalidation headers), and sends Cross-Origin-Resource-Policy: cross-origin, so a cross-origin isolated
page (COEP require-corp) may also load Pyodide's scripts (importScripts, no CORS) from here.

Under load: a listen backlog of 256 (200 concurrent Range readers are all served), a thread per connection,
and an idle timeout (IDLE_TIMEOUT s) after which a client that sends or reads nothing is dropped. Requests whose
Host header is not a name of this server are refused (403): an IP address, the --host name, `localhost` (when
bound to the loopback or all interfaces), this machine's name (all interfaces) and --allow-host names are
accepted, so a web page cannot read what is served through a DNS-rebinding name.

Standard library only, Python 3.11+. Tests start it with make_server("127.0.0.1", 0) in a thread.
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import importlib
import io
import json
import socketserver
import sys
import threading
import time
import types
import zipfile
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent

# URL prefix (first path segment) -> folder under the repository root.
FOLDERS = {
    "web": "web",
    "pyodide": ".assets/pyodide",
    "models": ".assets/models",
    "pyscript": ".assets/pyscript",
}
INDEX = ("web", "index.html")
# the cera_web.tools subpackage (CLI, asset fetching, benchmarks), which the runtime never imports (the wheel holds it:
# web/bench.html imports it; the page, cera.js and the notebooks never do)
TOOLS = "cera_web/tools"
WHEELS = "/pyodide/wheels/"     # the cera_web wheel is served here, beside its dependencies
WHEELS_INDEX = WHEELS + "index.json"
MODELS_INDEX = "/models/index.json"     # the page's model menu (models_index)

# CORS (--cors): the request headers a preflight allows (Range reads of models, revalidation) and the response headers
# a cross-origin script may read (sizes for progress, Range answers, cache validators)
CORS_REQUEST_HEADERS = "Range, If-None-Match, If-Modified-Since, If-Range"
CORS_EXPOSE = "Content-Length, Content-Range, Accept-Ranges, ETag, Last-Modified"

MIME = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".wasm": "application/wasm",
    ".py": "text/x-python; charset=utf-8",
    ".wgsl": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".ts": "text/plain; charset=utf-8",
    ".toml": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".whl": "application/octet-stream",
    ".zip": "application/octet-stream",
    ".gguf": "application/octet-stream",
    ".tar": "application/x-tar",
    ".tgz": "application/gzip",
    ".gz": "application/gzip",
}
CHUNK = 1 << 20
IDLE_TIMEOUT = 30.0      # seconds a connection may stay silent (no request, or not reading the reply)
BACKLOG = 256


def load_assets_module():
    """cera_web/tools/assets.py, loaded without running cera_web/__init__.py.

    The package's __init__ may import numpy (the engine), which a bare system Python lacks; assets.py
    and errors.py are stdlib only. A private package object with the same __path__ lets assets.py's
    relative import of .errors work.
    """
    name = "_cera_web_stdlib"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(ROOT / "cera_web")]
        sys.modules[name] = pkg
    return importlib.import_module(name + ".tools.assets")


def load_build_kernels_module():
    """cera_web/tools/build_kernels.py, loaded as load_assets_module loads assets.py (standard library only)."""
    load_assets_module()
    return importlib.import_module("_cera_web_stdlib.tools.build_kernels")


def project(root: Path = ROOT) -> dict:
    """pyproject.toml's [project] table."""
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def wheel_name(root: Path = ROOT) -> str:
    """cera_web-VERSION-py3-none-any.whl, VERSION from pyproject.toml."""
    meta = project(root)
    return f"{meta['name']}-{meta['version']}-py3-none-any.whl"


def wheel_files(root: Path = ROOT) -> list[tuple[str, Path]]:
    """(name in the wheel, file) of every runtime file: cera_web/**/*.py and shaders/**/*.wgsl as cera_web/shaders/
    (what pyproject.toml's setuptools tables put in `pip wheel .`'s wheel), without dot files, __pycache__ and
    symlinks leading out of the repository."""
    found = [(p.relative_to(root).as_posix(), p) for p in (root / "cera_web").rglob("*.py")]
    found += [("cera_web/" + p.relative_to(root).as_posix(), p) for p in (root / "shaders").rglob("*.wgsl")]
    # the CPU kernels' WebAssembly, once built (cera_web/tools/build_kernels.py; the page's CPU path loads it)
    found += [(p.relative_to(root).as_posix(), p) for p in (root / "cera_web").rglob("*.wasm")]
    out = []
    for name, p in sorted(found):
        rel = p.relative_to(root)
        if not p.is_file() or any(s.startswith(".") or s == "__pycache__" for s in rel.parts):
            continue
        if p.resolve().is_relative_to(root.resolve()):
            out.append((name, p))
    return out


def wheel_metadata(root: Path = ROOT) -> str:
    """The wheel's METADATA (core metadata 2.1) from pyproject.toml: name, version, summary, requirements, extras."""
    meta = project(root)
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}",
             f"Summary: {meta.get('description', '')}", f"Requires-Python: {meta.get('requires-python', '')}"]
    lines += [f"Requires-Dist: {req}" for req in meta.get("dependencies", [])]
    for extra, reqs in meta.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for req in reqs:
            name, _, marker = req.partition(";")
            marker = f"({marker.strip()}) and " if marker.strip() else ""
            lines.append(f"Requires-Dist: {name.strip()}; {marker}extra == \"{extra}\"")
    return "\n".join(lines) + "\n"


def build_wheel(root: Path = ROOT) -> bytes:
    """The cera_web wheel, built with zipfile: wheel_files, then the .dist-info (METADATA, WHEEL, top_level.txt,
    RECORD with every file's sha256). A fixed timestamp, so equal sources give equal bytes."""
    import base64

    meta = project(root)
    info = f"{meta['name']}-{meta['version']}.dist-info"
    entries = [(name, p.read_bytes()) for name, p in wheel_files(root)]
    entries += [(f"{info}/METADATA", wheel_metadata(root).encode()),
                (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: cera_web serve.py\nRoot-Is-Purelib: true\n"
                                  b"Tag: py3-none-any\n"),
                (f"{info}/top_level.txt", b"cera_web\n")]
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in entries) + f"{info}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [*entries, (f"{info}/RECORD", record.encode())]:
            zinfo = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zinfo.compress_type = zipfile.ZIP_DEFLATED
            zinfo.external_attr = 0o644 << 16
            zf.writestr(zinfo, data)
    return buf.getvalue()


def wheel_stamp(root: Path = ROOT) -> tuple:
    """What build_wheel's output depends on: pyproject.toml's and every candidate file's path, size and mtime."""
    files = [root / "pyproject.toml", *(root / "cera_web").rglob("*"), *(root / "shaders").rglob("*.wgsl")]
    out = []
    for p in sorted(files):
        try:
            st = p.stat()
        except OSError:
            continue
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return tuple(out)


def wheels_index(root: Path = ROOT) -> bytes:
    """The JSON list of the wheels the page's worker installs: cera_web's (wheel_name) and the pure-Python wheels in
    .assets/pyodide/wheels (its dependencies jinja2 and markupsafe)."""
    folder = root / FOLDERS["pyodide"] / "wheels"
    names = {p.name for p in folder.glob("*.whl") if p.is_file()} if folder.is_dir() else set()
    if (root / "pyproject.toml").is_file():          # a site of its own (no package) lists only its wheels
        names.add(wheel_name(root))
    return json.dumps({"wheels": sorted(names)}).encode()


def models_index(root: Path = ROOT) -> bytes:
    """The JSON list of the models the page's model menu offers: {"models": [{name, file, url, size, about,
    default, draft?}]} (draft: the url of a served smaller model of the same tokenizer, for speculative decoding),
    one per GGUF asset of assets.json (single file or multi-part, by its "path" or install "dest")
    that is on disk under .assets/models/, in assets.json's order; size is the file's size on disk."""
    spec = json.loads((root / "assets.json").read_text())
    base = (root / FOLDERS["models"]).resolve()
    out = []
    for asset in spec.get("assets", []):
        file = (root / (asset.get("path") or asset.get("install", {}).get("dest", ""))).resolve()
        if file.suffix != ".gguf" or file.parent != base or not file.is_file():
            continue
        out.append({"name": asset.get("name", file.stem), "file": file.name, "url": f"/models/{file.name}",
                    "size": file.stat().st_size, "about": asset.get("about", ""),
                    "default": asset.get("name") == spec.get("default_model"), "draft": asset.get("draft")})
    urls = {m["name"]: m["url"] for m in out}
    for m in out:       # "draft": the url of its draft model (assets.json "draft": that asset's name) when served
        draft = urls.get(m.pop("draft"))
        if draft:
            m["draft"] = draft
    return json.dumps({"models": out}).encode()


def parse_range(header: str | None, size: int):
    """A single `bytes=` range -> (first, last) inclusive; None = send the whole file; False = 416.

    Multiple ranges and malformed headers are ignored (the whole file is sent), as RFC 9110 allows.
    """
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not _digits(first, empty=True) or not _digits(last, empty=True):
        return None
    if first == "":  # suffix range: the last N bytes
        if last == "":
            return None
        n = _number(last)
        if n == 0 or size == 0:
            return False
        return max(0, size - n), size - 1
    start = _number(first)
    if last and _number(last) < start:
        return None
    if start >= size:
        return False
    end = _number(last) if last else size - 1
    return start, min(end, size - 1)


def _digits(text: str, empty: bool = False) -> bool:
    """ASCII digits only (str.isdigit also accepts '²' and other digits int() refuses)."""
    return (empty and text == "") or (text.isascii() and text.isdigit())


def _number(digits: str) -> int:
    """The value of a run of ASCII digits; any number of more than 19 digits counts as 2**64 (int() refuses
    over 4,300 digits, and no file is that long)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 19 else 1 << 64


def allowed_hosts(host: str, extra=()) -> set[str]:
    """The Host header names (lower case, no port) a server bound to `host` answers: besides any IP address."""
    import socket

    names = {host.lower().strip("[]"), *(n.lower() for n in extra)}
    if host in ("0.0.0.0", "::", "") or host.startswith("127.") or host in ("::1", "localhost"):
        names |= {"localhost"}
    if host in ("0.0.0.0", "::", ""):
        names.add(socket.gethostname().lower())
    return names


def host_name(header: str) -> str:
    """The name part of a Host header ('[::1]:8000' -> '::1', 'Example.org.:80' -> 'example.org')."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0].rstrip(".") if header.count(":") == 1 else header.rstrip(".")


def _is_ip(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class Handler(BaseHTTPRequestHandler):
    server_version = "cera_web"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    # -- plumbing

    def setup(self):
        self.timeout = self.server.idle_timeout      # socket timeout: a silent client is dropped
        super().setup()

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (TimeoutError, ConnectionError):
            self.close_connection = True             # silent, slow or gone: drop it without a traceback

    def log_message(self, format, *args):  # noqa: A002 (base class signature)
        if self.server.verbose:
            super().log_message(format, *args)

    def end_headers(self):
        # Cross-origin isolation for the page; harmless since everything is same-origin.
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        cors = self.server.cors
        self.send_header("Cross-Origin-Resource-Policy", "cross-origin" if cors else "same-origin")
        origin = self._cors_origin()
        if origin:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Expose-Headers", CORS_EXPOSE)
        if cors and "*" not in cors:
            self.send_header("Vary", "Origin")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def _cors_origin(self) -> str | None:
        """The Access-Control-Allow-Origin value for this request: its Origin when --cors names it ('*' for any)."""
        origin = self.headers.get("Origin")
        if origin is None or not self.server.cors:
            return None
        return "*" if "*" in self.server.cors else origin if origin in self.server.cors else None

    def do_GET(self):
        self._handle(head=False)

    def do_HEAD(self):
        self._handle(head=True)

    def do_OPTIONS(self):
        """A CORS preflight: answered for a --cors origin (GET/HEAD with Range and revalidation headers)."""
        if not self._host_allowed():
            return
        if self._cors_origin() is None:
            self.send_error(HTTPStatus.FORBIDDEN, "cross-origin requests are not allowed from this origin; start "
                                                  "serve.py with --cors ORIGIN to allow them")
            return
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD")
        self.send_header("Access-Control-Allow-Headers", CORS_REQUEST_HEADERS)
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    # -- routing

    def _handle(self, head):
        if not self._host_allowed():
            return
        target = self._resolve()
        if isinstance(target, int):
            self.send_error(target)
        elif target == "wheel":
            self._send_bytes(self.server.wheel(), MIME[".whl"], head)
        elif target == "models":
            self._send_bytes(models_index(self.server.root), MIME[".json"], head)
        elif target == "wheels":
            self._send_bytes(wheels_index(self.server.root), MIME[".json"], head)
        else:
            self._send_file(target, head)

    def _host_allowed(self) -> bool:
        """Refuse (403) a Host header that names neither an IP address nor this server (DNS rebinding)."""
        header = self.headers.get("Host")
        if header is None:
            return True                 # HTTP/1.0 without Host: not from a browser
        name = host_name(header)
        if _is_ip(name) or name in self.server.hosts:
            return True
        self.send_error(HTTPStatus.FORBIDDEN, f"Host {header[:100]!r} is not a name of this server; start "
                                              f"serve.py with --allow-host NAME to serve it under that name")
        return False

    def _resolve(self):
        """The file a request path names, "wheel" (cera_web's), "models", "wheels" (the index), or an HTTP status to
        refuse with."""
        raw = self.path.split("?", 1)[0].split("#", 1)[0]
        if not raw.startswith("/"):
            return HTTPStatus.BAD_REQUEST  # absolute-form or junk request target
        try:
            path = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            return HTTPStatus.BAD_REQUEST
        if path.startswith(WHEELS + "cera_web-") and (self.server.root / "pyproject.toml").is_file() \
                and path == WHEELS + self.server.wheel_name():
            return "wheel"
        if path == MODELS_INDEX:
            return "models"
        # '%' left after one decoding means double encoding (%252e); '\\' and NUL are never legitimate.
        if any(c in path for c in "%\\\x00"):
            return HTTPStatus.FORBIDDEN
        parts = path[1:].split("/")
        if path == WHEELS_INDEX and not (self.server.root / FOLDERS["pyodide"] / "wheels" / "index.json").exists():
            return "wheels"
        if parts == [""]:
            parts = list(INDEX)
        if any(p in (".", "..") for p in parts):
            return HTTPStatus.FORBIDDEN
        if any(p == "" or p.startswith(".") for p in parts):
            return HTTPStatus.NOT_FOUND  # directories (trailing or doubled '/') and dot files
        folder = FOLDERS.get(parts[0])
        if folder is None or len(parts) < 2:
            return HTTPStatus.NOT_FOUND
        try:
            base = (self.server.root / folder).resolve()
            file = base.joinpath(*parts[1:]).resolve()
            if not file.is_relative_to(base):
                return HTTPStatus.FORBIDDEN  # a symlink leading out of the served folder
            if not file.is_file():
                return HTTPStatus.NOT_FOUND
        except (OSError, RuntimeError, ValueError):
            # a name too long for the file system, a symlink loop (RuntimeError before Python 3.13): no such file
            return HTTPStatus.NOT_FOUND
        return file

    # -- responses

    def _send_bytes(self, data, ctype, head):
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        if self._not_modified(etag, None):
            return
        self._send_body(io.BytesIO(data), len(data), ctype, etag, None, head)

    def _send_file(self, file: Path, head):
        st = file.stat()
        etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
        if self._not_modified(etag, st.st_mtime):
            return
        ctype = MIME.get(file.suffix.lower(), "application/octet-stream")
        with open(file, "rb") as fh:
            self._send_body(fh, st.st_size, ctype, etag, st.st_mtime, head)

    def _not_modified(self, etag, mtime):
        """Answer 304 when the client's cached copy is current."""
        inm = self.headers.get("If-None-Match")
        if inm is not None:
            fresh = inm.strip() == "*" or etag in [t.strip().removeprefix("W/") for t in inm.split(",")]
        else:
            ims = self.headers.get("If-Modified-Since")
            try:
                since = email.utils.parsedate_to_datetime(ims).timestamp() if ims else None
            except (TypeError, ValueError):
                since = None
            # a date in the future is invalid (RFC 9110 13.1.3): the header is ignored
            fresh = since is not None and mtime is not None and int(mtime) <= since <= time.time()
        if fresh:
            self.send_response(HTTPStatus.NOT_MODIFIED)
            self.send_header("ETag", etag)
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
        return fresh

    def _send_body(self, fh, size, ctype, etag, mtime, head):
        last_modified = email.utils.formatdate(mtime, usegmt=True) if mtime is not None else None
        rng = parse_range(self.headers.get("Range"), size)
        if_range = self.headers.get("If-Range")
        if rng and if_range is not None and if_range.strip() not in (etag, last_modified):
            rng = None  # the client's partial copy is of another version: send it all
        if rng is False:
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end = rng if rng else (0, size - 1)
        length = end - start + 1
        self.send_response(HTTPStatus.PARTIAL_CONTENT if rng else HTTPStatus.OK)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", "no-cache")  # revalidate (cheap: ETag) so edits show at once
        self.send_header("ETag", etag)
        if last_modified:
            self.send_header("Last-Modified", last_modified)
        self.end_headers()
        if head:
            return
        fh.seek(start)
        try:
            while length > 0:
                chunk = fh.read(min(CHUNK, length))
                if not chunk:
                    break
                self.wfile.write(chunk)
                length -= len(chunk)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the browser aborted (common with Range reads) or stopped reading


class AppServer(ThreadingHTTPServer):
    daemon_threads = True  # Ctrl-C must not wait for idle keep-alive connections
    request_queue_size = BACKLOG  # listen backlog: 5 (the default) dropped 21-99 of 200 concurrent clients

    def __init__(self, address, root: Path, verbose: bool, *, idle_timeout: float = IDLE_TIMEOUT, allow_hosts=(),
                 cors=()):
        self.root = Path(root).resolve()
        self.verbose = verbose
        self.idle_timeout = idle_timeout
        self.hosts = allowed_hosts(address[0], allow_hosts)
        self.cors = frozenset(cors)     # origins allowed to read what is served ('*': any); empty: none
        self._wheel = None              # (stamp, name, bytes)
        self._wheel_lock = threading.Lock()
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    def _cached_wheel(self) -> tuple:
        """(stamp, name, bytes): build_wheel(root), built once and again only when a source file's (or
        pyproject.toml's) size or mtime changes."""
        with self._wheel_lock:
            stamp = wheel_stamp(self.root)
            if self._wheel is None or self._wheel[0] != stamp:
                self._wheel = (stamp, wheel_name(self.root), build_wheel(self.root))
            return self._wheel

    def wheel(self) -> bytes:
        return self._cached_wheel()[2]

    def wheel_name(self) -> str:
        return self._cached_wheel()[1]

    def server_bind(self):
        # HTTPServer.server_bind looks the host name up (socket.getfqdn), which can stall on a machine
        # with broken DNS; the name is only used in CGI environments.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def make_server(host: str = "127.0.0.1", port: int = 8000, *, root=None, verbose=False,
                idle_timeout: float = IDLE_TIMEOUT, allow_hosts=(), cors=()) -> AppServer:
    """A bound, not yet running server; call serve_forever() (port 0 picks a free port). cors: origins
    ('http://host:port', or '*') allowed to read what is served (see --cors)."""
    return AppServer((host, port), ROOT if root is None else root, verbose, idle_timeout=idle_timeout,
                     allow_hosts=allow_hosts, cors=cors)


def cors_origin(text: str) -> str:
    """--cors's value: '*' or an origin, scheme://host[:port] with nothing after it."""
    from urllib.parse import urlsplit

    if text == "*":
        return text
    try:
        u = urlsplit(text)
        u.port                                      # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        u = None
    if u is None or u.scheme not in ("http", "https") or not u.hostname or u.path or u.query or u.fragment \
            or u.username is not None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an origin: give scheme://host[:port] with no path, "
                                         f"e.g. http://localhost:8888 (or * for any origin)")
    return text


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Serve the cera_web page on this machine.")
    ap.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: this machine only)")
    ap.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    ap.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="also answer requests whose Host header is NAME (repeatable; IP addresses, the --host "
                         "name and localhost always are)")
    ap.add_argument("--cors", action="append", default=[], type=cors_origin, metavar="ORIGIN",
                    help="let pages on ORIGIN (e.g. http://localhost:8888; repeatable; * for any) fetch the model, "
                         "the wheel and Pyodide from here (CORS and Cross-Origin-Resource-Policy headers; none by "
                         "default)")
    ap.add_argument("--write-wheel", metavar="DIR",
                    help="write the cera_web wheel into DIR (for a static host) and exit")
    ap.add_argument("--no-fetch", action="store_true",
                    help="do not fetch missing assets; serve what is there")
    ap.add_argument("--models", choices=("default", "all"), default="default",
                    help="models to fetch: the default one, or all in assets.json (about 850 MB)")
    ap.add_argument("--verbose", action="store_true", help="log every request")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.write_wheel:
        out = Path(args.write_wheel) / wheel_name()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(build_wheel())
        print(out)
        return 0
    assets = load_assets_module()
    if args.no_fetch:
        missing = [n for n in assets.asset_names(include_optional=False) if not assets.is_installed(n)]
        if missing:
            print(f"warning: assets not fetched: {', '.join(missing)} (run without --no-fetch)",
                  file=sys.stderr)
    else:
        try:
            assets.ensure_assets(assets.asset_names(False) + assets.model_names() if args.models == "all" else None)
        except assets.CeraError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        load_build_kernels_module().ensure_kernels()    # the CPU path's kernels (never fatal: one line if not)
    try:
        server = make_server(args.host, args.port, verbose=args.verbose, allow_hosts=args.allow_host, cors=args.cors)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}. "
              f"Pass --port N to use another port.", file=sys.stderr)
        return 1
    host, port = server.server_address[:2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    if host in ("0.0.0.0", "::"):
        print("note: listening on all interfaces; other machines on the network can reach this page")
    print(f"cera_web: serving http://{shown}:{port}/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped")
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
