"""Benchmark of the grammar engine's per-step host cost (JSON on stdout).

    python -m cera_web.tools.bench_grammar [--gguf FILE] [--vocab 150000] [--steps 200] [--runs 8]
    python -m cera_web.tools.bench_grammar --decode [--gguf FILE | --vocab-json F] [--decode-tokens 128]

For a few JSON schemas and grammars, random walks over the real vocabulary (each token drawn from the step's mask,
seeded) play the part of generations; each step's ``mask()`` and ``advance()`` are timed. The first run of a schema
starts with empty caches (cold: every new grammar state walks the trie); later runs reuse them, as later generations
with the same schema do. ``--vocab N`` pads the model's vocabulary to N tokens with synthetic ones (concatenations
of two real tokens, so the byte statistics stay realistic), to measure a 150k-token vocabulary.

``--decode`` measures the engine instead: decode tok/s of the same prompt unconstrained (argmax plan, several steps
a readback), unconstrained through the sampler at one step a readback (what constrained decoding costs without
its mask), and under a JSON schema (first generation: cold grammar caches; then again: warm; then warm without the
host/GPU overlap of engine._Overlapped, ``engine.overlap = False``), with the host's mask time per step; each
row is the fastest of ``--repeats`` runs (the cold one is one run), every run's rate listed.
``--vocab-json`` (written by ``--save-vocab F`` where the model file is) builds a random-weight model
with the real vocabulary on machines the model file cannot reach.
"""
from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from ..grammar import Grammar, Matcher, TokenTrie, recogniser_for
from ..json_schema import schema_to_grammar

CASES = {
    "json_object": None,
    "person": {"type": "object",
               "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                              "email": {"type": "string"},
                              "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
                              "address": {"type": "object",
                                          "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                                          "required": ["city"]}},
               "required": ["name", "age", "address"]},
    "enum_list": {"type": "array", "items": {"enum": ["red", "green", "blue", 1, None]}, "maxItems": 8},
    "short_strings": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 4},
    # issue 28's keywords as a Pydantic model writes them: bounds, a pattern, formats, a nullable field
    "constrained": {"type": "object",
                    "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 150},
                                   "height": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
                                   "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                                   "email": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]},
                                   "day": {"type": "string", "format": "date"}},
                    "required": ["age", "height", "sku", "email", "day"], "additionalProperties": False},
    "arithmetic": 'root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]{1,4} | "(" expr ")"',
}


def _walk(grammar, trie, rng, steps, times, adv):
    m = Matcher(grammar, trie)
    short = trie._short
    for _ in range(steps):
        t0 = time.perf_counter()
        words = m.mask()
        times.append(time.perf_counter() - t0)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:trie.vocab]
        bits[trie.eos] = 0
        pool = np.nonzero(bits)[0]
        if not len(pool) or (m.accepting and rng.random() < 0.5):
            return
        struct = pool[short[pool]]
        choice = struct if len(struct) and rng.random() < 0.7 else pool
        t = int(choice[rng.randrange(len(choice))])
        t0 = time.perf_counter()
        m.advance(t)
        adv.append(time.perf_counter() - t0)


def _stats(xs):
    if not xs:
        return {}
    a = np.array(xs) * 1e6
    return {"n": len(a), "mean_us": round(float(a.mean()), 1), "p50_us": round(float(np.percentile(a, 50)), 1),
            "p99_us": round(float(np.percentile(a, 99)), 1), "max_us": round(float(a.max()), 1)}


# minItems: a random-weight model would otherwise often close the array at once ("[]", a 3-token run, as in session
# 3's 49k measurement); with it the constrained runs last their decode_tokens like the unconstrained ones
DECODE_SCHEMA = {"type": "array", "minItems": 8, "maxItems": 12, "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"},
                                     "city": {"type": "string"}, "member": {"type": "boolean"}},
    "required": ["name", "age", "city", "member"]}}


