"""The page in Chromium on the H200 for Gemma 3 270M (issue 26, session 15): called by h200_s15_page.sh.

    python3 h200_s15_page.py probe OUTDIR      h200_s13_page.py's probe on the one flag set that gave the NVIDIA
                                               adapter in session 13 (headed on Ozone X11, ANGLE on Vulkan, no Vulkan
                                               surface); if that one fails, on all of session 13's sets
    python3 h200_s15_page.py page [tests/bench_browser.py args]     as h200_s13_page.py page (bench_browser.py's
                                               --model picks the file)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import h200_s13_page as s13  # noqa: E402

CHOSEN = "x11-vulkan-angle-no-surface"

if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "probe":
        all_sets, compat = s13.FLAG_SETS, s13.COMPAT_SETS
        s13.FLAG_SETS = [s for s in all_sets if s[0] == CHOSEN]
        s13.COMPAT_SETS = []
        rc = s13.probe(rest[0])
        if rc:
            print(f"{CHOSEN} gave no GPU adapter: probing all of session 13's flag sets", flush=True)
            s13.FLAG_SETS, s13.COMPAT_SETS = all_sets, compat
            rc = s13.probe(rest[0])
        sys.exit(rc)
    elif cmd == "page":
        # The pack carries the page's assets (pyodide, pyscript, stamps), not every default asset of the commit (a
        # later one needs a pip download, and the H200 reaches no index): no check, as in session 13's pack.
        import cera_web.tools.assets
        cera_web.tools.assets.ensure_assets = lambda **kw: None
        s13._force_mode()
        s13.h200_page.page(rest)
    else:
        sys.exit(__doc__)
