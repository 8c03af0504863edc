"""The OpenAI-shaped API over Engine: the request arguments and response dicts of the OpenAI Python client.

    reply = await engine.chat.completions.create(messages=[{"role": "user", "content": "Hi"}], max_tokens=64)
    reply["choices"][0]["message"]["content"]
    async for chunk in await engine.chat.completions.create(messages=..., stream=True):
        print(chunk["choices"][0]["delta"].get("content", ""), end="")
    await engine.chat.completions.create(messages=..., response_format={"type": "json_schema", "json_schema":
                                         {"name": "x", "schema": {...}}})
    await engine.chat.completions.create(messages=..., tools=[get_weather], auto_call=True)   # Python functions
    await engine.completions.create(prompt="Once upon a time", max_tokens=16)

Defaults follow OpenAI's: temperature 1, top_p 1, no top-k, min-p or repetition penalty (pass top_k=, min_p=,
repeat_penalty= to use them). ``n`` choices share the prompt's KV cache (the prompt is prefilled once); with a
seed, choice i uses seed + i, so a seeded request is reproducible. Tools: JSON schemas ({"type": "function",
"function": {"name", "description", "parameters"}}) or plain Python functions (type hints and docstring become the
schema). The model's chat template renders them when it takes ``tools``; otherwise a system message lists them.
A tool call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and is constrained by a grammar, so it
always parses: tool_choice "auto" lets the model choose between text and a call, "required" or
{"type": "function", "function": {"name": ...}} forces one. ``auto_call=True`` calls the Python functions, feeds
their results back as tool messages and continues until the model answers in text (at most ``max_tool_rounds``).
"""
from __future__ import annotations

import asyncio
import inspect
import json
import time
import typing
import uuid

from .errors import InputError
from .grammar import Grammar
from .json_schema import constraint, dumps, literal, schema_to_gbnf
from .sampling import SamplingParams

OPENAI_DEFAULTS = dict(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, repeat_penalty=1.0)
PASSTHROUGH = ("top_k", "min_p", "repeat_penalty", "repeat_window", "ignore_eos", "stop_token_ids", "speculative")
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


# -- tools ----------------------------------------------------------------------------------------------------------

def _type_schema(tp) -> dict:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is inspect.Parameter.empty or tp is typing.Any:
        return {}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is type(None):
        return {"type": "null"}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return {"anyOf": [_type_schema(a) for a in args]}
    if tp is list or origin is list:
        return {"type": "array", **({"items": _type_schema(args[0])} if args else {})}
    if tp is dict or origin is dict:
        return {"type": "object", **({"additionalProperties": _type_schema(args[1])} if len(args) == 2 else {})}
    raise InputError(f"cannot describe the type {tp!r} as JSON Schema: use str, int, float, bool, list, dict, "
                     f"Literal or Optional of them")


