"""Multi-turn chat with the real default model (SmolLM2-135M, greedy unless stated): the KV cache kept between turns
gives the same tokens as running the whole conversation from scratch; regenerate, cancel, reset, context limits.
The session's bookkeeping is under test, so the engine runs on the CPU backend (the numpy reference model, ~10x
faster than lavapipe here); test_models holds the GPU models' cache reuse to generation from scratch."""
import asyncio

import pytest

from cera_web.engine import ChatSession
from cera_web.errors import ContextOverflowError, InputError
from cera_web.sampling import GREEDY

CTX = 96
GREEDY10 = GREEDY.replace(max_tokens=10)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def engine(smollm2_gguf):
    from cera_web.engine import Engine
    eng = run(Engine.load(smollm2_gguf, context_size=CTX, chunk=8, device="cpu"))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def chat(engine):
    """A two-turn conversation: (session, first result, second result)."""
    session = ChatSession(engine, system="Be brief.", params=GREEDY10)
    first = run(session.send("What is the capital of France?"))
    second = run(session.send("And of Italy?"))
    return session, first, second


def test_two_turns_equal_the_conversation_from_scratch(engine, chat):
    session, first, second = chat
    assert [m["role"] for m in session.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert session.messages[2]["content"] == first.text and session.messages[4]["content"] == second.text
    assert "Paris" in first.text and "Rome" in second.text
    # the second turn prefilled only what the cache did not hold: the new message, not the first prompt and reply
    assert second.cached_tokens >= len(first.prompt_tokens) + len(first.tokens) - 1
    assert len(second.prompt_tokens) - second.cached_tokens < 20
    # from scratch: the whole rendered conversation, nothing reused
    ids = engine.encode_chat(session.messages[:-1])
    assert ids == second.prompt_tokens
    scratch = run(engine.generate(ids, GREEDY10, reuse_cache=False))
    assert scratch.cached_tokens == 0
    assert scratch.tokens == second.tokens and scratch.text == second.text


def test_regenerate(engine, chat):
    session, _, second = chat
    n = len(session.messages)
    again = run(session.regenerate())
    assert again.tokens == second.tokens and len(session.messages) == n
    assert again.cached_tokens == len(again.prompt_tokens) - 1      # only the last prompt token is prefilled
    # sampled: the same seed gives the same reply, and a reply that is kept in the history
    a = run(session.regenerate(temperature=1.0, seed=11, repeat_penalty=1.3))
    b = run(session.regenerate(temperature=1.0, seed=11, repeat_penalty=1.3))
    assert a.tokens == b.tokens and a.seed == 11 and session.messages[-1]["content"] == b.text
    assert len(session.messages) == n
    # settings given as a dict (the page's form) apply on top of the session's
    c = run(session.regenerate(params={"max_tokens": 2}))
    assert c.tokens == second.tokens[:2] and c.stop_reason == "max_tokens"


def test_cancel_keeps_partial_reply_and_prefill_cancel_drops_the_turn(engine, monkeypatch, cancel_in_prefill):
    session = ChatSession(engine, system="Be brief.", params=GREEDY10)
    seen = []

    def on_token(tok, text):
        seen.append(tok)
        if len(seen) == 2:
            session.cancel()

    res = run(session.send("What is the capital of France?", on_token=on_token))
    assert res.stop_reason == "cancelled" and res.tokens == seen
    assert session.messages[-1] == {"role": "assistant", "content": res.text} and res.text
    # the session goes on consistently: regenerating the cancelled reply reuses its prompt and, greedy, starts the same
    full = run(session.regenerate())
    assert full.tokens[:2] == seen and full.cached_tokens == len(full.prompt_tokens) - 1 and "Paris" in full.text

    # cancelled during prefill: the turn is dropped, the conversation is as before
    before = [dict(m) for m in session.messages]
    calls = cancel_in_prefill(engine)
    res = run(session.send("Name one French cheese, and say where it comes from."))
    monkeypatch.undo()
    assert res.stop_reason == "cancelled" and res.tokens == [] and len(calls) == 1
    assert session.messages == before


def test_context_overflow_is_an_error_with_numbers(engine):
    session = ChatSession(engine, system="Be brief.")
    with pytest.raises(ContextOverflowError, match=rf"needs \d+ tokens but the context holds {CTX}.*truncate_oldest"):
        run(session.send("tell me " * 60))
    assert session.messages == [{"role": "system", "content": "Be brief."}]
    with pytest.raises(ContextOverflowError, match=rf"newest message.*context holds {CTX}"):
        ChatSession(engine, overflow="truncate_oldest").prepare("tell me " * 60)
    with pytest.raises(InputError, match="overflow"):
        ChatSession(engine, overflow="wrap")


def test_truncate_oldest_drops_whole_old_turns(engine, chat):
    _, first, _ = chat
    long_turn = [{"role": "user", "content": "Describe the weather today in a few words, please: " * 4},
                 {"role": "assistant", "content": "Sunny."}]
    session = ChatSession(engine, system="Be brief.", messages=long_turn, params=GREEDY.replace(max_tokens=24),
                          overflow="truncate_oldest")
    assert len(engine.encode_chat(session.messages + [{"role": "user", "content": "Hi"}])) + 24 > CTX
    msgs, ids, dropped = session.prepare("What is the capital of France?")
    assert dropped == 2 and [m["role"] for m in msgs] == ["system", "user"]
    assert ids == first.prompt_tokens and len(ids) + 24 <= CTX
    res = run(session.send("What is the capital of France?"))
    assert session.dropped == 2 and session.messages[1]["content"] == "What is the capital of France?"
    assert res.tokens[:len(first.tokens)] == first.tokens     # the same reply as with no old turn at all


def test_reset_and_bad_input(engine):
    session = ChatSession(engine, system="Be brief.", messages=[{"role": "user", "content": "Hi"},
                                                                 {"role": "assistant", "content": "Hello!"}])
    assert len(session.messages) == 3
    session.reset()
    assert session.messages == [] and session.dropped == 0
    session.reset(system="Answer in French.")
    assert session.messages == [{"role": "system", "content": "Answer in French."}]
    with pytest.raises(InputError, match="empty"):
        run(session.send("   "))
    with pytest.raises(InputError, match="no user message"):
        run(session.regenerate())
    with pytest.raises(InputError, match="unknown generation setting"):
        run(session.send("Hi", temprature=1))
    with pytest.raises(InputError, match="role"):
        ChatSession(engine, messages=[{"role": "user"}])
