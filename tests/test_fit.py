"""Will it fit here? (issue 30, first part): the largest context whose KV buffers fit a device's binding limit, and
`python -m cera_web info MODEL --fit` (parameters, weights, the KV cache at a context in f32 and f16, the verdict of
this machine's adapter)."""
import subprocess
import sys
from pathlib import Path

import pytest

from cera_web.errors import UnsupportedModelError
from cera_web.gguf import open_gguf
from cera_web.models.memory import fit_report, largest_context
from cera_web.models.spec import model_spec

SMALL = Path(__file__).parent / "fixtures" / "small"


def test_largest_context_is_the_binding_limit_in_whole_256s(smollm2_gguf):
    g = open_gguf(smollm2_gguf)
    spec = model_spec(g)
    row = spec.kv_bytes(1)[0]                        # one layer's K for one token: 3 heads x 64 x 4 bytes
    assert row == 768 and spec.kv_bytes(1, "f16")[0] == 384
    exact = {"max-storage-buffer-binding-size": 768 * 4096, "max-buffer-size": 1 << 40}
    assert largest_context(spec, exact) == 4096
    fit_report(g, exact, 4096, spec=spec)            # the bound itself fits ...
    with pytest.raises(UnsupportedModelError, match="smaller context"):
        fit_report(g, exact, 4097, spec=spec)        # ... one token more does not
    less = dict(exact, **{"max-storage-buffer-binding-size": 768 * 4096 - 1})
    assert largest_context(spec, less) == 3840       # 4095 tokens fit: rounded down to 256s
    assert largest_context(spec, less, "f16") == 7936    # halves: 8191 tokens, in 256s
    assert largest_context(spec, exact, "f16") == 8192 == spec.context_train    # twice as many: the trained context
    assert largest_context(spec, {"max-storage-buffer-binding-size": 768 * 255}) == 255
    tiny = model_spec(open_gguf(SMALL / "qwen3-q8_0.gguf"))
    assert largest_context(tiny, exact) == tiny.context_train == 128


def test_info_fit_prints_what_the_model_needs_and_the_verdict():
    out = subprocess.run([sys.executable, "-m", "cera_web", "info", str(SMALL / "qwen3-q8_0.gguf"), "--fit",
                          "--context", "64"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    spec = model_spec(open_gguf(SMALL / "qwen3-q8_0.gguf"))
    per_token = spec.kv_bytes(1)[1]
    assert f"KV cache at 64 tokens (f32): {64 * per_token / 1e6:,.1f} MB ({per_token:,d} bytes a token)" in text
    assert f"({per_token // 2:,d} bytes a token)" in text
    assert "parameters: " in text and "trained context: 128" in text
    assert "fit (f32): yes on " in text and "up to 128 by its buffer limits" in text


def test_a_context_left_unset_is_the_most_the_limits_hold():
    """Engine.load without context_size: 2048 where the GPU's binding limit holds it, else the largest context it
    holds (in 256s, 256 at least: fewer is refused); a context asked for is kept (and refused when it does not
    fit)."""
    import asyncio
    from cera_web.engine import Engine
    from cera_web.gpu.native import NativeDevice
    path = SMALL / "qwen3-q8_0.gguf"
    row = model_spec(open_gguf(path)).kv_bytes(1)[0]
    for binding, want in ((row * 2048, 2048), (row * 2047, 1792), (row * 300, 256), (row * 256, 256)):
        dev = NativeDevice.create(limits_override={"max-storage-buffer-binding-size": binding})
        eng = asyncio.run(Engine.load(path, device=dev))
        assert eng.context_size == want, binding
        eng.close()
    for binding, context in ((row * 300, 512), (row * 255, None)):     # asked for; unset, but under 256 tokens
        dev = NativeDevice.create(limits_override={"max-storage-buffer-binding-size": binding})
        with pytest.raises(UnsupportedModelError, match="2048 tokens" if context is None else "smaller context"):
            asyncio.run(Engine.load(path, device=dev, context_size=context))


def test_the_page_loads_a_model_at_the_context_the_limits_hold():
    """The worker's glue (CPython): check_header, from a download's first bytes, says the context the load will have
    where the device's limits hold less than 2048 tokens of KV cache a layer (instead of refusing the model), the
    load has it, and a notice says so."""
    import asyncio
    import json
    from cera_web import webapp
    from cera_web.source import FileSource
    path = SMALL / "qwen3-q8_0.gguf"
    row = model_spec(open_gguf(path)).kv_bytes(1)[0]
    sent = []
    webapp.init(lambda text: sent.append(json.loads(text)))
    data = path.read_bytes()
    for binding, want in ((row * 2047, 1792), (row * 4096, 2048)):
        sent.clear()
        assert asyncio.run(webapp.prepare(json.dumps({"max-storage-buffer-binding-size": binding}), "webgpu"))
        if "shader-f16" in webapp._state.device.features and want < 2048:
            want = 2048         # the page's load sets no cache type: halves hold 2048 tokens here (preflight.auto_fit)
        reply = json.loads(webapp.check_header(data, len(data), path.name))
        assert reply["context"] == want and "ok" in reply, reply
        assert asyncio.run(webapp.load_source(FileSource(str(path)), "file"))
        assert webapp._state.engine.context_size == want
        notices = [m["text"] for m in sent if m["type"] == "notice"]
        assert notices == ([f"This GPU's buffer limits hold a KV cache of {want} tokens for this model (not 2048): "
                            "conversations are limited to that."] if want < 2048 else []), notices
    webapp._state.engine.close()
    webapp._state.engine = None
