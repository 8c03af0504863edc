"""Benchmark of the grammar engine's per-step host cost (JSON on stdout).

    python -m cera_web.bench_grammar [--gguf FILE] [--vocab 150000] [--steps 200] [--runs 8]

For a few JSON schemas and grammars, random walks over the real vocabulary (each token drawn from the step's mask,
seeded) play the part of generations; each step's ``mask()`` and ``advance()`` are timed. The first run of a schema
starts with empty caches (cold: every new grammar state walks the trie); later runs reuse them, as later generations
with the same schema do. ``--vocab N`` pads the model's vocabulary to N tokens with synthetic ones (concatenations
of two real tokens, so the byte statistics stay realistic), to measure a 150k-token vocabulary.
"""
from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from .grammar import Grammar, Matcher, TokenTrie, recogniser_for
from .json_schema import schema_to_grammar

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="model whose vocabulary to use (default: the default model)")
    ap.add_argument("--vocab", type=int, default=0, help="pad the vocabulary to this many tokens (synthetic)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--runs", type=int, default=8)
    a = ap.parse_args(argv)
    from .assets import default_model_path
    from .gguf import parse_gguf
    from .source import FileSource
    from .tokenizer import Tokenizer
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


if __name__ == "__main__":
    main()
