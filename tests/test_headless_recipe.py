"""README's recipe for testing a site headlessly, run as written (the python block under "Testing a site that
embeds cera_web, headlessly", in a subprocess, against this suite's server): both runs give the same text, and it is
the text the engine gives natively on the CPU backend with the page's raw-completion settings and the same seed."""
from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def recipe() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Testing a site that embeds cera_web, headlessly", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.browser
def test_the_readme_recipe_gives_the_same_seeded_text_every_run(server_url, smollm2_gguf):
    got = subprocess.run([sys.executable, "-c", recipe()], env=dict(os.environ, CERA_URL=server_url),
                         capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    texts = json.loads(got.stdout.strip().splitlines()[-1])
    assert len(texts) == 2 and texts[0] == texts[1] and texts[0].strip(), texts

    from cera_web.engine import Engine
    from cera_web.sampling import GREEDY

    async def native():
        engine = await Engine.load(smollm2_gguf, device="cpu")
        try:        # the page's raw completion: greedy defaults, with the recipe's temperature and seed
            return (await engine.generate("Once upon a time", GREEDY.replace(temperature=0.8, seed=7,
                                                                              max_tokens=8))).text
        finally:
            engine.close()
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:        # asyncio.run away from the session's Playwright loop
        want = pool.submit(asyncio.run, native()).result()
    assert texts[0] == want
