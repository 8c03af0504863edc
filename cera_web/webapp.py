"""The Python side of the page's Web Worker (web/worker.js); the notebook's (web/notebook.html) is notebook.py.

Worker glue. The messages it answers and posts are declared in cera_web/protocol.py. The worker calls:

    init(post)                          post(json_text) sends one message object to the page
    settings_form()                     JSON text: the generation settings for the page's settings form
    await prepare(limits_json, backend) make the GPU device the next load uses (limits_json: "" or a JSON object of
                                        limits to lower, e.g. {"max-storage-buffer-binding-size": 16000000}, to
                                        simulate a smaller GPU); backend: "auto" (the GPU, but the CPU where the
                                        adapter is a software fallback and the model fits the CPU path: see
                                        choose_backend), "webgpu" (the adapter whatever it is) or "cpu" (the numpy
                                        reference model; no adapter needed)
    check_header(prefix, total, name)   the model store calls this as a download's first bytes arrive; returns JSON
                                        text: {"need": n} (show me n bytes), {"ok": fit} or {"error": {kind, message}}
    await load(array_buffer, name)      load a model from a JS ArrayBuffer holding the whole GGUF file
    await load_blob(blob, name)         ... from a JS Blob/File (read a slice at a time; never wholly in memory)
    await handle(message_json)          one request the protocol hands to Python (generate, chat-*, the OpenAI
                                        methods): looked up in protocol.REQUESTS and run by the function of the same
                                        fields (_HANDLERS); a request that generates posts 'prompt', 'token' or
                                        'chunk' messages under its id, then one 'done' or one 'error'
    cancel(id)                          called from the worker's onmessage while a generation is suspended: stop
                                        request id (None: whatever runs)
    snapshot_model()                    the loaded model's key in snapshot file names ("" when none is loaded)
    await save_snapshot()               the page's conversation and its state as snapshot bytes (None: nothing to
                                        keep), which the worker writes to OPFS (its snapshot-* requests; the one
                                        function here that may raise: the worker makes a failure a 'notice')
    restore_snapshot(data)              make snapshot bytes (a JS Uint8Array) the engine's state; JSON text
                                        {"tokens": n} or {"error": one line} (then nothing changed)

Nothing there raises: every failure becomes an 'error' message (protocol.EVENTS) and the worker stays usable. A
failed load keeps the model that was loaded before. :func:`load_source` takes any model source (see cera_web.source),
so the same glue runs in CPython too, and so do the request functions (generate, chat_send, ..., api).

Checks (any Python): :func:`fit_report` (models/memory.py) says whether a model's buffers fit the device's limits
before anything is uploaded (UnsupportedModelError with needed vs available when not); :func:`memory_summary` says
what a loaded engine holds on the GPU (weights, KV cache, other buffers). The notebook's helpers are in notebook.py.
"""
from __future__ import annotations

import inspect
import json
import math
import sys
import traceback

from . import protocol
from .errors import CeraError, InputError
from .gguf import parse_gguf
from .loading import BACKENDS, CPU_WEIGHT_BYTES, check, choose_backend, plan_load  # noqa: F401  (this module's API)
from .models.memory import CONTEXT_SIZE, fit_report  # noqa: F401  (fit_report: part of this module's API)


class _Worker:
    """What the worker's Python side keeps from one message to the next (one per worker: ``_state``)."""

    def __init__(self):
        self.post = None            # the worker's post(json_text)
        self.engine = None          # the loaded Engine, replaced only by a successful load
        self.chat = None            # the page's ChatSession on engine (one, so its KV cache is reused turn to turn)
        self.device = None          # the device made by prepare() for the next load
        self.device_limits = None   # the limits override it was made with
        self.backend = "webgpu"     # the backend prepare() was asked for: "auto", "webgpu" or "cpu" (see
                                    # choose_backend); a load_source() without prepare() takes the GPU as it is
        self.header = None          # (file size, first bytes, loading.Header) that check_header read from the
                                    # download since prepare(): the load of that file uses it, not a second parse
        self.running = None         # (id,) of the request generating now, None when none: what cancel() may stop
        self.adapters = {}          # preflight: the adapter's facts and micro-benchmark, by limits override
        self.cpu_bench = None       # preflight: the CPU path's micro-benchmark (cera_web.preflight.cpu_microbench)


_state = _Worker()


def init(post) -> None:
    """Set the function that sends messages to the page; it takes one JSON text."""
    _state.post = post


def _finite(x: float):
    """A float JSON.parse accepts (it has no NaN or Infinity): None stands for 'not measured'."""
    x = float(x)
    return x if math.isfinite(x) else None