def function_tool(fn) -> dict:
    """The OpenAI tool dict of a Python function: its name, its docstring's first paragraph, its parameters'
    type hints (parameters without a default are required)."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    props, required = {}, []
    for name, p in sig.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        props[name] = _type_schema(hints.get(name, inspect.Parameter.empty))
        if p.default is inspect.Parameter.empty:
            required.append(name)
    doc = inspect.getdoc(fn) or ""
    return {"type": "function", "function": {
        "name": fn.__name__, "description": doc.split("\n\n")[0].strip(),
        "parameters": {"type": "object", "properties": props, "required": required}}}


def _tools(tools) -> tuple[list[dict], dict]:
    """(OpenAI tool dicts, name -> Python function for those given as functions)."""
    specs, funcs = [], {}
    for t in tools or []:
        if callable(t):
            spec = function_tool(t)
            funcs[spec["function"]["name"]] = t
        elif isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict) \
                and isinstance(t["function"].get("name"), str):
            spec = t
        else:
            raise InputError(f"a tool must be a Python function or {{'type': 'function', 'function': {{'name': ..., "
                             f"'parameters': {{...}}}}}}, got {t!r}")
        specs.append(spec)
    names = [s["function"]["name"] for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"tool names must be unique, got {names}")
    return specs, funcs


def tool_grammar(specs: list[dict], choice) -> Grammar:
    """The grammar of the reply under tool_choice: "auto" (text not starting with '<', or one call), "required"
    (one call to any tool) or a named function (one call to it)."""
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        specs = [s for s in specs if s["function"]["name"] == name]
        if not specs:
            raise InputError(f"tool_choice names the function {name!r}, which is not among the tools")
    calls = []
    for s in specs:
        f = s["function"]
        calls.append({"type": "object", "properties": {"name": {"const": f["name"]},
                                                       "arguments": f.get("parameters") or {"type": "object"}},
                      "required": ["name", "arguments"], "additionalProperties": False})
    call_schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    text = schema_to_gbnf(call_schema).replace("\nroot ::= ", "\ncall ::= ")
    text += f'tool-call ::= {literal(CALL_OPEN)} "\\n"? call "\\n"? {literal(CALL_CLOSE)}\n'
    if choice == "auto":
        text += 'root ::= tool-call | [^<] [^\\x00]*\n'
    else:
        text += "root ::= tool-call\n"
    return constraint(grammar=text)


def _tool_system_text(specs) -> str:
    lines = ["You can call these tools. To call one, answer only with",
             f'{CALL_OPEN}{{"name": <tool name>, "arguments": <arguments as JSON>}}{CALL_CLOSE}', "Tools:"]
    lines += [json.dumps(s["function"], ensure_ascii=False) for s in specs]
    return "\n".join(lines)


def parse_tool_calls(text: str) -> list[dict] | None:
    """The OpenAI tool_calls of a reply made of <tool_call> blocks, or None when it is plain text."""
    s = text.strip()
    if not s.startswith(CALL_OPEN):
        return None
    calls = []
    while s.startswith(CALL_OPEN):
        end = s.find(CALL_CLOSE)
        if end < 0:
            return None
        body = json.loads(s[len(CALL_OPEN):end])
        calls.append({"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                      "function": {"name": body["name"], "arguments": dumps(body["arguments"])}})
        s = s[end + len(CALL_CLOSE):].strip()
    return calls


def _template_messages(messages, specs, template_takes_tools) -> list[dict]:
    """Messages the chat template can render: assistant tool calls as <tool_call> text, tool results as
    role "tool"; without template support for tools, their list goes into the system message."""
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise InputError(f"messages must be dicts with a 'role', got {m!r}")
        content = m.get("content")
        if isinstance(content, list):   # OpenAI content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        content = content or ""
        if m["role"] == "assistant" and m.get("tool_calls"):
            content += "".join(f'{CALL_OPEN}{{"name": {dumps(c["function"]["name"])}, "arguments": '
                               f'{c["function"]["arguments"]}}}{CALL_CLOSE}' for c in m["tool_calls"])
        if not isinstance(content, str):
            raise InputError(f"message content must be text, got {content!r}")
        out.append({"role": m["role"], "content": content})
    if specs and not template_takes_tools:
        sys_text = _tool_system_text(specs)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + sys_text}
        else:
            out.insert(0, {"role": "system", "content": sys_text})
    return out


# -- shared pieces ----------------------------------------------------------------------------------------------------

def _params(kw: dict, defaults: dict) -> tuple[SamplingParams, int]:
    """SamplingParams from OpenAI arguments (consumed from kw) and n."""
    s = dict(OPENAI_DEFAULTS)
    s.update(defaults)
    for k in ("max_tokens", "temperature", "top_p", "seed", "frequency_penalty", "presence_penalty",
              "logit_bias") + PASSTHROUGH:
        if kw.get(k) is not None:
            s[k] = kw.pop(k)
        else:
            kw.pop(k, None)
    if kw.get("max_completion_tokens") is not None:
        s["max_tokens"] = kw.pop("max_completion_tokens")
    kw.pop("max_completion_tokens", None)
    stop = kw.pop("stop", None)
    if stop is not None:
        s["stop"] = [stop] if isinstance(stop, str) else list(stop)
    n = kw.pop("n", None)
    n = 1 if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
        raise InputError(f"n must be an integer between 1 and 16, got {n!r}")
    return SamplingParams.from_dict(s), n


def _check_unknown(kw, where):
    kw.pop("user", None)
    kw.pop("stream_options", None)
    if kw:
        raise InputError(f"{where}: unsupported argument(s) {', '.join(sorted(kw))}")


def _finish(stop_reason, tool_calls=None) -> str:
    if tool_calls:
        return "tool_calls"
    return "length" if stop_reason in ("max_tokens", "context") else "stop"


def _token_entry(tok, lp, tokenizer) -> dict:
    def one(t, v):
        b = tokenizer.token_bytes(t)
        return {"token": b.decode("utf-8", "replace"), "logprob": v, "bytes": list(b)}
    e = one(tok, lp["logprob"])
    e["top_logprobs"] = [one(t, v) for t, v in lp["top_logprobs"]]
    return e


def _usage(prompt_tokens, results) -> dict:
    """OpenAI's usage: cached_tokens are the prompt tokens the engine's state already held (not prefilled again);
    accepted / rejected_prediction_tokens the drafted tokens of speculative decoding that were kept / not."""
    c = sum(len(r.tokens) for r in results)
    cached = results[0].cached_tokens if results else 0
    accepted = sum(r.accepted for r in results)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": c, "total_tokens": prompt_tokens + c,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": sum(r.drafted for r in results) - accepted}}


# -- chat.completions -------------------------------------------------------------------------------------------------

class ChatCompletions:
    def __init__(self, engine):
        self.engine = engine

    async def create(self, *, messages, stream: bool = False, response_format=None, tools=None, tool_choice=None,
                     logprobs: bool = False, top_logprobs: int | None = None, auto_call: bool = False,
                     max_tool_rounds: int = 4, grammar=None, model=None, on_token=None, on_result=None, **kw):
        """OpenAI's chat.completions.create. Returns the chat.completion dict, or (stream=True) an async iterator
        of chat.completion.chunk dicts. on_token(id, text): each token as it comes (not streamed requests);
        on_result(GenerationResult): each choice's run as it ends (its stop reason, token ids, timings)."""
        eng = self.engine
        params, n = _params(kw, {})
        _check_unknown(kw, "chat.completions.create")
        params = params.replace(logprobs=bool(logprobs) or bool(top_logprobs), top_logprobs=top_logprobs or 0)
        specs, funcs = _tools(tools)
        if tool_choice is None:
            tool_choice = "auto" if specs else "none"
        if tool_choice not in ("auto", "none", "required") and not isinstance(tool_choice, dict):
            raise InputError(f"tool_choice must be 'auto', 'none', 'required' or a function, got {tool_choice!r}")
        if specs and tool_choice != "none":
            if response_format is not None or grammar is not None:
                raise InputError("response_format/grammar and tools cannot be combined (the tool call is the format)")
            gram = tool_grammar(specs, tool_choice)
        else:
            gram = constraint(response_format, grammar)
        if not isinstance(messages, list) or not messages:
            raise InputError("messages must be a non-empty list of {'role': ..., 'content': ...}")
        if stream:
            if n != 1 or auto_call:
                raise InputError("stream=True supports n=1 and no auto_call")
            return self._stream(list(messages), specs, params, gram, on_result)
        msgs = list(messages)
        for _ in range(max(1, max_tool_rounds)):
            reply = await self._complete(msgs, specs, params, gram, n, on_token, on_result)
            calls = reply["choices"][0]["message"].get("tool_calls")
            if not (auto_call and calls):
                return reply
            msgs.append(reply["choices"][0]["message"])
            for c in calls:
                f = funcs.get(c["function"]["name"])
                if f is None:
                    raise InputError(f"auto_call: the tool {c['function']['name']!r} was given as a schema, not a "
                                     f"Python function, so it cannot be called")
                result = f(**json.loads(c["function"]["arguments"]))
                if inspect.isawaitable(result):
                    result = await result
                msgs.append({"role": "tool", "tool_call_id": c["id"],
                             "content": result if isinstance(result, str) else dumps(result)})
            # after a round of calls the model answers in text or calls again ("auto")
            if specs and tool_choice != "auto":
                gram = tool_grammar(specs, "auto")
        return reply

    def _prompt(self, msgs, specs) -> list[int]:
        eng = self.engine
        tmpl = eng.chat_template
        takes_tools = "tools" in (getattr(tmpl, "source", "") or "")
        rendered = _template_messages(msgs, specs, takes_tools)
        extra = {"tools": specs} if specs and takes_tools else {}
        text = tmpl.render(rendered, add_generation_prompt=True, **extra)
        return eng.tokenizer.encode(text, add_special=False, parse_special=True)

    async def _complete(self, msgs, specs, params, gram, n, on_token, on_result):
        eng = self.engine
        ids = self._prompt(msgs, specs)
        results = []
        for i in range(n):
            p = params if params.seed is None or i == 0 else params.replace(seed=params.seed + i)
            results.append(await eng.generate_ids(ids, p, on_token=on_token, grammar=gram))
            if on_result:
                on_result(results[-1])
            if results[-1].stop_reason == "cancelled":     # engine.cancel() ends the request, not just one choice
                break
        choices = []
        for i, r in enumerate(results):
            calls = parse_tool_calls(r.text) if specs else None
            msg = {"role": "assistant", "content": None if calls else r.text}
            if calls:
                msg["tool_calls"] = calls
            lp = None
            if params.logprobs:
                lp = {"content": [_token_entry(t, x, eng.tokenizer) for t, x in zip(r.tokens, r.logprobs)]}
            choices.append({"index": i, "message": msg, "logprobs": lp, "finish_reason": _finish(r.stop_reason, calls)})
        return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
                "model": eng.name, "system_fingerprint": None, "choices": choices,
                "usage": _usage(len(ids), results)}

    async def _stream(self, msgs, specs, params, gram, on_result):
        eng = self.engine
        ids = self._prompt(msgs, specs)
        queue: asyncio.Queue = asyncio.Queue()
        cid, created = "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())

        def chunk(delta, finish=None, lp=None):
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": eng.name,
                    "system_fingerprint": None,
                    "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]}

        def on_token(tok, text):
            if text:
                queue.put_nowait(("text", text))

        async def run():
            try:
                r = await eng.generate_ids(ids, params, on_token=on_token, grammar=gram)
                if on_result:
                    on_result(r)
                queue.put_nowait(("done", r))
            except BaseException as e:      # re-raised in the consumer
                queue.put_nowait(("error", e))

        task = asyncio.ensure_future(run())
        yield chunk({"role": "assistant", "content": ""})
        texts = []
        while True:
            kind, v = await queue.get()
            if kind == "text":
                texts.append(v)
                if not specs:
                    yield chunk({"content": v})
            elif kind == "error":
                raise v
            else:
                calls = parse_tool_calls(v.text) if specs else None
                if specs and not calls:
                    yield chunk({"content": v.text})
                if calls:
                    yield chunk({"tool_calls": [dict(c, index=k) for k, c in enumerate(calls)]})
                lp = None
                if params.logprobs:
                    lp = {"content": [_token_entry(t, x, eng.tokenizer) for t, x in zip(v.tokens, v.logprobs)]}
                last = chunk({}, _finish(v.stop_reason, calls), lp)
                last["usage"] = _usage(len(ids), [v])
                yield last
                break
        await task


