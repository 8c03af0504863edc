"""The page when the GPU fails under it (issue 30, items 5 and 6), on its WebGPU path (?backend=webgpu: SwiftShader in
headless Chromium) with the tiny random qwen3 in chat mode; the tests share one page (Pyodide's start is most of
their time), in order.

- out of memory at upload: a second load whose KV cache the device refuses (an allocation over the device's
  maxBufferSize, injected into the worker's WebGPU) says which buffer and how big, what to do, and the model loaded
  before keeps answering, with the same reply
- the device lost while nothing runs, and then mid-reply (device.destroy(), as a driver reset or the browser
  reclaiming the GPU would): one line beside the conversation, which stays, "Reload model", and after it the
  conversation's kept prompt cache is restored and the next message answers
"""
from __future__ import annotations

import re

import pytest
from test_page_ui import GENERATE_MS, LOAD_MS, UI

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

QUERY = "?model=/fake/qwen3.gguf&mode=chat&backend=webgpu"

# In the worker: buffer 'k0' (layer 0's K cache) of the next loads asks for more than the device allows, so WebGPU
# refuses that allocation as it refuses one past the GPU's memory (a validation error instead of out-of-memory)
REFUSE_K0 = """() => {
    self.__createBuffer = GPUDevice.prototype.createBuffer;
    GPUDevice.prototype.createBuffer = function (desc) {
        if (desc.label !== 'k0') return self.__createBuffer.call(this, desc);
        return self.__createBuffer.call(this, {...desc, size: this.limits.maxBufferSize + 256});
    };
}"""
ALLOW_K0 = "() => { GPUDevice.prototype.createBuffer = self.__createBuffer; }"

# In the worker: the loaded model's device is destroyed as the first token of the next reply is posted
LOSE_AT_FIRST_TOKEN = """() => {
    const post = self.postMessage.bind(self);
    self.postMessage = (msg) => {
        post(msg);
        if (msg.type === 'token') {
            self.postMessage = post;
            webapp._state.engine.dev.device.destroy();
        }
    };
}"""


@pytest.fixture(scope="module")
def gpu_page(browser, server_url):
    ui = UI(browser, server_url, query=QUERY)
    try:
        ui.wait()
        expect(ui.page.locator("#backend-badge")).to_have_text("WebGPU")
        ui.setting("Temperature").fill("0")
        ui.setting("Ignore end of turn").check()
        yield ui
    finally:
        ui.close()


def _replies(ui) -> list[str]:
    return ui.log.locator(".turn .content").all_text_contents()


@pytest.mark.browser
def test_out_of_memory_at_upload_names_the_buffer_and_keeps_the_model_before(gpu_page):
    ui, page = gpu_page, gpu_page.page
    ui.say("hello", 3)
    first = _replies(ui)
    memory = page.locator("#memory").text_content()
    worker = page.workers[0]
    worker.evaluate(REFUSE_K0)
    try:
        page.get_by_text("Model and cache", exact=True).click()
        page.get_by_label("Model URL").fill("/fake/qwen3.gguf")
        seen = len(page.evaluate("window.__received"))
        page.get_by_role("button", name="Load", exact=True).click()
        page.wait_for_function("(n) => window.__received.slice(n).some((m) => m.type === 'ready' || "
                               "(m.type === 'error' && m.during === 'load'))", arg=seen, timeout=LOAD_MS)
        error = page.locator("#load-error")
        expect(error).to_have_attribute("data-kind", "GPUMemoryError", timeout=5_000)
    finally:
        worker.evaluate(ALLOW_K0)
    text = error.text_content()
    assert re.fullmatch(r"The GPU ran out of memory: the GPU could not allocate buffer 'k0' of [\d,]+ bytes \(.*\): "
                        r".+\. Load the model with a smaller context size or the f16 KV cache \(half its memory\), or "
                        r"a smaller model, or free GPU memory that other programs use", text), text
    assert "\n" not in text and "Traceback" not in text
    expect(ui.status).to_have_text(re.compile(r"^Ready\. Loading the new model failed; still using "))
    expect(page.locator("#memory")).to_have_text(memory)     # the model before, as it was
    # the model loaded before answers, as before
    page.get_by_role("button", name="Regenerate", exact=True).click()
    ui.wait(r"^Ready \(", GENERATE_MS)
    assert _replies(ui) == first


@pytest.mark.browser
def test_a_lost_device_keeps_the_conversation_and_reload_restores_its_prompt_cache(gpu_page):
    ui, page = gpu_page, gpu_page.page
    lost = page.locator("#lost")
    reload_model = page.get_by_role("button", name="Reload model")
    page.get_by_role("button", name="New chat").click()
    ui.say("What is the capital of France?", 3)
    page.wait_for_function("() => window.__received.filter((m) => m.type === 'cache').length > 0 && "
                           "window.__received.at(-1).type === 'cache'", timeout=GENERATE_MS)   # its state is kept
    turns = _replies(ui)
    expect(lost).to_be_hidden()

    # lost while nothing runs: the page says so at once
    page.workers[0].evaluate("webapp._state.engine.dev.device.destroy()")
    expect(lost).to_have_text(re.compile(r"^The GPU device was lost \(.+\); load the model again\. Your conversation "
                                         r"is kept\.\s*Reload model$"), timeout=GENERATE_MS)
    expect(ui.send).to_be_disabled()
    assert _replies(ui) == turns
    reload_model.click()
    ui.wait()
    expect(lost).to_be_hidden()
    notice = page.locator("#notice")
    expect(notice).to_have_text(re.compile(r"^Resumed this conversation from its prompt cache"), timeout=GENERATE_MS)

    # lost mid-reply: the reply fails with DeviceLostError, the message goes back to the box, the turns before stay
    page.workers[0].evaluate(LOSE_AT_FIRST_TOKEN)
    page.get_by_label("Max tokens").fill("40")
    ui.message.fill("And of Italy?")
    ui.send.click()
    expect(lost).to_be_visible(timeout=GENERATE_MS)
    expect(ui.page.locator("#lost-text")).to_have_text(re.compile(r"^The GPU device was lost .*Your conversation is "
                                                                  r"kept\.$"))
    assert [m["kind"] for m in ui.received("error")][-1:] == ["DeviceLostError"]
    expect(ui.message).to_have_value("And of Italy?")
    assert _replies(ui) == turns
    reload_model.click()
    ui.wait()
    expect(notice).to_have_text(re.compile(r"^Resumed this conversation from its prompt cache"), timeout=GENERATE_MS)
    ui.say("And of Italy?", 3)
    done = ui.received("done")[-1]
    assert done["cached_tokens"] > 0 and len(done["tokens"]) == 3, done
    assert _replies(ui)[:len(turns)] == turns and len(_replies(ui)) == len(turns) + 2