def _json_safe(x):
    """x with every non-finite float as None (JSON.parse has no NaN or Infinity)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _send(**message) -> None:
    """Post one message of protocol.EVENTS (a kind or field it does not declare is a bug: ValueError)."""
    try:
        protocol.check(protocol.EVENTS, message, "message")
    except InputError as exc:
        raise ValueError(f"webapp posted a message the protocol does not declare: {exc}") from None
    if message["type"] == "done" and message["stop_reason"] not in protocol.STOP_REASONS:
        raise ValueError(f"stop_reason {message['stop_reason']!r} is not in protocol.STOP_REASONS")
    _state.post(json.dumps(message))


def _describe(exc: BaseException) -> dict:
    """{kind, message} of an error. CeraErrors carry their own advice; anything else is a bug: log the traceback."""
    if isinstance(exc, CeraError):
        message = str(exc)
    else:
        traceback.print_exception(exc, file=sys.stderr)   # to the browser console
        message = traceback.format_exception_only(exc)[-1].strip()
    return {"kind": type(exc).__name__, "message": message}


def _report(exc: BaseException, during: str, rid=None, params=None) -> None:
    """Post the 'error' of a failed request (``rid``: its id; ``params``: its arguments, to name the one at fault).
    error_type follows OpenAI's: 'invalid_request_error' for bad input (the request can be fixed), 'server_error'
    otherwise; param: the argument the message names among its first words, else None."""
    d = _describe(exc)
    words = d["message"].replace("(s)", "").replace(",", " ").replace(":", " ").split()
    names = [w for w in words[:6] if isinstance(params, dict) and w in params]
    _send(type="error", id=rid, during=during, kind=d["kind"], message=d["message"],
          error_type="invalid_request_error" if isinstance(exc, InputError) else "server_error",
          param=names[0] if names else None)


# -- will it fit? ----------------------------------------------------------------------------------------------------

class _NeedMore(Exception):
    """The header parser wants bytes past the prefix received so far."""

    def __init__(self, end: int):
        super().__init__(end)
        self.end = end


def _parse_prefix(data: bytes, total: int, name: str):
    """Parse a GGUF header from the first bytes of a file of ``total`` bytes (0: unknown); _NeedMore if short."""
    size = total or (1 << 62)

    def read(offset: int, n: int) -> bytes:
        end = min(offset + n, size)
        if end > len(data):
            raise _NeedMore(end)
        return data[offset:end]

    return parse_gguf(read, size, name=name)


def check_header(prefix, total, name: str, limits: dict | None = None) -> str:
    """Check a model from the first bytes of its download (a JS Uint8Array or bytes) before the rest arrives: the
    header must parse, the architecture must be supported, and its tensors must fit the device's buffers (``limits``,
    default: those of the device prepare() made). Returns JSON text: {"need": n} when the header runs past the bytes
    given, {"ok": fit_report, "context": the context the load will have (loading.auto_context: 2048, or the most the
    device's buffer limits hold)} or {"error": {kind, message}} (the download is then cancelled)."""
    data = prefix.to_bytes() if hasattr(prefix, "to_bytes") else bytes(prefix)
    if limits is None and _state.device is not None:
        limits = _state.device.limits
    try:
        features = _state.device.features if _state.device is not None else ()
        header = check(_parse_prefix(data, int(total), name), limits, None, None, features)
    except _NeedMore as more:
        return json.dumps({"need": more.end})
    except Exception as exc:
        return json.dumps({"error": _describe(exc)})
    if int(total) > 0:              # the file's size known: the load of these bytes reuses the header
        _state.header = (int(total), data[:4096], header)
    return json.dumps({"ok": header.fit, "context": header.fit_for[1] if header.fit_for else CONTEXT_SIZE})


async def preflight(prefix, total, name: str, limits_json: str = "", backend: str = "auto", context=None,
                    quota_json: str = "") -> str:
    """The preflight of a model from its header's bytes (a JS Uint8Array or bytes) and its file size, before any
    download (cera_web.preflight): memory at the context (f32 and f16 cache), the fit against this adapter (limits,
    then a probe allocation of what it needs, released at once), the storage quota ({usage, quota} as JSON text), the
    context and cache a load would take, and the speed estimated from micro-benchmarks of this adapter and of the CPU
    path (each measured once a worker, per adapter and limits). Returns JSON text {"report", "summary", "lines"}
    or {"error": {kind, message}}; never raises."""
    from . import preflight as pf
    try:
        if backend not in BACKENDS:
            raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        data = prefix.to_bytes() if hasattr(prefix, "to_bytes") else bytes(prefix)
        gguf = _parse_prefix(data, int(total), name)
        override = json.loads(limits_json) if limits_json else None
        facts = await _adapter_facts(override) if backend != "cpu" else None
        quota = json.loads(quota_json) if quota_json else None
        spec = check(gguf).spec
        kw = dict(limits=facts["limits"], features=facts["features"], is_cpu=facts["is_cpu"],
                  adapter=facts["name"]) if facts else {}
        report = pf.preflight(gguf, int(total), backend=backend, context=context, cpu_bench=_state.cpu_bench,
                              quota=quota, spec=spec, **kw)
        if report["backend"] == "cpu" and not report.get("refused") and _state.cpu_bench is None:
            _state.cpu_bench = await pf.cpu_microbench()         # measured once a worker, when a model needs it
            report = pf.preflight(gguf, int(total), backend=backend, context=context, cpu_bench=_state.cpu_bench,
                                  quota=quota, spec=spec, **kw)
        if report["backend"] == "webgpu" and facts and not report.get("refused"):
            if facts["bench"] is None:              # measured once a worker, for the first model that needs it
                facts["bench"] = await pf.gpu_microbench(await _probe_device(override))
            kv = report["fit"]["kv_cache"] if report["fit"]["fits"] else "f32"
            need = report["memory"][kv]["total"]
            if need > facts["probed_ok"]:           # a probe of at least this much said yes already: none again
                probe = await pf.probe_memory(await _probe_device(override), need)
                if probe["ok"]:
                    facts["probed_ok"] = probe["bytes"]
            else:
                probe = {"bytes": need, "ok": True, "error": None}
            report = pf.preflight(gguf, int(total), backend=backend, context=context, bench=facts["bench"],
                                  cpu_bench=_state.cpu_bench, quota=quota, spec=spec, probe=probe, **kw)
    except _NeedMore as more:
        return json.dumps({"need": more.end})
    except Exception as exc:
        return json.dumps({"error": _describe(exc)})
    return json.dumps(_json_safe({"report": report, "summary": pf.summary(report), "lines": pf.describe(report)}))


async def _probe_device(override):
    """A GPU device with the adapter's limits (lowered by override) for a preflight: the loaded model's, else the one
    prepare() made, else one made here and kept for the next load (as prepare() would)."""
    eng = _state.engine
    if eng is not None and not eng.cpu and getattr(eng.dev, "limits", None) is not None and override is None:
        return eng.dev
    if _state.device is None or _state.device_limits != override:
        if _state.device is not None:
            _state.device.destroy()
        from .gpu import get_device
        _state.device = await get_device(limits_override=override)
        _state.device_limits = override
    return _state.device


async def _adapter_facts(override) -> dict:
    """{limits, features, is_cpu, name, bench (None until a model needs it), probed_ok (the largest probe that
    succeeded)} of this worker's adapter (with override), read once."""
    key = json.dumps(override, sort_keys=True)
    if key not in _state.adapters:
        dev = await _probe_device(override)
        _state.adapters[key] = {"limits": dict(dev.limits), "features": set(dev.features), "is_cpu": dev.is_cpu,
                                "name": dev.name, "bench": None, "probed_ok": 0}
    return _state.adapters[key]


# -- loading (choose_backend, BACKENDS and CPU_WEIGHT_BYTES: cera_web.loading) ---------------------------------------

async def prepare(limits_json: str = "", backend: str = "auto") -> bool:
    """Make the device the next load uses (reusing one made before with the same limits). limits_json: a JSON object
    of device limits to lower (kebab-case WebGPU names), to simulate a smaller GPU; "" for none. backend: one of
    BACKENDS ("cpu" makes no device: the next load runs on the numpy reference model). Posts an 'error' and returns
    False when no GPU can be had for "auto" or "webgpu" (the page then offers the CPU)."""
    try:
        if backend not in BACKENDS:
            raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        _state.backend = backend
        _state.header = None
        override = json.loads(limits_json) if limits_json else None
        if override is not None and (not isinstance(override, dict)
                                     or not all(isinstance(v, int) and v > 0 for v in override.values())):
            raise InputError(f"limits must be a JSON object of positive integers, got {limits_json!r}")
        if backend == "cpu" or _state.device is None or override != _state.device_limits:
            if _state.device is not None:
                _state.device.destroy()
                _state.device = None
            if backend != "cpu":
                from .gpu import get_device
                _state.device = await get_device(limits_override=override)
            _state.device_limits = override
    except Exception as exc:
        _report(exc, "load")
        return False
    return True


async def load(array_buffer, name: str, origin: str = "download") -> bool:
    """Load a model from a JS ArrayBuffer (in the browser). Returns whether it succeeded. origin: where the bytes
    came from ('download', 'cache', 'file'), passed on in the 'ready' message."""
    from .gpu.browser import ArrayBufferSource
    return await _load_from(ArrayBufferSource, array_buffer, name, origin)


async def load_blob(blob, name: str, origin: str = "file") -> bool:
    """Load a model from a JS Blob or File (in a worker), read a slice at a time. Returns whether it succeeded."""
    from .gpu.browser import BlobSource
    return await _load_from(BlobSource, blob, name, origin)


async def load_url(url: str, size: int, name: str, origin: str = "server") -> bool:
    """Load a model from a server that answers Range requests, read a slice at a time (in a worker): what the page
    does when it cannot cache a model. Returns whether it succeeded."""
    from .gpu.browser import RangeSource
    return await _load_from(lambda data, name: RangeSource(data, size, name), url, name, origin)


async def _load_from(source_class, data, name: str, origin: str) -> bool:
    try:
        source = source_class(data, name)
    except Exception as exc:
        _report(exc, "load")
        return False
    return await load_source(source, origin)


async def _load_engine(source, device, on_progress, backend: str = "webgpu", context_size: int | None = None,
                       header=None):
    """Load ``source`` through cera_web.loading.plan_load (bad files fail there, before a GPU is needed) onto
    ``device`` (made there when None and the backend is not "cpu"; no CPU fallback: the page offers it), or on the
    CPU where choose_backend says so (the device is then released). header: a loading.Header of this file read
    before (check_header). Returns (engine, fit_report); the device is destroyed when loading fails."""
    from .engine import Engine
    try:
        plan = await plan_load(source, device=device, backend=backend, cpu_fallback=False, kv_cache=None,
                               context_size=context_size, header=header, on_progress=on_progress)
        device = plan.device
        return await Engine.from_plan(plan, on_progress), plan.fit
    except BaseException:
        if device is not None:
            device.destroy()
        raise


def _checked(source):
    """The loading.Header check_header read from this download's first bytes (None when it read none, or another
    file's), taken: the load uses it instead of parsing the header again."""
    checked, _state.header = _state.header, None
    if checked is None or checked[0] != source.size or source.read(0, len(checked[1])) != checked[1]:
        return None
    return checked[2]


async def load_source(source, origin: str | None = None) -> bool:
    """Load a model from any source (see cera_web.source); posts progress, then 'ready' or 'error'."""

    def on_progress(stage: str, done: int, total: int) -> None:
        _send(type="progress", stage=stage, done=int(done), total=int(total))

    try:
        device, _state.device = _state.device, None    # the load owns the prepared device from here on
        engine, _fit = await _load_engine(source, device, on_progress, _state.backend, header=_checked(source))
    except Exception as exc:
        _report(exc, "load")
        return False
    previous, _state.engine = _state.engine, engine
    from .session import ChatSession
    _state.chat = ChatSession(engine)            # a new model starts a new conversation
    if previous is not None:
        try:
            previous.close()   # release its GPU buffers
        except Exception as exc:
            traceback.print_exception(exc, file=sys.stderr)
    cpu = engine.cpu
    if hasattr(engine.dev, "on_lost"):          # the browser's device.lost, while nothing runs too
        engine.dev.on_lost = lambda message: _send(type="device-lost", text=message)
    _send(type="ready", model=engine.name, backend=engine.backend, memory=memory_summary(engine), origin=origin,
          cpu=cpu, backend_kind="cpu" if cpu else "webgpu", backend_reason=_backend_reason(cpu),
          split=split_tensors(engine), **_page_facts(engine))
    if engine.context_size < CONTEXT_SIZE:
        _send(type="notice", text=f"This GPU's buffer limits hold a KV cache of {engine.context_size} tokens for "
                                  f"this model (not {CONTEXT_SIZE}): conversations are limited to that.")
    return True


async def load_draft(data, name: str | None) -> bool:
    """Load a JS Blob/File (or an ArrayBuffer, or {url, size}: a server's file read by Range requests) as the loaded
    model's draft model for speculative decoding (engine
    .load_draft: same tokenizer, the same device); data None: drop the draft model. Posts 'draft' or an 'error'
    (the model loaded stays as it was). A model loaded later starts without one."""
    try:
        engine = _state.engine
        if engine is None:
            raise InputError("load a model first: a draft model speeds up the model loaded")
        if data is None:
            if engine.draft is not None:
                engine.draft.close()
                engine.draft = None
        else:
            from .gpu.browser import ArrayBufferSource, BlobSource, RangeSource
            source = (ArrayBufferSource(data, name) if hasattr(data, "byteLength")
                      else RangeSource(data.url, data.size, name) if hasattr(data, "url") else BlobSource(data, name))
            await engine.load_draft(source)
    except Exception as exc:
        _report(exc, "load-draft")
        return False
    draft = _state.engine.draft
    _send(type="draft", name=None if draft is None else _page_facts(draft)["name"],
          file=None if draft is None else _page_facts(draft)["file"])
    return True


def _backend_reason(cpu: bool) -> str:
    """Why the page runs where it runs, in a sentence for the page."""
    if not cpu:
        return "WebGPU" + (" (asked for with ?backend=webgpu)" if _state.backend == "webgpu" else "")
    if _state.backend == "cpu":
        return "the CPU, as chosen"
    return ("the CPU: this browser's WebGPU adapter is a software fallback that runs on the CPU, and the CPU path is "
            "faster here (?backend=webgpu uses the adapter anyway)")


def memory_summary(engine) -> dict | None:
    """Bytes of GPU memory a loaded engine holds: {weights, kv_cache, other, total, buffers} (ints), None for the CPU
    fallback (see models/memory.py)."""
    return engine.model.memory()


def split_tensors(engine) -> dict:
    """{tensor name: number of GPU buffers} of the weights too big for one binding (see models/base.py pieces)."""
    return {name: len(parts) for name, parts in engine.model.split_tensors().items()}


def _page_facts(engine) -> dict:
    """What the page needs to know about a loaded model beyond model (general.name as the file has it): name (the
    name people know it by, cera_web.names.display_name: the rule of the page's model menu, so the menu, the loaded
    model panel and the API page say the same), file (the name of the file it came from: shown on hover) and
    chat_template (whether the file has one: the page opens chat models in chat mode, and base models in raw
    completion)."""
    from .names import display_name
    file = getattr(engine.source, "name", None) or engine.name
    return {"name": display_name(engine.gguf, file), "file": file,
            "chat_template": bool(engine.gguf.metadata.get("tokenizer.chat_template"))}


# -- requests: one path for the page's runs and the OpenAI-shaped API -------------------------------------------------

def settings_form() -> str:
    """JSON text for the page's settings form: {"fields": SamplingParams.describe() (name, label, default, min, max,
    help), "raw": the defaults of a raw completion (greedy: cera_web.sampling.GREEDY; chat turns use the fields'
    defaults), "stop_reasons": protocol.STOP_REASONS (what the page says for each)}."""
    from .sampling import GREEDY, SamplingParams
    return json.dumps({"fields": SamplingParams.describe(), "raw": GREEDY.as_dict(),
                       "stop_reasons": protocol.STOP_REASONS})


def _number(text):
    """A form value as an int or float; left as it was when it is not a number (the engine then says what is
    wrong with it)."""
    if not isinstance(text, str):
        return text
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return text


def parse_settings(form) -> dict:
    """Engine settings from the settings form's values as typed (a dict, or JSON text of one; "" or None for none).

    Numbers are parsed (a value that is not a number is passed on as typed, for the engine's InputError); seed ""
    means a fresh random seed; stop: one stop string a line (``\\n`` and ``\\t`` stand for a newline and a tab);
    stop_token_ids: ids separated by commas or spaces; ignore_eos: a boolean; logit_bias: JSON text of {token id:
    bias} ("" for none). Names the engine does not know are passed on too (it refuses them by name), and so are
    the page's structured output and token probabilities: response_format (an OpenAI-style dict, see
    cera_web.json_schema.constraint; a bad one is a GrammarError before generation), logprobs and top_logprobs."""
    if form is None:
        form = {}
    if isinstance(form, str):
        form = json.loads(form) if form.strip() else {}
    if not isinstance(form, dict):
        raise InputError(f"settings must be an object of name: value, got {form!r}")
    out = {}
    for name, value in form.items():
        if name == "stop" and isinstance(value, str):
            out[name] = [line.replace("\\n", "\n").replace("\\t", "\t") for line in value.split("\n") if line]
        elif name == "stop_token_ids" and isinstance(value, str):
            parts = value.replace(",", " ").split()
            ids = [_number(p) for p in parts]
            out[name] = ids if all(isinstance(i, int) for i in ids) else value
        elif name == "seed" and isinstance(value, str) and not value.strip():
            out[name] = None
        elif name == "ignore_eos":
            out[name] = value
        elif name == "logit_bias" and isinstance(value, str):    # JSON text of {token id: bias}; "" for none
            try:
                out[name] = json.loads(value) if value.strip() else {}
            except ValueError:
                out[name] = value
        else:
            out[name] = _number(value)
    return out


def run_fields(result, tokenizer) -> dict:
    """The 'done' fields of a finished generation (an engine GenerationResult): text, stop_reason, prompt_tokens and
    tokens (token ids), cached_tokens (prompt tokens the KV cache held: not prefilled again), drafted / accepted
    (speculative decoding's drafted tokens and those kept), seed (text: a 64-bit
    seed is beyond JS numbers; None when greedy), prefill_tok_s, decode_tok_s, prefill_ms, decode_ms (None when not
    measured; decode_tok_s with one token: there was no decode step) and logprobs (token_probs)."""
    return dict(text=result.text, stop_reason=result.stop_reason,
                prompt_tokens=[int(t) for t in result.prompt_tokens], tokens=[int(t) for t in result.tokens],
                cached_tokens=int(result.cached_tokens), drafted=int(result.drafted),
                accepted=int(result.accepted), seed=None if result.seed is None else str(result.seed),
                prefill_tok_s=_finite(result.prefill_tok_s),
                decode_tok_s=_finite(result.decode_tok_s) if len(result.tokens) > 1 else None,
                prefill_ms=_finite(result.prefill_ms), decode_ms=_finite(result.decode_ms),
                logprobs=token_probs(result, tokenizer))


def token_probs(result, tokenizer) -> list | None:
    """The page's view of result.logprobs (None when not asked for): one entry per generated token, {"text": the
    text it adds (a character split across tokens belongs to the token that completes it), "logprob": float, "top":
    [[text, logprob], ...] the most likely alternatives, best first}."""
    if result.logprobs is None:
        return None
    from .tokenizer import StreamDecoder
    decoder, out = StreamDecoder(tokenizer), []
    for i, (tok, lp) in enumerate(zip(result.tokens, result.logprobs)):
        text = decoder.push(tok) + (decoder.flush() if i == len(result.tokens) - 1 else "")
        top = [[tokenizer.token_bytes(t).decode("utf-8", "replace"), _finite(v)] for t, v in lp["top_logprobs"]]
        out.append({"text": text, "logprob": _finite(lp["logprob"]), "top": top})
    return out


async def _run(kind: str, rid, make, params=None, **extra) -> bool:
    """Run one request that generates, the one path of every such kind. ``make(on_token, on_result)`` is its
    coroutine: it passes each GenerationResult of the request to on_result and returns the API reply (a dict, an
    async iterator of chunk dicts when streamed) or None (page kinds). Posts 'prompt' and 'token' (or 'chunk')
    messages under ``rid``, then one 'done' (with ``extra``: values, or functions called after the run) or one
    'error'. ``params``: the request's arguments, for naming the one an error is about."""
    engine = _state.engine
    if engine is None:
        _report(InputError("no model is loaded yet: wait for loading to finish, or load a model URL"), kind, rid)
        return False
    results = []

    def on_token(token_id: int, text: str) -> None:
        _send(type="token", id=rid, token=int(token_id), text=text)

    def on_prefill(done: int, total: int) -> None:
        _send(type="prompt", id=rid, done=int(done), total=int(total))

    _state.running = (rid,)
    engine.on_prefill = on_prefill
    try:
        reply = await make(on_token, results.append)
        if reply is not None and not isinstance(reply, dict):     # a stream: its chunks are the reply
            async for chunk in reply:
                _send(type="chunk", id=rid, chunk=_json_safe(chunk))
            reply = None
    except Exception as exc:
        if not isinstance(exc, CeraError) and isinstance(exc, TypeError) and "argument" in str(exc):
            exc = InputError(str(exc).replace("create() ", ""))     # e.g. an API request without 'messages'
        _report(exc, kind, rid, params)
        return False
    finally:
        _state.running = None
        engine.on_prefill = None
    _send(type="done", id=rid, **run_fields(results[-1], engine.tokenizer), memory=memory_summary(engine),
          result=_json_safe(reply), **{k: v() if callable(v) else v for k, v in extra.items()})
    return True


async def generate(prompt: str, max_tokens: int, chat: bool = False, settings="", id=None) -> bool:
    """Run one raw completion (``chat``: the prompt wrapped as one user message), posting each token, then 'done'
    (or 'error'). Greedy unless the settings say otherwise. Returns whether it succeeded."""
    async def run(on_token, on_result):
        s = parse_settings(settings)
        s["max_tokens"] = int(max_tokens)
        on_result(await _state.engine.generate(prompt, on_token=on_token, chat=bool(chat), **s))
    return await _run("generate", id, run)


def _chat_turn(kind: str, turn):
    """A request function running ``turn(chat_session, on_token, settings)``, one of ChatSession's turns; its 'done'
    carries the conversation after the turn (a turn stopped before any reply text is dropped)."""
    async def request(settings="", system=None, id=None) -> bool:
        async def run(on_token, on_result):
            if system is not None:
                set_system(system)
            on_result(await turn(_state.chat, on_token, parse_settings(settings)))
        return await _run(kind, id, run, mode="chat", messages=lambda: [dict(m) for m in _state.chat.messages])
    return request


async def chat_send(text: str, settings="", system=None, id=None) -> bool:
    """Send the user message ``text`` to the page's conversation (with ``system`` as its system message, when
    given) and stream the reply."""
    async def turn(chat, on_token, s):
        return await chat.send(text, on_token=on_token, **s)
    return await _chat_turn("chat-send", turn)(settings, system, id)


async def chat_regenerate(settings="", system=None, id=None) -> bool:
    """Generate the last reply of the page's conversation again."""
    async def turn(chat, on_token, s):
        return await chat.regenerate(on_token=on_token, **s)
    return await _chat_turn("chat-regenerate", turn)(settings, system, id)


async def chat_continue(settings="", system=None, id=None) -> bool:
    """Generate more of the last reply of the page's conversation (after a max-tokens stop), appended to it."""
    async def turn(chat, on_token, s):
        return await chat.continue_reply(on_token=on_token, **s)
    return await _chat_turn("chat-continue", turn)(settings, system, id)


API_METHODS = ("chat.completions.create", "completions.create")


async def api(method: str, id, params) -> bool:
    """Answer one request of the OpenAI-shaped API (web/cera.js): ``method`` one of API_METHODS, ``params`` the
    OpenAI request (JSON: tools as schemas). A streamed request (stream: true) posts a 'chunk' per chunk dict; 'done'
    carries the reply dict as ``result`` (None after a stream) and the run of its last choice."""
    async def run(on_token, on_result):
        if method not in API_METHODS:
            raise InputError(f"unknown API method {method!r}: use {' or '.join(API_METHODS)}")
        if not isinstance(params, dict):
            raise InputError(f"params must be an object of the request's arguments, got {params!r}")
        for name in ("auto_call", "on_token", "on_result"):
            if name in params:
                raise InputError(f"{name} is not available from JavaScript (functions cannot cross the worker "
                                 f"boundary): read the reply's tool_calls, run the function yourself and send its "
                                 f"result back as a {{role: 'tool'}} message")
        if not isinstance(params.get("stream", False), bool):
            raise InputError(f"stream must be true or false, got {params['stream']!r}")
        engine = _state.engine
        target = engine.chat.completions if method == "chat.completions.create" else engine.completions
        return await target.create(**params, on_result=on_result)
    return await _run(method, id, run, params)


async def chat_completions(id, params) -> bool:
    """The 'chat.completions.create' request: api() of that method."""
    return await api("chat.completions.create", id, params)


async def completions(id, params) -> bool:
    """The 'completions.create' request: api() of that method."""
    return await api("completions.create", id, params)


def chat_set(messages) -> bool:
    """Make the page's conversation the given messages ([{role, content}], or JSON text of them): a conversation
    restored after a reload or a model switch, or cut at an edited message. The next turn reuses the KV cache as far
    as the rendered conversation matches. Posts an 'error' (during 'chat-set') and returns False for bad messages."""
    try:
        if _state.engine is None:
            raise InputError("no model is loaded yet: wait for loading to finish")
        if isinstance(messages, str):
            messages = json.loads(messages)
        if not isinstance(messages, list):
            raise InputError("messages must be a list of {role, content}")
        from .engine import ChatSession
        _state.chat = ChatSession(_state.engine, messages=messages)
    except Exception as exc:
        _report(exc, "chat-set")
        return False
    return True


def set_system(text: str) -> None:
    """Make ``text`` the system message of the page's conversation ("": none, the template's default), in place of
    the one it has: the next turn renders the conversation with it (the KV cache is reused as far as it matches)."""
    chat = _state.chat
    if chat is None:
        return
    messages = [m for m in chat.messages if m["role"] != "system"]
    chat.messages = ([{"role": "system", "content": text}] if text and text.strip() else []) + messages


def chat_clear() -> bool:
    """Forget the page's conversation (the next message starts a new chat)."""
    if _state.chat is not None:
        _state.chat.reset()
    return True


# -- the conversation's state, kept across reloads (the worker's snapshot-* requests keep the bytes in OPFS) ---------

def snapshot_model() -> str:
    """The loaded model's key in the names of its snapshot files: the first 16 hex digits of its identity
    (cera_web.snapshot.model_identity: SHA-256 of the file's header and tensor table, and its size); "" when no model
    is loaded. Only a name: restore_snapshot checks the whole identity, the cache type and the context size."""
    if _state.engine is None:
        return ""
    from .snapshot import model_identity
    return model_identity(_state.engine).split(":")[1][:16]


async def save_snapshot():
    """The page's conversation and the engine's state for it as snapshot bytes (ChatSession.save: the messages and
    the KV / conv state of the longest prefix of the rendered conversation the engine holds), or None when there is
    nothing to keep (no model, an empty conversation)."""
    chat = _state.chat
    if _state.engine is None or chat is None or not chat.messages:
        return None
    return await chat.save()


def restore_snapshot(data) -> str:
    """Make a kept snapshot's state the engine's: the page's next turn prefills only the tokens after the prefix it
    holds (the conversation itself comes with chat-set; a snapshot of an older state of it is still a valid prefix).
    ``data``: the snapshot's bytes (a JS Uint8Array from the worker, or bytes). Returns JSON text: {"tokens": n} when
    restored, {"error": one line} when it does not fit this engine (another model file, cache type or context size;
    damaged, truncated, not a snapshot): nothing changes then (cera_web.snapshot), and the next turn recomputes."""
    from .errors import SnapshotError
    engine = _state.engine
    try:
        if engine is None:
            raise SnapshotError("no model is loaded")
        if hasattr(data, "to_bytes"):       # a JsProxy of a Uint8Array
            data = data.to_bytes()
        tokens = engine.restore_state(data)
    except SnapshotError as exc:
        return json.dumps({"error": str(exc)})
    except Exception as exc:    # a device failure part-way: restore_state then holds nothing (none of it is reused)
        return json.dumps({"error": _describe(exc)["message"]})
    return json.dumps({"tokens": len(tokens)})


def cancel(id=None) -> bool:
    """Ask request ``id`` (None: whichever runs) to stop after its current step, if it is the one running: it ends
    as a stop would (stop_reason 'cancelled'; an API reply's finish_reason 'stop'). Returns whether it was running."""
    running = _state.running
    if running is None or _state.engine is None or (id is not None and id != running[0]):
        return False
    _state.engine.cancel()
    return True


# The request kinds protocol.REQUESTS hands to Python, and the function that answers each (its parameters are the
# kind's fields: tests/test_protocol.py checks them).
_HANDLERS = {
    "generate": generate, "chat-send": chat_send, "chat-regenerate": chat_regenerate, "chat-continue": chat_continue,
    "chat-set": chat_set, "chat-clear": chat_clear,
    "chat.completions.create": chat_completions, "completions.create": completions,
}


async def handle(message_json: str) -> bool:
    """Answer one request of the page: JSON text of a protocol.REQUESTS message handled by "python". It is checked
    against its row (an unknown kind, a missing or unknown field, a generating request without a number or string
    id: one 'error'), then run by its function in _HANDLERS. Returns whether it succeeded; never raises."""
    kind = rid = None
    try:
        message = json.loads(message_json)
        if isinstance(message, dict):
            rid = message.get("id")
            kind = message.get("type") if isinstance(message.get("type"), str) else None
        kind = protocol.check(protocol.REQUESTS, message, "request")
        if kind not in _HANDLERS:
            raise InputError(f"a {kind!r} request is the worker's own (web/worker.js), not Python's")
        if protocol.generating(kind) and (not isinstance(rid, (int, str)) or isinstance(rid, bool)):
            raise InputError(f"a {kind!r} request needs a number or string id, got {rid!r}")
    except Exception as exc:
        _report(exc, kind or "request", rid if isinstance(rid, (int, str)) else None)
        return False
    out = _HANDLERS[kind](**{k: v for k, v in message.items() if k != "type"})
    return await out if inspect.isawaitable(out) else out


def __getattr__(name: str):
    """The notebook helpers (notebook.py) stay importable from here, as README shows: open_model, stream."""
    if name in ("open_model", "stream"):
        from . import notebook
        return getattr(notebook, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
