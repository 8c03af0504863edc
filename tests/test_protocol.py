"""The page <-> worker protocol is declared once (cera_web/protocol.py) and both sides keep to it.

Python: every kind handed to Python has a function whose parameters are its fields; webapp._send refuses a message
the table does not declare (so every glue test checks the messages it sees), and webapp.handle refuses a request that
does not match its row, in one 'error' under the request's id. JavaScript: the messages web/app.js and web/cera.js
send, those web/worker.js posts, and the fields each reads, are parsed out of the sources and checked against the
table; every row is used by some code (no dead kinds). Cheap: no browser, no model.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import re
from pathlib import Path

import pytest

from cera_web import protocol, webapp

WEB = Path(__file__).resolve().parent.parent / "web"
PY_KINDS = {k for k, row in protocol.REQUESTS.items() if row[1] == "python"}
WORKER_KINDS = {k for k, row in protocol.REQUESTS.items() if row[1].startswith("worker")}


def _source(name: str) -> str:
    return (WEB / name).read_text(encoding="utf-8")


def _literal(text: str, start: int) -> str:
    """The JS object literal opening at text[start] ('{'), to its matching '}' (strings and template strings
    skipped)."""
    depth, i, quote = 0, start, None
    while True:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"`":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1


def _keys(literal: str) -> tuple[str, set, bool]:
    """(the type's value as written, the other keys, whether it spreads another object) of an object literal."""
    body, parts, depth, cur, quote = literal[1:-1], [], 0, "", None
    for c in body:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"`":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        if c == "," and depth == 0 and not quote:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    keys, kind, spread = set(), None, False
    for part in (p.strip() for p in parts if p.strip()):
        if part.startswith("..."):
            spread = True
            continue
        m = re.match(r"([\w$]+)\s*(:\s*(.*))?$", part, re.S)
        assert m, f"cannot read the field {part!r} of {literal!r}"
        if m.group(1) == "type":
            kind = m.group(3).strip()
        else:
            keys.add(m.group(1))
    assert kind is not None, literal
    return kind, keys, spread


def _messages(source: str, call: str) -> list[tuple[str, set, bool]]:
    """The object literals passed straight to ``call(`` in ``source``: (type as written, keys, spreads)."""
    return [_keys(_literal(source, m.end() - 1)) for m in re.finditer(re.escape(call) + r"\(\{", source)]


def _check(table: dict, kind: str, keys: set, spread: bool, where: str):
    assert kind in table, f"{where} uses the message type {kind!r}, which cera_web/protocol.py does not declare"
    required, optional = protocol.fields(table[kind][0])
    assert keys <= required | optional, f"{where}: {kind!r} has fields {keys - required - optional} the table lacks"
    assert spread or required <= keys, f"{where}: {kind!r} lacks the table's fields {required - keys}"


def _quoted(kind_as_written: str) -> str:
    m = re.fullmatch(r"'([\w.-]+)'", kind_as_written)
    assert m, f"a message type written as {kind_as_written!r}: write it as a quoted literal"
    return m.group(1)


# -- Python ----------------------------------------------------------------------------------------------------------

def test_every_python_kind_has_a_function_whose_parameters_are_its_fields():
    assert set(webapp._HANDLERS) == PY_KINDS
    for kind, fn in webapp._HANDLERS.items():
        required, optional = protocol.fields(protocol.REQUESTS[kind][0])
        params = inspect.signature(fn).parameters
        assert set(params) == required | optional, kind
        defaulted = {n for n, p in params.items() if p.default is not inspect.Parameter.empty}
        assert defaulted <= optional | {"id"}, (kind, defaulted - optional)      # id: optional for Python callers
        assert required - {"id"} <= set(params) - defaulted, kind


def test_stop_reasons_are_listed_once():
    """The engine's six stop reasons, each with the words the page shows; the page and the worker keep no list."""
    assert set(protocol.STOP_REASONS) == {"eos", "stop", "max_tokens", "context", "cancelled", "grammar"}
    assert json.loads(webapp.settings_form())["stop_reasons"] == protocol.STOP_REASONS
    for name in ("app.js", "worker.js", "cera.js"):
        for words in protocol.STOP_REASONS.values():
            assert f"'{words}'" not in _source(name), (name, words)


def test_send_refuses_what_the_table_does_not_declare():
    sent = []
    webapp.init(sent.append)
    webapp._send(type="prompt", id=1, done=0, total=3)
    assert json.loads(sent[-1]) == {"type": "prompt", "id": 1, "done": 0, "total": 3}
    for bad in ({"type": "prompt", "id": 1, "done": 0},                          # a field left out
                {"type": "prompt", "id": 1, "done": 0, "total": 3, "rate": 2},   # a field it does not have
                {"type": "api-result", "id": 1, "result": None}):                # a kind it does not have
        with pytest.raises(ValueError, match="does not declare"):
            webapp._send(**bad)
    run = dict.fromkeys(protocol.fields(protocol.EVENTS["done"][0])[0])
    with pytest.raises(ValueError, match="STOP_REASONS"):
        webapp._send(type="done", **dict(run, stop_reason="length"))
    assert len(sent) == 1


@pytest.mark.parametrize("message, during, needle", [
    ({"type": "generate", "id": 3, "prompt": "Hi"}, "generate", "needs max_tokens"),
    ({"type": "generate", "id": 3, "prompt": "Hi", "max_tokens": 4, "maxTokens": 4}, "generate", "no field maxTokens"),
    ({"type": "chat-send", "id": 3, "txt": "Hi"}, "chat-send", "needs text"),
    ({"type": "chat-send", "text": "Hi"}, "chat-send", "needs id"),
    ({"type": "chat-send", "id": None, "text": "Hi"}, "chat-send", "needs a number or string id"),
    ({"type": "stop", "id": 3}, "stop", "unknown request type 'stop'"),
    ({"type": "load", "url": "/m.gguf"}, "load", "the worker's own"),
    ({"id": 3}, "request", "string 'type'"),
])
def test_handle_refuses_a_request_that_does_not_match_its_row(message, during, needle):
    sent = []
    webapp.init(lambda text: sent.append(json.loads(text)))
    assert asyncio.run(webapp.handle(json.dumps(message))) is False
    assert len(sent) == 1, sent
    err = sent[0]
    assert err["type"] == "error" and err["during"] == during and err["error_type"] == "invalid_request_error"
    assert needle in err["message"] and "\n" not in err["message"], err
    assert err["id"] == (message.get("id") if message.get("id") is not None else None)


# -- JavaScript ------------------------------------------------------------------------------------------------------

def test_the_page_sends_only_declared_requests_and_uses_every_one():
    app, cera = _source("app.js"), _source("cera.js")
    sent = set()
    for kind, keys, spread in _messages(app, "postMessage"):
        kind = _quoted(kind)
        _check(protocol.REQUESTS, kind, keys, spread, "web/app.js")
        sent.add(kind)
    # cera.js: load and cancel as literals; the API requests as {type: method, id, params} for its two methods
    for kind, keys, spread in _messages(cera, "postMessage"):
        kind = _quoted(kind)
        _check(protocol.REQUESTS, kind, keys, spread, "web/cera.js")
        sent.add(kind)
    request = re.search(r"const message = (\{type: method\b)", cera)
    assert request, "cera.js builds its API requests as {type: method, ...}"
    _, keys, spread = _keys(_literal(cera, request.start(1)))
    for method in re.findall(r"this\._create\('([\w.]+)'", cera):
        _check(protocol.REQUESTS, method, keys, spread, "web/cera.js")
        sent.add(method)
    assert sent == set(protocol.REQUESTS), f"declared but never sent: {set(protocol.REQUESTS) - sent}"


def test_the_worker_posts_declared_messages_and_handles_its_own_kinds():
    worker = _source("worker.js")
    posted = _messages(worker, "post")
    assert {_quoted(k) for k, _, _ in posted} >= {"status", "notice", "progress", "cache", "error", "settings"}
    for kind, keys, spread in posted:
        _check(protocol.EVENTS, _quoted(kind), keys, spread, "web/worker.js")
    table = re.search(r"const WORKER_KINDS = (\{)", worker)
    rows = re.findall(r"^\s+'?([\w.-]+)'?: \{(now: true, )?run:", _literal(worker, table.start(1)), re.M)
    assert {k for k, _ in rows} == WORKER_KINDS
    assert {k for k, now in rows if now} == {k for k in WORKER_KINDS if protocol.REQUESTS[k][1] == "worker at once"}
    # the fields it reads of a request, in its handling part (load() on)
    fields = set().union(*(set().union(*protocol.fields(row[0])) for row in protocol.REQUESTS.values()))
    read = set(re.findall(r"\bmsg\.(\w+)", worker[worker.index("async function load(msg)"):]))
    assert read - {"type"} <= fields, read - fields


def test_the_page_reads_only_declared_messages_and_fields():
    app = _source("app.js")
    switch = app[app.index("switch (msg.type) {"):app.index("refreshControls();\n};")]
    cases = re.split(r"\n    case '([\w.-]+)':", switch)[1:]
    handled = set()
    for kind, body in zip(cases[::2], cases[1::2]):
        assert kind in protocol.EVENTS, f"web/app.js handles {kind!r}, which the table does not declare"
        handled.add(kind)
        have = set().union(*protocol.fields(protocol.EVENTS[kind][0]))
        read = set(re.findall(r"\bmsg\.(\w+)", body)) - {"type"}
        assert read <= have, f"web/app.js reads {read - have} of {kind!r}"
    assert handled >= {"status", "progress", "notice", "cache", "ready", "settings", "prompt", "token", "done",
                       "error"}
    cera = _source("cera.js")
    on_message = cera[cera.index("  _onMessage(msg) {"):cera.index("  // One request.")]
    kinds = set(re.findall(r"msg\.type === '([\w.-]+)'", on_message))
    assert kinds == {"progress", "status", "notice", "ready", "draft", "error", "chunk", "done"}
    have = set().union(*(set().union(*protocol.fields(protocol.EVENTS[k][0])) for k in kinds))
    read = set(re.findall(r"\bmsg\.(\w+)", on_message)) - {"type"}
    assert read <= have, read - have
    # every message the worker may post is read by the page or by cera.js
    assert handled | kinds == set(protocol.EVENTS), set(protocol.EVENTS) ^ (handled | kinds)
