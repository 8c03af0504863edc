"""Notebook helpers (PyScript cells, web/notebook.html; they need a browser, and a worker for cached models):

    engine = await open_model()                     # the default model: cached in the browser, progress shown
    result = await stream(engine, "Once upon a time", max_tokens=32, temperature=0.8, seed=1)
    await save_chat(chat, "tutor")                  # a ChatSession and its prompt cache, kept in this browser
    chat = await load_chat(engine, "tutor")         # after a reload: its next message prefills only itself

Output goes to the running py-editor cell's output area (or ``output=``: an element or its id), else to stdout.
"""
from __future__ import annotations

import json
import re
import time
import warnings

from . import errors
from .errors import CeraError, InputError
from .webapp import _checked, _load_engine, _page_facts, check_header, memory_summary

DEFAULT_MODEL_URL = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_STORE_JS = "/web/modelstore.js"   # the browser cache of models (web/modelstore.js)


def _document():
    """The page's document: PyScript's (which also works from its workers), Pyodide's on the main thread, or None."""
    try:
        from pyscript import document
        return document
    except Exception:
        pass
    import js
    return getattr(js, "document", None)


def _page_url() -> str:
    """The page's address (in a PyScript worker, the page's, not the worker's blob: address)."""
    try:
        from pyscript import window
        return str(window.location.href)
    except Exception:
        import js
        return str(js.location.href)


def _absolute(url: str) -> str:
    import js
    return str(js.URL.new(url, _page_url()).href)


class _View:
    """Where the notebook helpers show progress and text: a DOM element (by default the output area of the running
    py-editor cell), or stdout when there is no page to write to."""

    INTERVAL = 0.1    # seconds between two updates of a progress line (each is a round trip from a worker)
    BYTE_STAGES = ("download", "verify", "upload")

    def __init__(self, output=None):
        doc = _document()
        self.doc, self.el = doc, None
        if doc is not None:
            if isinstance(output, str):
                self.el = doc.getElementById(output)
                if self.el is None:
                    raise InputError(f"no element with id {output!r} on the page to write the output to")
            elif output is not None:
                self.el = output
            else:
                button = doc.querySelector(".py-editor-run-button.running")
                box = button.closest(".py-editor-box") if button else None
                self.el = box.querySelector(".py-editor-output") if box else None
        self.text = None
        self.stages = {}      # stage -> its progress line's state

    def _add(self, tag: str, cls: str, parent=None):
        node = self.doc.createElement(tag)
        node.className = cls
        (parent or self.el).append(node)
        return node

    def progress(self, stage: str, done: int, total: int):
        """One progress line per stage: a bar, bytes, percent and rate."""
        now = time.monotonic()
        st = self.stages.setdefault(stage, {"t0": now, "done0": done, "shown": 0.0, "row": None})
        st.update(done=done, total=total, pending=True)
        if now - st["shown"] >= self.INTERVAL or (total and done >= total):
            self._show(stage, st, now)

    def _show(self, stage: str, st: dict, now: float):
        done, total, dt = st["done"], st["total"], now - st["t0"]
        pct = f" ({100 * done // total}%)" if total else ""
        if stage in self.BYTE_STAGES:
            line = f"{stage}: {done / 1e6:.1f} MB" + (f" of {total / 1e6:.1f} MB{pct}" if total else "")
            if dt > 0.2 and done > st["done0"]:
                line += f", {(done - st['done0']) / 1e6 / dt:.1f} MB/s"
        else:
            line = f"{stage}: {done} of {total}{pct}" if total else f"{stage}…"
        st["shown"], st["pending"] = now, False
        if self.el is None:
            if total and done >= total:
                print(line)
            return
        if st["row"] is None:
            row = self._add("div", "cera-progress-row")
            st["row"] = (self._add("progress", "cera-progress", row), self._add("span", "cera-progress-text", row))
        bar, label = st["row"]
        if total:
            bar.max = total
            bar.value = min(done, total)
        label.textContent = " " + line

    def finish(self):
        """Show the last state of every byte-counting progress line (updates skipped by the interval); the lines of
        the other stages (parse, compile, ...) are steps, not results, and go."""
        now = time.monotonic()
        for stage, st in self.stages.items():
            if stage not in self.BYTE_STAGES:
                if st["row"] is not None:
                    st["row"][0].parentNode.remove()
                    st["row"] = None
            elif st["pending"]:
                self._show(stage, st, now)

    def note(self, text: str):
        if self.el is None:
            print(text)
        else:   # ends with a newline: PyScript's print() turns the output into text (innerText +=), keeping it
            self._add("div", "cera-note").textContent = text + "\n"

    def piece(self, text: str):
        if self.el is None:
            print(text, end="", flush=True)
            return
        if self.text is None:
            self.text = self._add("pre", "cera-stream")
        if text:
            self.text.append(self.doc.createTextNode(text))


