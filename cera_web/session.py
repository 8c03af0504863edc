"""ChatSession: a multi-turn conversation on an Engine that keeps the KV cache between turns.

    chat = ChatSession(engine, system="You are a helpful assistant.")
    reply = await chat.send("What is the capital of France?", on_token=show)
"""
from __future__ import annotations

from .engine import Engine, GenerationResult, _constraint
from .errors import ContextOverflowError, InputError
from .sampling import SamplingParams


class ChatSession:
    """A multi-turn conversation that keeps the model's KV cache between turns.

    Each turn renders the whole conversation with the model's chat template, finds the longest token prefix the
    cache already holds (the previous prompt and reply, as far as the re-rendered history matches what was
    generated) and prefills only the rest. The tokens are the same as running the whole conversation from scratch.

    - ``send(text)`` adds a user message and generates the reply; ``regenerate()`` replaces the last reply;
      ``reset()`` forgets the conversation. All take settings like Engine.generate (``params`` and/or keyword
      arguments); the session's ``params`` (default: SamplingParams()) are the base.
    - Cancel (``cancel()`` or ``engine.cancel()``): a reply cancelled after some text was generated is kept, as far
      as it got; a turn cancelled before any text (during prefill) is dropped, leaving the conversation as before.
    - ``await save(path)`` keeps the conversation and the model's state for it (cera_web.snapshot) in a file (or
      returns the bytes); ``ChatSession.load(engine, path)`` resumes it, in this process or another: its next turn
      prefills only the new message.
    - Context: a conversation whose prompt does not fit raises ContextOverflowError with the numbers (overflow=
      "error", the default). overflow="truncate_oldest" drops whole oldest turns (user message and its replies;
      the system message stays) until the prompt plus room for min(max_tokens, context/4) reply tokens fits;
      ``dropped`` counts the messages removed so far. A reply that reaches the end of the context stops with
      stop_reason "context".
    """

    OVERFLOW = ("error", "truncate_oldest")

    def __init__(self, engine: Engine, *, system: str | None = None, messages: list[dict] | None = None,
                 params=None, overflow: str = "error"):
        if overflow not in self.OVERFLOW:
            raise InputError(f"overflow must be one of {', '.join(self.OVERFLOW)}, got {overflow!r}")
        self.engine = engine
        self.overflow = overflow
        self.params = Engine.settings(params, base=SamplingParams())     # the base of every turn's settings
        self.messages: list[dict] = []
        self.dropped = 0
        self.last_result: GenerationResult | None = None
        self.reset(system)
        for m in messages or []:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise InputError(f"messages must be dicts with string 'role' and 'content', got {m!r}")
            self.messages.append({"role": m["role"], "content": m["content"]})

    def reset(self, system: str | None = None):
        """Forget the conversation (start a new chat); ``system``: the new chat's system message, if any."""
        self.messages = [{"role": "system", "content": system}] if system else []
        self.dropped = 0
        self.last_result = None

    def cancel(self):
        self.engine.cancel()

    async def save(self, target=None) -> bytes:
        """The conversation and the engine's state for it as snapshot bytes (cera_web.snapshot), also written to
        ``target`` when given (a path, or a binary file object). The state is that of the longest prefix of the
        rendered conversation the engine holds (none, when another request ran since this session's last turn)."""
        from .snapshot import write_bytes
        ids = self.engine.encode_chat(self.messages, add_generation_prompt=False) if self.messages else []
        data = await self.engine.save_state(ids, extra={"messages": self.messages, "dropped": self.dropped})
        if target is not None:
            write_bytes(target, data)
        return data

    @classmethod
    def load(cls, engine: Engine, source, *, params=None, overflow: str = "error") -> "ChatSession":
        """The conversation of a save() (bytes, a path or a binary file object), its state restored into ``engine``.
        A snapshot made for another model file, cache type or context size, or with a damaged payload, gives the
        conversation without its state (a SnapshotWarning says why; the next turn prefills the whole prompt).
        SnapshotError when the data is not a saved conversation at all."""
        import warnings
        from .errors import SnapshotError
        from .snapshot import read_bytes, read_header
        data = read_bytes(source)
        extra = read_header(data)["extra"]
        messages = extra.get("messages")
        if not isinstance(messages, list):
            raise SnapshotError("the snapshot holds no conversation (it was not made by ChatSession.save)")
        session = cls(engine, messages=messages, params=params, overflow=overflow)
        session.dropped = int(extra.get("dropped", 0))
        try:
            engine.restore_state(data)
        except SnapshotError as e:
            warnings.warn(f"{e}: the conversation is kept, its next turn recomputes the prompt", SnapshotWarning,
                          stacklevel=2)
        return session

    async def send(self, text: str, *, on_token=None, params=None, **settings) -> GenerationResult:
        """Add the user message ``text`` and generate the assistant's reply (appended to ``messages``)."""
        return await self._reply(self._turn(text), on_token, params, settings)

    async def regenerate(self, *, on_token=None, params=None, **settings) -> GenerationResult:
        """Generate the last reply again (a fixed seed gives the same reply; pass another seed, or leave the seed
        unset, for a different one). Replaces the last assistant message, or answers a trailing user message."""
        return await self._reply(self._turn(None), on_token, params, settings)

    async def continue_reply(self, *, on_token=None, params=None, **settings) -> GenerationResult:
        """Generate more of the last reply (one cut short by max_tokens, say), appended to it: the model sees the
        conversation up to that reply, its generation prompt, and the reply so far as the start of its answer."""
        msgs = list(self.messages)
        if not msgs or msgs[-1]["role"] != "assistant":
            raise InputError("there is no reply to continue: send a message first")
        constraint = _constraint(settings.pop("response_format", None), settings.pop("grammar", None))
        p = self._settings(params, settings)
        engine = self.engine
        text = engine.chat_template.render(msgs[:-1], add_generation_prompt=True) + msgs[-1]["content"]
        ids = engine.tokenizer.encode(text, add_special=False, parse_special=True)
        if len(ids) >= engine.context_size:
            raise ContextOverflowError(f"the conversation needs {len(ids)} tokens but the context holds "
                                       f"{engine.context_size}; start a new chat")
        result = await engine.generate_ids(ids, p, on_token=on_token, grammar=constraint)
        self.last_result = result
        self.messages = msgs[:-1] + [{"role": "assistant", "content": msgs[-1]["content"] + result.text}]
        return result

    def prepare(self, text: str | None = None, *, params=None, **settings) -> tuple[list[dict], list[int], int]:
        """What send(text) (or, with text None, regenerate()) would run, without running it: the messages the
        model will see (after the overflow policy), their prompt token ids, and how many old messages that drops.
        Raises ContextOverflowError like send. ``len(ids) / engine.context_size`` is how full the context is."""
        settings.pop("response_format", None)       # constraints do not change the prompt
        settings.pop("grammar", None)
        return self._fit(self._turn(text), self._settings(params, settings))

    def _turn(self, text):
        """The messages to answer: the conversation plus the user message ``text``, or (None) up to its last one."""
        if text is not None:
            if not isinstance(text, str) or not text.strip():
                raise InputError("the message is empty: type a question or instruction")
            return self.messages + [{"role": "user", "content": text}]
        msgs = list(self.messages)
        if msgs and msgs[-1]["role"] == "assistant":
            msgs.pop()
        if not msgs or msgs[-1]["role"] != "user":
            raise InputError("there is no user message to answer yet: send one first")
        return msgs

    def _settings(self, params, settings) -> SamplingParams:
        return Engine.settings(params, settings, base=self.params, dict_base=self.params)

    async def _reply(self, msgs, on_token, params, settings) -> GenerationResult:
        constraint = _constraint(settings.pop("response_format", None), settings.pop("grammar", None))
        p = self._settings(params, settings)
        msgs, ids, dropped = self._fit(msgs, p)
        result = await self.engine.generate_ids(ids, p, on_token=on_token, grammar=constraint)
        self.last_result = result
        if result.stop_reason == "cancelled" and not result.tokens:
            return result       # stopped before any reply: the turn is dropped
        self.messages = msgs + [{"role": "assistant", "content": result.text}]
        self.dropped += dropped
        return result

    def _fit(self, msgs, p: SamplingParams):
        """(messages, their prompt ids, messages dropped) under the overflow policy."""
        ctx = self.engine.context_size
        reserve = max(1, min(p.max_tokens, ctx // 4))
        dropped = 0
        while True:
            ids = self.engine.encode_chat(msgs)
            if self.overflow == "truncate_oldest" and len(ids) + reserve > ctx:
                turn = _oldest_turn(msgs)
                if turn is not None:
                    msgs = msgs[:turn[0]] + msgs[turn[1]:]
                    dropped += turn[1] - turn[0]
                    continue
                if len(ids) >= ctx:
                    raise ContextOverflowError(
                        f"the newest message needs a {len(ids)}-token prompt even with every older turn dropped, "
                        f"but the context holds {ctx} tokens; shorten the message (or the system message) or load "
                        f"the model with a larger context size")
            if len(ids) >= ctx:
                raise ContextOverflowError(
                    f"the conversation needs {len(ids)} tokens but the context holds {ctx}; start a new chat, "
                    f"shorten the message, load the model with a larger context size, or let the session drop the "
                    f"oldest turns (overflow='truncate_oldest')")
            return msgs, ids, dropped


class SnapshotWarning(UserWarning):
    """A saved conversation's state could not be used here (ChatSession.load): it is recomputed instead."""


def _oldest_turn(msgs) -> tuple[int, int] | None:
    """[start, end) of the oldest turn (a user message and what follows it up to the next user message, after any
    system messages), or None when only the newest turn is left."""
    i = 0
    while i < len(msgs) and msgs[i]["role"] == "system":
        i += 1
    later_users = [j for j in range(i + 1, len(msgs)) if msgs[j]["role"] == "user"]
    return (i, later_users[0]) if later_users else None