async def decode_bench(engine, decode_tokens: int, steps_per_read: int, repeats: int = 3) -> dict:
    from .. import grammar as gm
    spent = []
    mask = gm.Matcher.mask

    def timed(self):
        t0 = time.perf_counter()
        try:
            return mask(self)
        finally:
            spent.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    engine.token_trie()
    trie_ms = (time.perf_counter() - t0) * 1000
    ids = engine.encode_chat([{"role": "user", "content": "List some people as JSON: name, age, city, member."}])
    await engine.generate(ids[:8], max_tokens=4, stop_at_eos=False)        # warm-up
    await engine.generate(ids[:8], max_tokens=4, grammar='root ::= [a-z]+')

    def row(res, n_mask=0):
        steps = max(len(res.tokens) - 1, 1)
        r = {"tokens": len(res.tokens), "decode_tok_s": round(res.decode_tok_s, 3), "stop_reason": res.stop_reason,
             "host_ms_per_token": round(res.host_ms / steps, 4)}
        if n_mask:
            r["mask_us_mean"] = round(1e6 * sum(spent) / len(spent), 1)
            r["mask_us_max"] = round(1e6 * max(spent), 1)
        return r

    async def best(n, **kwargs):
        """The fastest of n generations (a single run swings with the GPU's clocks), with every run's rate."""
        runs = []
        for _ in range(n):
            spent.clear()
            runs.append((await engine.generate(ids, max_tokens=decode_tokens, **kwargs), list(spent)))
        top, masks = max(runs, key=lambda r: r[0].decode_tok_s)
        spent[:] = masks                                    # row() reports the masks of the run it reports
        return top, [round(r.decode_tok_s, 3) for r, _ in runs]

    out = {"model": engine.name, "backend": engine.backend, "vocab": engine.tokenizer.vocab_size,
           "prompt_tokens": len(ids), "decode_tokens": decode_tokens}
    engine.steps_per_read = steps_per_read
    res, runs = await best(repeats, stop_at_eos=False)
    out["unconstrained"] = dict(row(res), steps_per_read=steps_per_read, decode_tok_s_runs=runs)
    engine.steps_per_read = 1
    res, runs = await best(repeats, stop_at_eos=False, repeat_penalty=1.0001, temperature=0.0)
    out["unconstrained_sampler_1_step_per_read"] = dict(row(res), decode_tok_s_runs=runs)
    fmt = {"type": "json_schema", "json_schema": {"name": "people", "schema": DECODE_SCHEMA}}
    gm.Matcher.mask = timed
    try:
        out["trie_build_ms"] = round(trie_ms, 1)
        labels = ("constrained_cold", "constrained_warm", "constrained_warm_serial")
        for label in labels:
            engine.overlap = label != "constrained_warm_serial"     # serial: the host waits for each token
            res, runs = await best(1 if label == "constrained_cold" else repeats, response_format=fmt)
            out[label] = dict(row(res, 1), decode_tok_s_runs=runs)
    finally:
        gm.Matcher.mask = mask
        engine.overlap = True
    base = out["unconstrained"]["decode_tok_s"]
    for label in labels:
        out[label]["vs_unconstrained"] = round(out[label]["decode_tok_s"] / base, 3) if base else None
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="model whose vocabulary to use (default: the default model)")
    ap.add_argument("--vocab", type=int, default=0, help="pad the vocabulary to this many tokens (synthetic)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--decode", action="store_true", help="measure engine decode, constrained vs not")
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--steps-per-read", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="--decode: the best of this many runs a row (cold: one)")
    ap.add_argument("--vocab-json", help="--decode on a random-weight model with this vocabulary")
    ap.add_argument("--save-vocab", help="write the model's vocabulary as JSON for --vocab-json, and exit")
    a = ap.parse_args(argv)
    if a.save_vocab or a.decode:
        return _engine_main(a)
    from .assets import default_model_path
    from ..gguf import parse_gguf
    from ..source import FileSource
    from ..tokenizer import Tokenizer
    src = FileSource(a.gguf or default_model_path())
    tok = Tokenizer.from_gguf(parse_gguf(src.read, src.size))
    tb = [None if tok.is_special(i) else tok.token_bytes(i) for i in range(tok.vocab_size)]
    eos = tok.eot_ids
    if a.vocab > len(tb):
        rng = random.Random(0)
        real = [b for b in tb if b]
        seen = set(real)
        while len(tb) < a.vocab:
            b = rng.choice(real) + rng.choice(real)
            if b not in seen:
                seen.add(b)
                tb.append(b)
    t0 = time.perf_counter()
    trie = TokenTrie(tb, eos)
    build_ms = (time.perf_counter() - t0) * 1000
    structural = set(b'"{}[],:0123456789-.eE+ \n()*/')
    trie._short = np.array([bool(b) and set(b) <= structural for b in trie.bytes])
    out = {"vocab": trie.vocab, "synthetic_tokens": max(0, trie.vocab - tok.vocab_size), "trie_nodes": trie.nodes,
           "trie_build_ms": round(build_ms, 1), "cases": {}}
    for name, spec in CASES.items():
        t0 = time.perf_counter()
        g = Grammar.parse(spec) if isinstance(spec, str) else schema_to_grammar(spec)
        compile_ms = (time.perf_counter() - t0) * 1000
        rng = random.Random(1)
        cold, warm, adv = [], [], []
        for run in range(a.runs):
            _walk(g, trie, rng, a.steps, cold if run == 0 else warm, adv)
        rec = recogniser_for(g)
        out["cases"][name] = {"compile_ms": round(compile_ms, 2), "mask_first_run": _stats(cold),
                              "mask_later_runs": _stats(warm), "advance": _stats(adv),
                              "states_cached": len(rec._masks[1])}
    print(json.dumps(out, indent=1))


def _engine_main(a):
    import asyncio
    import tempfile
    from pathlib import Path

    from .assets import default_model_path
    if a.save_vocab:
        from ..gguf import parse_gguf
        from ..source import FileSource
        src = FileSource(a.gguf or default_model_path())
        g = parse_gguf(src.read, src.size)
        md = g.metadata
        Path(a.save_vocab).write_text(json.dumps({
            "tokens": list(md["tokenizer.ggml.tokens"]), "merges": list(md["tokenizer.ggml.merges"]),
            "types": [int(t) for t in md["tokenizer.ggml.token_type"]], "eos": int(md["tokenizer.ggml.eos_token_id"])}))
        return
    path = a.gguf
    if a.vocab_json:
        from .bench import synthetic_llama
        path = synthetic_llama(Path(tempfile.mkdtemp()) / "synthetic.gguf",
                               tokenizer=json.loads(Path(a.vocab_json).read_text()))
    from ..engine import Engine

    async def go():
        engine = await Engine.load(path or default_model_path(), context_size=1024)
        try:
            return await decode_bench(engine, a.decode_tokens, a.steps_per_read, a.repeats)
        finally:
            engine.close()
    print(json.dumps(asyncio.run(go()), indent=1))


if __name__ == "__main__":
    main()
