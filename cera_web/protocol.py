"""The messages between the page and its worker (web/worker.js), declared once.

Every message is a plain object whose ``type`` is its kind; its other keys are the fields listed here ("name?": may
be left out). The Python side checks both directions against these tables (webapp.handle refuses a request that does
not match, webapp._send a message that does not); tests/test_protocol.py checks the JavaScript that builds and reads
them (web/worker.js, web/app.js, web/cera.js), so a kind or a field that one side changes alone fails a test.

A request that generates (``id`` among its fields) is answered, under that id, by 'prompt' (its prompt's progress),
'token' (page kinds) or 'chunk' (a streamed API request) messages, then exactly one 'done' or one 'error'. Requests run
one at a time, in order (one GPU), except those handled "at once" (cancel, cache-list). To add a message: add its row
here, its handler (a webapp function whose parameters are the fields, or a worker.js handler for "worker" kinds), and
the page code that sends or reads it; tests/test_protocol.py then checks them against each other.
"""
from __future__ import annotations

from .errors import InputError

# page -> worker: kind: (fields, handled by, what it asks). Handled by "worker": worker.js itself (queued), "worker at
# once": worker.js as it arrives, "python": webapp.handle, queued (a webapp function of the same fields).
REQUESTS = {
    "load": ("url? file? limits? backend? cache?", "worker",
             "load the model at url (browser cache, else downloaded and kept; cache false, or no room to keep it: "
             "read from its server by Range requests as it uploads) or a picked/dropped File; limits: "
             "device limits to lower {kebab-case name: bytes}; backend: 'auto' (default), 'webgpu' or 'cpu' "
             "(webapp.choose_backend). A failed load keeps the model loaded before"),
    "load-draft": ("url?", "worker",
                   "load the model at url (cache, else downloaded and kept) as the loaded model's draft model "
                   "(speculative decoding: webapp.load_draft), then a 'draft' message; no url: drop the draft model"),
    "preflight": ("url? file? limits? backend? context?", "worker",
                  "will the model at url (or a picked File) run here, before any download: its header read by HTTP "
                  "Range (web/ggufmeta.js), then webapp.preflight (cera_web/preflight.py: memory, fit with a probe "
                  "allocation, storage quota, the context and cache a load would take, estimated speed); answered "
                  "with a 'preflight' message"),
    "cache-list": ("", "worker at once", "answered with a 'cache' message"),
    "cache-delete": ("url", "worker", "delete a cached model, then a 'cache' message"),
    "snapshot-save": ("conversation cap", "worker",
                      "keep the worker's conversation and the engine's state for it (ChatSession.save) in OPFS as the "
                      "snapshot of (conversation: the page's id for it, the loaded model), first removing the least "
                      "recently used other snapshots until all fit in cap bytes; a failure (storage full, a snapshot "
                      "larger than cap) is one 'notice', never an error; then a 'cache' message"),
    "snapshot-restore": ("conversation", "worker",
                         "make the snapshot of (conversation, the loaded model), if there is one, the engine's state "
                         "(the next turn prefills only what it does not hold; a 'notice' says how many tokens it "
                         "holds); one that does not fit (another model, damaged, truncated) is deleted, with a "
                         "one-line 'notice' saying why"),
    "snapshot-delete": ("conversation?", "worker",
                        "delete the snapshots of conversation (for every model; none: every snapshot), then a "
                        "'cache' message"),
    "cancel": ("id?", "worker at once",
               "stop request id (none: whatever runs): running, it ends within a decode step with stop_reason "
               "'cancelled' (its 'done' still comes); still queued, it is answered at once with an 'error' of "
               "error_type 'cancelled' and never runs"),
    "generate": ("id prompt max_tokens chat? settings?", "python",
                 "one raw completion; chat: the prompt wrapped in the chat template; settings: the settings form's "
                 "values as typed (webapp.parse_settings; greedy unless they say otherwise)"),
    "chat-send": ("id text settings? system?", "python",
                  "the next user turn of the worker's one ChatSession (its KV cache kept between turns); system: "
                  "the conversation's system message ('' for none)"),
    "chat-regenerate": ("id settings? system?", "python", "the last reply again"),
    "chat-continue": ("id settings? system?", "python", "more of the last reply, appended to it"),
    "chat-set": ("messages", "python", "the conversation becomes messages [{role, content}] (restored, or cut)"),
    "chat-clear": ("", "python", "forget the conversation"),
    "chat.completions.create": ("id params", "python",
                                "an OpenAI chat request (web/cera.js): params as JSON, tools as JSON schemas"),
    "completions.create": ("id params", "python", "an OpenAI text completion request (web/cera.js)"),
}