async def _model_store():
    """The JS CeraModelStore (web/modelstore.js), imported into this JS realm on first use."""
    import js
    if not hasattr(js, "CeraModelStore"):
        from pyodide.code import run_js
        await run_js(f"import({json.dumps(_absolute(MODEL_STORE_JS))})")
    return js.CeraModelStore


async def open_model(url: str | None = None, *, output=None, cache: bool = True,
                     context_size: int | None = None, limits: dict | None = None):
    """Load a model for a notebook cell and return its Engine: the default model when ``url`` is None.

    The download is kept in the browser's cache (web/modelstore.js; ``cache=False`` skips it) and checked before most
    of it arrives (header, architecture, buffer limits); progress (bytes, percent, rate) and a memory summary are
    shown in the cell's output (``output``: an element or its id). ``limits``: device limits to lower (simulating a
    smaller GPU), e.g. {"max-storage-buffer-binding-size": 16_000_000}. context_size: None (default) is 2048, or the
    most the GPU's buffer limits hold (as the page)."""
    import js
    from pyodide.ffi import JsException, create_proxy, to_js

    from .gpu import get_device
    from .gpu.browser import ArrayBufferSource, BlobSource, RangeSource

    view = _View(output)
    url = _absolute(url or DEFAULT_MODEL_URL)
    store = await _model_store()
    device = await get_device(limits_override=limits)
    refused = []

    def check(prefix, total):
        reply = json.loads(check_header(prefix, total, url, device.limits))
        if "error" in reply:
            refused.append(reply["error"])
            raise InputError(reply["error"]["message"])
        return reply.get("need", 0)

    proxies = [create_proxy(view.progress), create_proxy(view.note), create_proxy(check)]
    options = to_js({"onProgress": proxies[0], "onStatus": proxies[1], "checkHeader": proxies[2], "cache": cache},
                    dict_converter=js.Object.fromEntries)
    try:
        got = await store.open(url, options)
        view.finish()
    except JsException as exc:
        device.destroy()
        if refused:     # refused by check(): raise that error as it was
            kind = getattr(errors, refused[0]["kind"], None)
            raise (kind if isinstance(kind, type) and issubclass(kind, CeraError) else CeraError)(
                refused[0]["message"]) from None
        raise InputError(f"could not get the model: {exc}") from None
    finally:
        for p in proxies:
            p.destroy()
    view.note(str(got.note))
    if got.blob is not None and hasattr(js, "FileReaderSync"):
        source = BlobSource(got.blob, str(got.name))
    elif getattr(got, "url", None) is not None and hasattr(js, "FileReaderSync"):    # not cached: Range reads
        source = RangeSource(got.url, int(got.size), str(got.name))
    else:   # the main thread cannot read synchronously: take the bytes into (JS) memory
        buffer = (got.buffer if got.buffer is not None else await got.blob.arrayBuffer() if got.blob is not None
                  else await (await js.fetch(got.url)).arrayBuffer())
        source = ArrayBufferSource(buffer, str(got.name))
    try:
        engine, _fit = await _load_engine(source, device, view.progress, context_size=context_size,
                                          header=_checked(source))
    finally:
        view.finish()
    mem = memory_summary(engine)
    facts = _page_facts(engine)
    view.note(f"{facts['name']} ({facts['file']}) on {engine.backend}: GPU memory {mem['total'] / 1e6:.1f} MB (weights "
              f"{mem['weights'] / 1e6:.1f} MB, KV cache {mem['kv_cache'] / 1e6:.1f} MB, other {mem['other'] / 1e6:.1f} MB)")
    return engine


async def stream(engine, prompt, *, output=None, chat: bool = False, **settings):
    """Generate from ``prompt`` with ``engine``, streaming the text into the cell's output (``output``: an element
    or its id) as it is produced; settings as Engine.generate (max_tokens=..., temperature=..., seed=..., ...).
    Returns the GenerationResult."""
    view = _View(output)
    result = await engine.generate(prompt, on_token=lambda _id, text: view.piece(text), chat=chat, **settings)
    view.note(f"{len(result.tokens)} tokens, {result.stop_reason}; prefill {result.prefill_tok_s:.1f} tok/s, "
              f"decode {result.decode_tok_s:.1f} tok/s")
    return result


# -- chats kept across reloads: ChatSession.save() bytes in the origin-private file system (OPFS) --------------------