class _Chat:
    def __init__(self, engine):
        self.completions = ChatCompletions(engine)


# -- completions (raw text) -------------------------------------------------------------------------------------------

class Completions:
    def __init__(self, engine):
        self.engine = engine

    async def create(self, *, prompt, stream: bool = False, logprobs: int | None = None, response_format=None,
                     grammar=None, model=None, on_token=None, on_result=None, **kw):
        """OpenAI's (legacy) completions.create on raw text: the text_completion dict (stream=True: an async
        iterator of them, one piece of text each). ``logprobs``: how many top alternatives per token (0..20).
        on_token, on_result: as chat.completions.create's."""
        eng = self.engine
        params, n = _params(kw, {"max_tokens": 16})
        _check_unknown(kw, "completions.create")
        if logprobs is not None:
            params = params.replace(logprobs=True, top_logprobs=int(logprobs))
        gram = constraint(response_format, grammar)
        if not isinstance(prompt, (str, list)):
            raise InputError("prompt must be text or a list of token ids")
        ids = eng.encode_prompt(prompt)
        cid, created = "cmpl-" + uuid.uuid4().hex[:24], int(time.time())
        if stream:
            if n != 1:
                raise InputError("stream=True supports n=1")
            return self._stream(ids, params, gram, cid, created, on_result)
        results = []
        for i in range(n):
            p = params if params.seed is None or i == 0 else params.replace(seed=params.seed + i)
            results.append(await eng.generate_ids(ids, p, on_token=on_token, grammar=gram))
            if on_result:
                on_result(results[-1])
            if results[-1].stop_reason == "cancelled":
                break
        choices = [{"text": r.text, "index": i, "logprobs": self._logprobs(r) if params.logprobs else None,
                    "finish_reason": _finish(r.stop_reason)} for i, r in enumerate(results)]
        return {"id": cid, "object": "text_completion", "created": created, "model": eng.name, "choices": choices,
                "usage": _usage(len(ids), results)}

    def _logprobs(self, r) -> dict:
        tk = self.engine.tokenizer
        toks, offs, off = [], [], 0
        for t in r.tokens:
            s = tk.token_bytes(t).decode("utf-8", "replace")
            toks.append(s)
            offs.append(off)
            off += len(s)
        return {"tokens": toks, "token_logprobs": [x["logprob"] for x in r.logprobs],
                "top_logprobs": [{tk.token_bytes(t).decode("utf-8", "replace"): v for t, v in x["top_logprobs"]}
                                 for x in r.logprobs], "text_offset": offs}

    async def _stream(self, ids, params, gram, cid, created, on_result):
        eng = self.engine
        queue: asyncio.Queue = asyncio.Queue()

        def on_token(tok, text):
            if text:
                queue.put_nowait(("text", text))

        async def run():
            try:
                r = await eng.generate_ids(ids, params, on_token=on_token, grammar=gram)
                if on_result:
                    on_result(r)
                queue.put_nowait(("done", r))
            except BaseException as e:
                queue.put_nowait(("error", e))

        task = asyncio.ensure_future(run())
        while True:
            kind, v = await queue.get()
            if kind == "error":
                raise v
            done = kind == "done"
            yield {"id": cid, "object": "text_completion", "created": created, "model": eng.name,
                   "choices": [{"text": "" if done else v, "index": 0, "logprobs": None,
                                "finish_reason": _finish(v.stop_reason) if done else None}]}
            if done:
                break
        await task