# worker -> page: kind: (fields, what it says)
EVENTS = {
    "status": ("text", "a step, in words ('Loading Pyodide…')"),
    "preflight": ("url file report? summary? lines? error?",
                  "a preflight request's answer (url, or file: the picked File's name): report (cera_web.preflight."
                  "preflight's dict), summary (one line for the menu), lines (the report in words); or error "
                  "{kind, message}"),
    "notice": ("text", "something worth keeping on screen about the last load, or about a conversation's kept "
                       "state (restored, not usable, not kept)"),
    "progress": ("stage done total", "a load's progress: 'download'/'verify' (bytes; total 0: unknown), or an "
                                     "engine stage: 'parse', 'upload' (bytes), 'compile', 'weights'"),
    "settings": ("fields raw stop_reasons", "after Python starts: the settings form (SamplingParams.describe()), the "
                                            "raw-completion defaults (greedy) and STOP_REASONS"),
    "ready": ("model name file chat_template backend backend_kind backend_reason cpu memory origin split",
              "a model is loaded and usable (webapp.load_source says what each field holds)"),
    "draft": ("name file", "the loaded model's draft model now (name and file null: none)"),
    "device-lost": ("text", "the loaded model's GPU device was lost (driver reset, out of memory, a tab in the "
                            "background): text says so in one line; the model must be loaded again (a request running "
                            "then ends with an 'error' of kind DeviceLostError)"),
    "cache": ("entries usage quota snapshots",
              "the cached models [{url, name, size, stored}], the storage use and quota (bytes; null: unknown) and "
              "the kept conversation snapshots {count, bytes}"),
    "prompt": ("id done total", "the prompt is being processed: done of its total tokens not reused from the cache"),
    "token": ("id token text", "a page request's next token: its id and the text it adds ('' while a character is "
                               "incomplete or a stop string may start)"),
    "chunk": ("id chunk", "a streamed API request's next chat.completion.chunk (or text_completion) dict"),
    "done": ("id text stop_reason prompt_tokens tokens cached_tokens drafted accepted seed prefill_tok_s decode_tok_s "
             "prefill_ms decode_ms memory logprobs result mode? messages?",
             "a request finished (every generating kind ends with one): its run, as webapp.run_fields says; result: "
             "the API reply dict (null after a stream, and for page kinds); chat kinds add mode 'chat' and messages "
             "(the conversation after the turn)"),
    "error": ("id during kind message error_type param",
              "something failed; id: the request's (null for a load or cache error); during: the request kind; kind: "
              "the error class; message: one line; error_type: 'invalid_request_error' (fix the request), "
              "'server_error' or 'cancelled'; param: the request argument at fault, or null. The worker stays usable"),
}

# Why a generation ended (GenerationResult.stop_reason), in the words the page shows.
STOP_REASONS = {
    "eos": "end of text",
    "stop": "stop string",
    "max_tokens": "max tokens reached",
    "context": "context window full",
    "cancelled": "stopped",
    "grammar": "structured output complete",
}


def fields(spec: str) -> tuple[set, set]:
    """(required, optional) field names of a table row's field list."""
    names = spec.split()
    return {n for n in names if not n.endswith("?")}, {n[:-1] for n in names if n.endswith("?")}


def check(table: dict, message: dict, what: str) -> str:
    """The kind of ``message`` after checking it against ``table`` (REQUESTS or EVENTS): a known kind with its
    required fields and no others. Raises InputError naming what is wrong."""
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise InputError(f"a {what} must be an object with a string 'type', got {message!r}"[:300])
    kind = message["type"]
    if kind not in table:
        raise InputError(f"unknown {what} type {kind!r}: use one of {', '.join(table)}")
    required, optional = fields(table[kind][0])
    have = set(message) - {"type"}
    if required - have:
        raise InputError(f"a {kind!r} {what} needs {', '.join(sorted(required - have))}")
    if have - required - optional:
        raise InputError(f"a {kind!r} {what} has no field {', '.join(sorted(have - required - optional))}")
    return kind


def generating(kind: str) -> bool:
    """Whether requests of ``kind`` generate (they carry an id, and end with one 'done' or 'error')."""
    return "id" in fields(REQUESTS[kind][0])[0]