CHAT_DIR = "cera_web-notebook"      # the OPFS folder of save_chat's files, <name>.snap
_CHAT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def _chat_file(name) -> str:
    if not isinstance(name, str) or not _CHAT_NAME.fullmatch(name):
        raise InputError(f"a chat's name is 1 to 100 letters, digits, '-', '_' or '.', got {name!r}")
    return name + ".snap"


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def _storage_error(doing: str, exc) -> InputError:
    """One line for a failed OPFS call (a JsException), with what to do."""
    name = getattr(exc, "name", "") or type(exc).__name__
    if name == "QuotaExceededError":
        why = ("the browser's storage for this site is full: delete saved chats or cached models of this site, "
               "or free disk space")
    else:
        message = str(getattr(exc, "message", "") or exc).strip().splitlines()
        why = (f"{name}: {message[0] if message else 'storage failed'} (allow this site to store data: not a "
               "private window, storage not blocked; or keep the bytes of `await chat.save()` yourself)")
    return InputError(f"could not {doing}: {why}")


async def _chat_dir(create: bool):
    """The OPFS folder of saved chats (None when it does not exist and ``create`` is false)."""
    try:
        import js
        from pyodide.ffi import JsException, to_js
    except ImportError:
        raise InputError("save_chat / load_chat keep chats in a browser's storage; outside a browser use "
                         "`await chat.save(path)` and `ChatSession.load(engine, path)`") from None
    storage = getattr(js.navigator, "storage", None)
    if storage is None or not hasattr(storage, "getDirectory"):
        raise InputError("this browser gives this page no origin-private file system (navigator.storage."
                         "getDirectory) to keep chats in: open the page over https or localhost in a current browser")
    try:
        root = await storage.getDirectory()
        return await root.getDirectoryHandle(CHAT_DIR, to_js({"create": create}, dict_converter=js.Object.fromEntries))
    except JsException as exc:
        if not create and getattr(exc, "name", "") == "NotFoundError":
            return None
        raise _storage_error("open this browser's storage", exc) from None


async def save_chat(chat, name: str = "chat", output=None) -> bytes:
    """Keep ``chat`` (a ChatSession: its messages and the model's state for them, ChatSession.save) in this browser
    as ``<name>.snap`` in the origin-private file system (folder cera_web-notebook/, replaced whole), to go on with
    it after a reload with load_chat. Shows a one-line note (size, tokens kept) in the cell's output (``output``: an
    element or its id); returns the bytes written. InputError (one line, what to do) when the browser cannot store
    it (storage full, no OPFS)."""
    import js
    from pyodide.ffi import JsException, to_js

    from .snapshot import read_header
    file, view = _chat_file(name), _View(output)
    data = await chat.save()
    folder = await _chat_dir(create=True)
    writer = None
    try:
        handle = await folder.getFileHandle(file, to_js({"create": True}, dict_converter=js.Object.fromEntries))
        writer = await handle.createWritable()         # written to a copy: the file changes only on close
        await writer.write(to_js(memoryview(data)))
        await writer.close()
    except JsException as exc:
        if writer is not None:
            try:
                await writer.abort()
            except JsException:
                pass
        raise _storage_error(f"save the chat as {CHAT_DIR}/{file}", exc) from None
    tokens = len(read_header(data)["tokens"])
    view.note(f"Saved chat {name!r} in this browser: {_size(len(data))}, {len(chat.messages)} messages, "
              f"{tokens} tokens of prompt cache kept.")
    return data


async def load_chat(engine, name: str = "chat", output=None, **session_kwargs):
    """The chat save_chat kept as ``name`` in this browser, its state restored into ``engine`` (ChatSession.load;
    ``session_kwargs``: params=, overflow=): its next message prefills only itself. A state kept for another model
    file, cache type or context size is not used: the note says why, and the conversation is still returned (its
    next turn recomputes the prompt). None, with a note, when no chat of that name is kept. Shows a one-line note in
    the cell's output (``output``: an element or its id)."""
    from pyodide.ffi import JsException

    from .session import ChatSession, SnapshotWarning
    from .snapshot import read_header
    file, view = _chat_file(name), _View(output)
    folder = await _chat_dir(create=False)
    data = None
    if folder is not None:
        try:
            data = (await (await (await folder.getFileHandle(file)).getFile()).arrayBuffer()).to_bytes()
        except JsException as exc:
            if getattr(exc, "name", "") != "NotFoundError":
                raise _storage_error(f"read {CHAT_DIR}/{file}", exc) from None
    if data is None:
        view.note(f"No chat saved as {name!r} in this browser: save one with `await save_chat(chat, {name!r})`.")
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SnapshotWarning)
        chat = ChatSession.load(engine, data, **session_kwargs)
    unused = [w for w in caught if issubclass(w.category, SnapshotWarning)]
    for w in caught:         # any other warning, as it would have shown
        if w not in unused:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if unused:
        view.note(f"Chat {name!r} ({len(chat.messages)} messages) is back without its prompt cache: "
                  f"{unused[0].message}")
    else:
        view.note(f"Restored chat {name!r}: {len(chat.messages)} messages, {len(read_header(data)['tokens'])} tokens "
                  f"of prompt cache: the next message prefills only itself.")
    return chat
