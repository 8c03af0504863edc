#!/usr/bin/env python3
"""Serve the cera_web page and its pinned assets on this machine.

    python serve.py [--host 127.0.0.1] [--port 8000] [--allow-host NAME] [--no-fetch] [--models default|all]
                    [--verbose]

First makes sure the assets in assets.json are fetched (see cera_web/tools/assets.py), then serves:

    /                    web/index.html
    /web/...             web/
    /pyodide/...         .assets/pyodide/   (Pyodide core, numpy, wheels/ for jinja2 + markupsafe)
    /models/...          .assets/models/    (GGUF files; Range requests, ETag, Last-Modified)
    /pyscript/...        .assets/pyscript/  (only when that optional asset was fetched)
    /app/cera_web.zip    cera_web/**/*.py|json and shaders/**/*.wgsl, zipped in memory once, rebuilt when a
                         source file changes (its size or modification time); without the cera_web.tools
                         subpackage (CLI, benchmarks, asset fetching: TOOLS), which the runtime never imports
    /app/cera_web_tools.zip   the cera_web.tools subpackage alone, for web/bench.html (cached the same way)
    /models/index.json   {"models": [...]}: the models of assets.json present on disk, for the page's menu
    /pyodide/wheels/index.json   {"wheels": [file names]}: the wheels the worker installs, listed per request
                         (unless such a file exists; a static host serves a written copy)

and nothing else: no listings, no dot files, nothing outside those folders (symlinks included).

Every response carries Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy:
require-corp, so the page is cross-origin isolated (SharedArrayBuffer, fine-grained timers). That is
harmless here because everything the page loads comes from this same origin.

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
APP_ZIP = "/app/cera_web.zip"
TOOLS_ZIP = "/app/cera_web_tools.zip"
# the cera_web.tools subpackage (CLI, asset fetching, benchmarks), which the runtime never imports: not part of the
# browser bundle (web/bench.html fetches it from TOOLS_ZIP)
TOOLS = "cera_web/tools"
WHEELS_INDEX = "/pyodide/wheels/index.json"
MODELS_INDEX = "/models/index.json"     # the page's model menu (models_index)

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


def build_app_zip(root: Path = ROOT, tools: bool = False) -> bytes:
    """The Python package and the shaders, as the worker unpacks them into Pyodide's file system, without the
    TOOLS modules (tools=True: those modules alone).

    Entries are cera_web/... and shaders/... with a fixed timestamp, so equal sources give equal bytes.
    """
    files = [p for p in sorted((root / "cera_web").rglob("*")) if p.suffix in (".py", ".json")]
    files += sorted((root / "shaders").rglob("*.wgsl"))
    files = [p for p in files if p.relative_to(root).is_relative_to(TOOLS) == tools]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in files:
            rel = p.relative_to(root)
            if not p.is_file() or any(s.startswith(".") or s == "__pycache__" for s in rel.parts):
                continue
            if not p.resolve().is_relative_to(root.resolve()):
                continue  # a symlink pointing out of the repository
            info = zipfile.ZipInfo(rel.as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, p.read_bytes())
    return buf.getvalue()


def app_zip_stamp(root: Path = ROOT) -> tuple:
    """What build_app_zip's output depends on: every candidate file's path, size and modification time."""
    files = [*(root / "cera_web").rglob("*"), *(root / "shaders").rglob("*.wgsl")]
    out = []
    for p in sorted(files):
        try:
            st = p.stat()
        except OSError:
            continue
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return tuple(out)


def wheels_index(root: Path = ROOT) -> bytes:
    """The JSON list of the pure-Python wheels in .assets/pyodide/wheels, which the page's worker installs."""
    folder = root / FOLDERS["pyodide"] / "wheels"
    names = sorted(p.name for p in folder.glob("*.whl") if p.is_file()) if folder.is_dir() else []
    return json.dumps({"wheels": names}).encode()


def models_index(root: Path = ROOT) -> bytes:
    """The JSON list of the models the page's model menu offers: {"models": [{name, file, url, size, about,
    default}]}, one per GGUF asset of assets.json (single file or multi-part, by its "path" or install "dest")
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
                    "default": asset.get("name") == spec.get("default_model")})
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
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def do_GET(self):
        self._handle(head=False)

    def do_HEAD(self):
        self._handle(head=True)

    # -- routing

    def _handle(self, head):
        if not self._host_allowed():
            return
        target = self._resolve()
        if isinstance(target, int):
            self.send_error(target)
        elif target in ("zip", "tools zip"):
            self._send_bytes(self.server.app_zip(target == "tools zip"), "application/octet-stream", head)
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
        """The file a request path names, "zip", "tools zip", "wheels" (the index), or an HTTP status to refuse
        with."""
        raw = self.path.split("?", 1)[0].split("#", 1)[0]
        if not raw.startswith("/"):
            return HTTPStatus.BAD_REQUEST  # absolute-form or junk request target
        try:
            path = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            return HTTPStatus.BAD_REQUEST
        if path == APP_ZIP:
            return "zip"
        if path == TOOLS_ZIP:
            return "tools zip"
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

    def __init__(self, address, root: Path, verbose: bool, *, idle_timeout: float = IDLE_TIMEOUT, allow_hosts=()):
        self.root = Path(root).resolve()
        self.verbose = verbose
        self.idle_timeout = idle_timeout
        self.hosts = allowed_hosts(address[0], allow_hosts)
        self._zips = {}                 # tools flag -> (stamp, bytes)
        self._zip_lock = threading.Lock()
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    def app_zip(self, tools: bool = False) -> bytes:
        """build_app_zip(root, tools), built once and again only when a source file's size or mtime changes."""
        with self._zip_lock:
            stamp = app_zip_stamp(self.root)
            cached = self._zips.get(tools)
            if cached is None or cached[0] != stamp:
                cached = self._zips[tools] = (stamp, build_app_zip(self.root, tools))
            return cached[1]

    def server_bind(self):
        # HTTPServer.server_bind looks the host name up (socket.getfqdn), which can stall on a machine
        # with broken DNS; the name is only used in CGI environments.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def make_server(host: str = "127.0.0.1", port: int = 8000, *, root=None, verbose=False,
                idle_timeout: float = IDLE_TIMEOUT, allow_hosts=()) -> AppServer:
    """A bound, not yet running server; call serve_forever() (port 0 picks a free port)."""
    return AppServer((host, port), ROOT if root is None else root, verbose, idle_timeout=idle_timeout,
                     allow_hosts=allow_hosts)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Serve the cera_web page on this machine.")
    ap.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: this machine only)")
    ap.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    ap.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="also answer requests whose Host header is NAME (repeatable; IP addresses, the --host "
                         "name and localhost always are)")
    ap.add_argument("--no-fetch", action="store_true",
                    help="do not fetch missing assets; serve what is there")
    ap.add_argument("--models", choices=("default", "all"), default="default",
                    help="models to fetch: the default one, or all in assets.json (about 850 MB)")
    ap.add_argument("--verbose", action="store_true", help="log every request")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
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
    try:
        server = make_server(args.host, args.port, verbose=args.verbose, allow_hosts=args.allow_host)
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
