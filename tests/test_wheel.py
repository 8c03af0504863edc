"""The installable package: `pip wheel .` gives a wheel with every runtime file (the WGSL kernels of shaders/ included,
as cera_web/shaders/), and the wheel installed elsewhere runs the command line from any directory with nothing of the
checkout on its path; what it cannot do there (no default model, no gguf for synthetic models) is a one-line error.

The installed copy runs under `python -S` with PYTHONPATH = the install folder, then this environment's
site-packages: -S keeps the checkout's editable install (a .pth import hook) out, so the subprocess can only import
the wheel's cera_web; each run prints where cera_web came from and the test checks it.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "small" / "qwen3-q8_0.gguf"
GENERATE = ["generate", "--model", str(TINY), "--prompt", "the cat sat", "--max-tokens", "5", "--temperature", "0",
            "--json"]


@pytest.fixture(scope="module")
def pip_wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from this checkout's sources (isolated build, as a user's `pip wheel .` in a fresh clone:
    the sources are copied first, since setuptools reuses a build/ folder it finds, stale modules included)."""
    out = tmp_path_factory.mktemp("wheel")
    src = out / "src"
    for name in ("cera_web", "shaders"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w",
                    str(out / "dist"), str(src)], check=True, cwd=out)
    wheel, = (out / "dist").glob("cera_web-*.whl")
    return wheel


@pytest.fixture(scope="module", params=["pip wheel", "serve.py"])
def installed(request, pip_wheel, tmp_path_factory):
    """(wheel path, install folder): pip's wheel, or the one serve.py builds with zipfile for the browser (written
    by `python serve.py --write-wheel DIR`), installed with --target."""
    out = tmp_path_factory.mktemp("install")
    if request.param == "pip wheel":
        wheel = pip_wheel
    else:
        wheel = Path(subprocess.run([sys.executable, str(ROOT / "serve.py"), "--write-wheel", str(out / "dist")],
                                    check=True, capture_output=True, text=True).stdout.strip())
        assert wheel.name == pip_wheel.name
    target = out / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
                    "--target", str(target), str(wheel)], check=True, cwd=out)
    return wheel, target


def run_installed(target: Path, args, cwd: Path, block: str = "") -> subprocess.CompletedProcess:
    """python -S -m cera_web ARGS with only the install folder and this environment's site-packages on the path;
    block: a module made unimportable first (as if not installed)."""
    prelude = (f"import sys; sys.modules[{block!r}] = None; " if block else "") + (
        "import runpy, cera_web; print('FROM', cera_web.__file__, file=sys.stderr); "
        "sys.argv = ['cera_web'] + sys.argv[1:]; runpy.run_module('cera_web', run_name='__main__')")
    # TMPDIR: bench --synthetic keeps its files in the temp folder, and one left there by another run would be
    # used without gguf (the case the test blocks)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]]),
               TMPDIR=str(cwd))
    return subprocess.run([sys.executable, "-S", "-c", "import sys; " + prelude, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_wheel_holds_every_runtime_file(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    shaders = {str(p.relative_to(ROOT)) for p in (ROOT / "shaders").rglob("*.wgsl")}
    assert len(shaders) > 40
    missing = sorted(s for s in shaders if f"cera_web/{s}" not in names)
    assert not missing, f"the wheel lacks {missing}"
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "cera_web").rglob("*.py")}
    assert sorted(modules - names) == []


@pytest.mark.gpu
def test_installed_wheel_generates_from_another_directory(installed, tmp_path):
    _, target = installed
    got = run_installed(target, GENERATE, tmp_path)
    assert got.returncode == 0, got.stderr
    assert f"FROM {target / 'cera_web' / '__init__.py'}" in got.stderr
    checkout = subprocess.run([sys.executable, "-m", "cera_web", *GENERATE], cwd=ROOT, capture_output=True,
                              text=True, timeout=600, check=True)
    want, have = json.loads(checkout.stdout), json.loads(got.stdout)
    assert have["tokens"] == want["tokens"] and len(have["tokens"]) == 5
    assert have["text"] == want["text"]


def test_installed_wheel_errors_name_what_to_do(installed, tmp_path):
    _, target = installed
    no_model = run_installed(target, ["generate", "--prompt", "hi"], tmp_path)
    assert no_model.returncode == 1
    assert no_model.stderr.splitlines()[-1].startswith("error: no model given") and "--model" in no_model.stderr
    assert "Traceback" not in no_model.stderr
    no_gguf = run_installed(target, ["bench", "--synthetic", "smollm2-135m", "--prompt-tokens", "4",
                                     "--decode-tokens", "2"], tmp_path, block="gguf")
    assert no_gguf.returncode == 1, no_gguf.stderr
    assert "Traceback" not in no_gguf.stderr
    assert "pip install 'cera_web[bench]'" in no_gguf.stderr.splitlines()[-1]


def test_served_wheel_is_pips_wheel(pip_wheel):
    """serve.py's wheel (the one the page, cera.js and the notebooks install) holds the same files, byte for byte, and
    the same requirements as `pip wheel .`'s."""
    import serve

    served = zipfile.ZipFile(io.BytesIO(serve.build_wheel()))
    pips = zipfile.ZipFile(pip_wheel)
    files = lambda zf: {n: zf.read(n) for n in zf.namelist() if ".dist-info/" not in n}   # noqa: E731
    assert files(served) == files(pips)
    info = pip_wheel.name.split("-py3")[0] + ".dist-info/"
    fields = lambda zf, key: sorted(line.split(": ", 1)[1] for line in zf.read(info + "METADATA").decode().splitlines()
                                    if line.startswith(key + ": "))   # noqa: E731
    for key in ("Name", "Version", "Requires-Python", "Requires-Dist", "Provides-Extra"):
        assert fields(served, key) == fields(pips, key), key
    assert "wgpu>=0.19; sys_platform != \"emscripten\"" in fields(pips, "Requires-Dist")   # not for micropip
    assert served.read(info + "WHEEL").decode().splitlines()[-2:] == ["Root-Is-Purelib: true", "Tag: py3-none-any"]
