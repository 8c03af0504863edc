"""The installable package: `pip wheel .` gives a wheel with every runtime file (the WGSL kernels of shaders/ included,
as cera_web/shaders/), and the wheel installed elsewhere runs the command line from any directory with nothing of the
checkout on its path; what it cannot do there (no default model, no gguf for synthetic models) is a one-line error.

The installed copy runs under `python -S` with PYTHONPATH = the install folder, then this environment's
site-packages: -S keeps the checkout's editable install (a .pth import hook) out, so the subprocess can only import
the wheel's cera_web; each run prints where cera_web came from and the test checks it.
"""
from __future__ import annotations

import json
import os
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
def installed(tmp_path_factory):
    """(wheel path, install folder): the wheel built from this checkout by pip (isolated build, as a user's
    `pip wheel .`), installed with --target."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w",
                    str(out / "dist"), str(ROOT)], check=True, cwd=out)
    wheel, = (out / "dist").glob("cera_web-*.whl")
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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]]))
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
