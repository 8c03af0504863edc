"""The Python side of the page's Web Worker (web/worker.js): adapts worker messages to the engine API.

The worker calls, in order:

    init(post)                          post(json_text) sends one message object to the page
    await load(array_buffer, name)      load a model from a JS ArrayBuffer holding the whole GGUF file
    await generate(prompt, max_tokens, chat)
    stop()                              called from the worker's onmessage while generate() is suspended

Nothing here raises: every failure becomes an ``{"type": "error", "kind", "message", "during"}`` message and the
worker stays usable. A failed load keeps the model that was loaded before. The message shapes are documented at the
top of web/worker.js.

Only :func:`load` is browser-specific (it wraps the ArrayBuffer); :func:`load_source` takes any model source, so the
same glue runs in CPython too.
"""
from __future__ import annotations

import json
import math
import sys
import traceback

from .errors import CeraError, InputError

_post = None          # the worker's post(json_text)
_engine = None        # the loaded Engine, replaced only by a successful load
_generating = False   # True while generate() is running, so stop() never cancels a later run


def init(post) -> None:
    """Set the function that sends messages to the page; it takes one JSON text."""
    global _post
    _post = post


def _finite(x: float):
    """A float JSON.parse accepts (it has no NaN or Infinity): None stands for 'not measured'."""
    x = float(x)
    return x if math.isfinite(x) else None


def _send(**message) -> None:
    _post(json.dumps(message))


def _report(exc: BaseException, during: str) -> None:
    """Post an error message. CeraErrors carry their own advice; anything else is a bug, so log the traceback."""
    if isinstance(exc, CeraError):
        message = str(exc)
    else:
        traceback.print_exception(exc, file=sys.stderr)   # to the browser console
        message = traceback.format_exception_only(exc)[-1].strip()
    _send(type="error", kind=type(exc).__name__, message=message, during=during)


async def load(array_buffer, name: str) -> bool:
    """Load a model from a JS ArrayBuffer (in the browser). Returns whether it succeeded."""
    try:
        from .gpu.browser import ArrayBufferSource
        source = ArrayBufferSource(array_buffer, name)
    except Exception as exc:
        _report(exc, "load")
        return False
    return await load_source(source)


async def load_source(source) -> bool:
    """Load a model from any source (see cera_web.source); posts progress, then 'ready' or 'error'."""
    global _engine

    def on_progress(stage: str, done: int, total: int) -> None:
        _send(type="progress", stage=stage, done=int(done), total=int(total))

    try:
        from .engine import Engine
        engine = await Engine.load(source, on_progress=on_progress)
    except Exception as exc:
        _report(exc, "load")
        return False
    previous, _engine = _engine, engine
    if previous is not None and hasattr(previous, "close"):
        try:
            previous.close()   # release its GPU buffers
        except Exception as exc:
            traceback.print_exception(exc, file=sys.stderr)
    _send(type="ready", model=engine.name, backend=engine.backend)
    return True


async def generate(prompt: str, max_tokens: int, chat: bool) -> bool:
    """Run one generation, posting each token, then 'done' (or 'error'). Returns whether it succeeded."""
    global _generating
    if _engine is None:
        _report(InputError("no model is loaded yet: wait for loading to finish, or load a model URL"), "generate")
        return False

    def on_token(token_id: int, text: str) -> None:
        _send(type="token", id=int(token_id), text=text)

    _generating = True
    try:
        result = await _engine.generate(prompt, max_tokens=int(max_tokens), on_token=on_token, chat=bool(chat))
    except Exception as exc:
        _report(exc, "generate")
        return False
    finally:
        _generating = False
    _send(type="done", text=result.text, stop_reason=result.stop_reason,
          prompt_tokens=[int(t) for t in result.prompt_tokens], tokens=[int(t) for t in result.tokens],
          prefill_tok_s=_finite(result.prefill_tok_s), decode_tok_s=_finite(result.decode_tok_s),
          prefill_ms=_finite(result.prefill_ms), decode_ms=_finite(result.decode_ms))
    return True


def stop() -> None:
    """Ask the running generation to stop after its current step (no effect when nothing is running)."""
    if _generating and _engine is not None:
        _engine.cancel()
