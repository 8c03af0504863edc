#!/usr/bin/env python3
"""The test command:  python3 tests/run.py [pytest arguments]   (default: -q --durations=25)

Sets up everything a fresh Debian machine with only python3 lacks, then runs pytest:

1. system packages: chromium, mesa-vulkan-drivers (lavapipe, for wgpu-py), npm (for `npm pack`),
   python3-venv. When one is missing and this runs as root with apt-get, they are installed;
   otherwise a warning says what to install.
2. a virtual environment at .venv with `pip install -e '.[test]'`, redone only when pyproject.toml
   (or the Python version) changed since the last install.
3. the pinned assets of assets.json (Pyodide, numpy for Pyodide, wheels, the default model and the real
   checkpoints the model tests use; those only the slow tests use, the Qwen2.5-Coder-1.5B, with --all only),
   then the CPU path's WebAssembly kernels (cera_web.tools.build_kernels, with the pinned ziglang).
4. exec .venv/bin/python -m pytest with the given arguments.

Standard library only; Python 3.11+.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
INSTALL_STAMP = VENV / ".cera_web-install"
CHROMIUM = "/usr/bin/chromium"
LAVAPIPE_ICD = "/usr/share/vulkan/icd.d/lvp_icd*.json"


def say(msg):
    print(f"[tests/run.py] {msg}", flush=True)


def run(cmd, **kwargs):
    say("$ " + " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def missing_system_packages():
    missing = []
    if not os.path.exists(CHROMIUM):
        missing.append("chromium")
    if not glob.glob(LAVAPIPE_ICD):
        missing.append("mesa-vulkan-drivers")
    if shutil.which("npm") is None:
        missing.append("npm")
    if not VENV_PYTHON.exists() and importlib.util.find_spec("ensurepip") is None:
        missing.append("python3-venv")  # Debian splits `python3 -m venv` support out of python3
    return missing


def install_system_packages():
    missing = missing_system_packages()
    if not missing:
        say("system packages: chromium, lavapipe, npm present")
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        say(f"installing missing system packages: {' '.join(missing)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update"], env=env)
        run(["apt-get", "install", "-y", *missing], env=env)
    else:
        say(f"WARNING: missing system packages: {' '.join(missing)}. Install them "
            f"(Debian: sudo apt-get install {' '.join(missing)}); tests that need them will fail.")


def venv_works():
    if not VENV_PYTHON.exists():
        return False
    return subprocess.run([str(VENV_PYTHON), "-c", "import sys"], capture_output=True).returncode == 0


def ensure_venv():
    if VENV.exists() and not venv_works():
        say(f"{VENV} is broken (its python does not run); recreating it")
        shutil.rmtree(VENV)
    if not VENV.exists():
        say(f"creating the virtual environment {VENV.relative_to(ROOT)} (first run only)")
        run([sys.executable, "-m", "venv", VENV])
    version = subprocess.run([str(VENV_PYTHON), "-c", "import sys; print(sys.version)"],
                             capture_output=True, text=True, check=True).stdout
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + version.encode()).hexdigest()
    have = INSTALL_STAMP.read_text().strip() if INSTALL_STAMP.exists() else ""
    if have == want:
        say(f"{VENV.relative_to(ROOT)} is up to date with pyproject.toml")
        return
    say("installing cera_web and its test dependencies into .venv (pyproject.toml changed or first run)")
    run([VENV_PYTHON, "-m", "pip", "install", "--disable-pip-version-check", "-e", ".[test]"], cwd=ROOT)
    INSTALL_STAMP.write_text(want + "\n")


def main(argv):
    os.chdir(ROOT)
    install_system_packages()
    ensure_venv()
    say("checking the pinned assets (assets.json)")
    # the models only the slow tests use (assets.json "slow") are fetched when those run: --all (conftest.py)
    every = "--all" in argv or os.environ.get("CERA_WEB_ALL_TESTS") == "1"
    run([VENV_PYTHON, "-m", "cera_web.tools.assets", "--models", *([] if every else ["--no-slow"])], cwd=ROOT)
    # the CPU path's WebAssembly kernels (cera_web/cpu_kernels/qmatmul.c, built with the pinned ziglang); a failed
    # build is not fatal here: it says why in one line (tests/test_cpu_kernels.py then fails on Linux x86-64)
    subprocess.run([str(VENV_PYTHON), "-m", "cera_web.tools.build_kernels"], cwd=ROOT)
    args = argv or ["-q", "--durations=25"]   # the 25 slowest tests in the log: the CI budget is watched from it
    cmd = [str(VENV_PYTHON), "-m", "pytest", *args]
    say("$ " + " ".join(cmd))
    sys.stdout.flush()
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except subprocess.CalledProcessError as exc:
        say(f"set-up failed: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}")
        sys.exit(1)
