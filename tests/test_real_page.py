"""The real checkpoints in the page (headless Chromium, real Pyodide, WebGPU on SwiftShader): the page loads Gemma 3
270M and Qwen2.5-Coder-0.5B from the server (`?model=/models/FILE`) and generates, in raw completion, transformers' greedy tokens
(tests/fixtures/real_reference.json) for the raw prompt "The capital of France is". Optional assets: skipped when
not fetched (`python -m cera_web.tools.assets --models`; tests/run.py fetches them).

A few tokens only: SwiftShader on two cores decodes these models at seconds a token. The first GREEDY steps of this
prompt have reference margins well above the float32 noise (checked below), so the text must match exactly.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cera_web.tools import assets
from cera_web.gguf import open_gguf
from cera_web.tokenizer import Tokenizer

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

REF = json.loads((Path(__file__).parent / "fixtures" / "real_reference.json").read_text(encoding="utf-8"))
GREEDY = 6
LOAD_MS = 900_000
GENERATE_MS = 600_000


# CI runs the smallest checkpoint in the page (each one runs natively in test_real_models); the others are marked
# slow (minutes each in SwiftShader) and run with --all.
PAGE_CI = "gemma3-270m"


@pytest.mark.parametrize("name", [n if n == PAGE_CI else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(REF["models"])])
def test_page_generates_with_a_real_checkpoint(browser, server_url, name):
    if not assets.is_installed(name):
        pytest.skip(f"{name} is not fetched: python -m cera_web.tools.assets --models (tests/run.py does)")
    path = assets.asset_path(name)
    case = next(p for p in REF["models"][name]["prompts"] if p["name"] == "capital")
    assert min(case["margins"][:GREEDY]) > 0.05
    want = Tokenizer.from_gguf(open_gguf(path)).decode(case["greedy_ids"][:GREEDY])
    context = browser.new_context()
    page = context.new_page()
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    status = page.get_by_role("status")

    def ready(timeout):
        try:
            expect(status).to_have_text(re.compile(r"^Ready|^Loading failed"), timeout=timeout)
            expect(status).to_have_text(re.compile(r"^Ready"), timeout=1)
        except AssertionError as e:
            errors = page.locator(".error").all_text_contents()
            raise AssertionError(f"{e}\n{errors!r}\n" + "\n".join(console[-30:])) from None

    try:
        page.goto(f"{server_url}/?model=/models/{path.name}&backend=webgpu")     # the page loads the model it is given
        ready(LOAD_MS)
        from cera_web.names import display_name
        expect(page.locator("#model-name")).to_have_text(display_name(open_gguf(path), path.name))
        expect(page.locator("#model-name")).to_have_attribute("title", path.name)
        page.get_by_label("Raw completion").check()               # Gemma 270M (no template) opens in it already
        expect(page.get_by_label("Chat template")).not_to_be_checked()
        page.get_by_label("Prompt", exact=True).fill(case["prompt"])
        page.get_by_label("Max tokens").fill(str(GREEDY))
        page.get_by_role("button", name="Generate").click()
        expect(status).to_have_text(re.compile(r"^Ready \(max tokens reached\)"), timeout=GENERATE_MS)
        assert page.get_by_role("region", name="Output").text_content() == want
    finally:
        context.close()
