"""Command line: ``python -m cera_web generate|bench|info``.

    python -m cera_web generate --prompt "The capital of France is" --max-tokens 16 --temperature 0 --json
    python -m cera_web info path/to/model.gguf

Errors exit with status 1 and a one-line message (``--debug`` shows the traceback); a malformed command line
(unknown option, a value of the wrong type) exits with status 2 and the usage, as argparse does.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from ..errors import CeraError
from ..models.spec import KV_WIDTH


def _model_path(path):
    if path:
        return path
    from .assets import default_model_path
    return default_model_path(ensure=True, quiet=True)


async def _generate(args):
    from ..engine import Engine
    from ..sampling import SamplingParams
    settings = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                                              "repeat_window", "seed") if getattr(args, k) is not None}
    SamplingParams.from_dict(settings)      # bad settings are refused before the model loads
    engine = await Engine.load(_model_path(args.model), context_size=args.context,
                               device="cpu" if args.cpu else None, kv_cache=args.kv_cache)
    engine.steps_per_read = args.steps_per_read
    if args.draft:
        await engine.load_draft(args.draft, kv_cache=args.kv_cache)
    if args.lookup:
        settings["speculative"] = "lookup"
    stream = None if args.json else (lambda tok, piece: print(piece, end="", flush=True))
    if args.stop:
        settings["stop"] = args.stop
    params = engine.settings(None, dict(settings, max_tokens=args.max_tokens, ignore_eos=args.ignore_eos))
    if args.system is not None:
        ids = engine.encode_chat([{"role": "system", "content": args.system}, {"role": "user", "content": args.prompt}])
    else:
        ids = engine.encode_prompt(args.prompt, chat=args.chat)
    if args.prompt_cache and Path(args.prompt_cache).exists():
        from ..errors import SnapshotError
        try:
            engine.restore_state(Path(args.prompt_cache).read_bytes())
        except SnapshotError as e:
            print(f"warning: prompt cache {args.prompt_cache} not used: {e}; the prompt is computed in full",
                  file=sys.stderr)
    result = await engine.generate_ids(ids, params, on_token=stream)
    if args.prompt_cache and result.stop_reason != "cancelled":
        from ..snapshot import write_bytes
        write_bytes(args.prompt_cache, await engine.save_state(ids))
    if args.json:
        out = result.as_dict()
        out["backend"] = engine.backend
        out["model"] = engine.name
        print(json.dumps(out, ensure_ascii=False))
    else:
        print()
        print(f"[{len(result.prompt_tokens)} prompt tokens at {result.prefill_tok_s:.1f} tok/s, "
              f"{len(result.tokens)} generated at {result.decode_tok_s:.1f} tok/s, stop: {result.stop_reason}; "
              f"{engine.backend}]", file=sys.stderr)


async def _bench(args):
    from . import bench
    from ..engine import Engine
    path = args.model
    if args.synthetic:
        path = bench.synthetic_path(args.synthetic, args.quant)
    t0 = time.perf_counter()
    engine = await Engine.load(_model_path(path), context_size=args.context, chunk=args.chunk, kv_cache=args.kv_cache,
                               device="cpu" if args.cpu else None)
    load_ms = round((time.perf_counter() - t0) * 1000, 1)     # from the file: parse, upload, pipelines
    # the chat message first: its first run is the first work after the load, as the page's first message
    chat = await bench.chat_ttft(engine, max(args.repeats, 2)) if args.chat else {}
    if args.draft:
        await engine.load_draft(args.draft, chunk=args.chunk, kv_cache=args.kv_cache)
    if args.draft or args.lookup or args.auto:
        mode = "draft" if args.draft else "lookup" if args.lookup else "auto"
        out = await bench.speculative(engine, mode, args.decode_tokens, repeats=max(args.repeats, 2))
    elif args.prompt_cache:
        out = await bench.prompt_cache(engine, args.prompt_tokens, repeats=args.repeats)
    else:
        out = await bench.run(engine, args.prompt_tokens, args.decode_tokens, args.steps_per_read, args.repeats,
                              args.decode_after)
    if args.synthetic:
        out["synthetic"] = {"shape": args.synthetic, "quant": args.quant, **bench.SHAPES[args.synthetic],
                            **bench.synthetic_info(path)}
    if args.profile:
        out["profile"] = await bench.profile(engine, args.prompt_tokens)
    out.update(load_ms=load_ms, context_size=engine.context_size, **chat)
    print(json.dumps(out))


def _info(args):
    from ..gguf import GGML_BLOCK, open_gguf
    g = open_gguf(_model_path(args.path))
    if args.fit and args.json:        # the preflight report alone, as one JSON object
        _fit(g, args.context, args.kv_cache, args.backend, True)
        return
    arch = g.architecture
    print(f"file: {args.path}  ({g.file_size / 2**20:.1f} MiB, GGUF v{g.version}, alignment {g.alignment})")
    print(f"name: {g.get('general.name', '?')}   architecture: {arch}")
    for key, value in g.metadata.items():
        if key.startswith(arch + ".") or key in ("tokenizer.ggml.model", "tokenizer.ggml.pre",
                                                   "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
            print(f"  {key} = {value}")
    counts = {}
    for t in g.tensors.values():
        n, b = counts.get(t.type.name, (0, 0))
        counts[t.type.name] = (n + 1, b + t.nbytes)
    print("tensor types: " + ", ".join(f"{k} x{n} ({b / 2**20:.1f} MiB)" for k, (n, b) in sorted(counts.items())))
    if args.fit:
        _fit(g, args.context, args.kv_cache, args.backend, args.json)
    if args.tensors:
        for t in g.tensors.values():
            print(f"  {t.name:40s} {t.type.name:6s} {'x'.join(map(str, t.shape)):>16s} {t.nbytes:>12,d} B")


def _fit(g, context: int | None, kv_cache: str | None = None, backend: str = "auto", as_json: bool = False):
    """info --fit: what the model needs at ``context`` tokens and whether this machine's GPU adapter takes it, then
    the preflight (cera_web.preflight: memory with scratch, a probe allocation, the context and cache a load would
    take, the speed estimated from a micro-benchmark of this adapter and of the CPU path)."""
    import asyncio
    from ..models.memory import fit_report, largest_context
    from ..models.spec import model_spec
    from .. import preflight as pf
    spec = model_spec(g)
    shown = context or 2048
    params = sum(t.n_elements for t in g.tensors.values())
    weights = sum(t.nbytes for t in g.tensors.values())
    if not as_json:
        print(f"parameters: {params / 1e6:,.1f} M   weights: {weights / 1e6:,.1f} MB   trained context: "
              f"{spec.context_train}")
        for kv in KV_WIDTH:
            print(f"KV cache at {shown} tokens ({kv}): {spec.kv_bytes(shown, kv)[1] / 1e6:,.1f} MB "
                  f"({spec.kv_bytes(1, kv)[1]:,d} bytes a token)")
    dev = None
    try:
        from ..gpu.native import NativeDevice
        dev = NativeDevice.create()
    except Exception as e:          # no wgpu, no adapter: say so, the numbers above still hold
        if not as_json:
            print(f"fit: not checked (no GPU adapter here: {str(e).splitlines()[0] if str(e) else type(e).__name__})")
    try:
        if dev is not None and not as_json:
            for kv in KV_WIDTH:
                if kv == "f16" and "shader-f16" not in dev.features:
                    print("fit (f16): no, this adapter has no shader-f16")
                    continue
                most = largest_context(spec, dev.limits, kv)
                try:
                    fit_report(g, dev.limits, shown, spec=spec, kv_cache=kv)
                    past = f"; past its trained context of {spec.context_train}" if shown > spec.context_train else ""
                    print(f"fit ({kv}): yes on {dev.name} at {shown} tokens (up to {most} by its buffer limits{past})")
                except CeraError as e:
                    print(f"fit ({kv}): no at {shown} tokens: {e}; the largest context that fits: {most}")

        async def measure():
            bench = probe = None
            cpu = await pf.cpu_microbench()
            if dev is not None and pf.choose_backend(g, dev.is_cpu, backend) == "webgpu":
                bench = await pf.gpu_microbench(dev)
                costs = pf.model_costs(g, spec)
                need = pf.memory_need(spec, costs, shown, kv_cache or "f32", "webgpu", dev.prefill_chunk)["total"]
                probe = await pf.probe_memory(dev, need)
            return bench, probe, cpu

        bench, probe, cpu = asyncio.run(measure())
        report = pf.preflight(g, g.file_size, limits=dev.limits if dev else None,
                              features=dev.features if dev else (), is_cpu=bool(dev and dev.is_cpu),
                              adapter=dev.name if dev else "", backend=backend, context=context, kv_cache=kv_cache,
                              bench=bench, cpu_bench=cpu, probe=probe, spec=spec)
        report["microbench"] = {"gpu": bench, "cpu": cpu}
        if as_json:
            print(json.dumps(report))
            return
        print("preflight:")
        for line in pf.describe(report):
            print("  " + line)
        print("(WebGPU reports no total GPU memory: the probe allocation above is the check; it is released at once)")
    finally:
        if dev is not None:
            dev.destroy()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cera_web", description=__doc__.splitlines()[0])
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate text from a prompt")
    g.add_argument("--model", help="GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); e.g. 0.7 to sample")
    g.add_argument("--top-k", type=int, help="keep the k most likely tokens (sampling defaults: see README)")
    g.add_argument("--top-p", type=float)
    g.add_argument("--min-p", type=float)
    g.add_argument("--repeat-penalty", type=float)
    g.add_argument("--repeat-window", type=int)
    g.add_argument("--seed", type=int, help="same seed, prompt and settings give the same tokens")
    g.add_argument("--stop", action="append", help="a text that ends the output (repeatable)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-turn tokens")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--system", help="a system message (implies --chat: the prompt is the user's message)")
    g.add_argument("--prompt-cache", metavar="FILE",
                   help="reuse the state of the longest prefix of the prompt that FILE holds (a snapshot: "
                        "cera_web.snapshot), then write the prompt's state to FILE")
    g.add_argument("--context", type=int, default=None,
                   help="context size in tokens (default 2048, or the most this GPU's buffer limits hold)")
    g.add_argument("--kv-cache", choices=tuple(KV_WIDTH), default="f32",
                   help="the KV cache's element type: f16 halves its memory (GPUs with shader-f16)")
    g.add_argument("--steps-per-read", type=int, default=None,
                   help="decode steps submitted per token readback (default: adapts to about 30 ms a read)")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    g.add_argument("--draft", metavar="FILE", help="a draft model (same tokenizer, smaller) for speculative decoding "
                   "of greedy replies: the output is the model's own, in fewer passes")
    g.add_argument("--lookup", action="store_true", help="speculative decoding with drafts looked up in the prompt "
                   "and the reply so far (pays when the reply repeats the prompt: edits, quotes)")
    g.add_argument("--cpu", action="store_true",
                   help="run the numpy reference model on the CPU (also used when no GPU adapter exists)")
    b = sub.add_parser("bench", help="measure prefill and decode speed (JSON)")
    b.add_argument("--model", help="GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    b.add_argument("--prompt-tokens", type=int, default=512)
    b.add_argument("--decode-tokens", type=int, default=128)
    b.add_argument("--steps-per-read", type=int, default=None,
                   help="decode steps a readback (default: adaptive, as generate and the page use)")
    b.add_argument("--chunk", type=int, default=512, help="prefill chunk size in tokens")
    b.add_argument("--context", type=int, default=2048)
    b.add_argument("--kv-cache", choices=tuple(KV_WIDTH), default="f32", help="the KV cache's element type")
    b.add_argument("--decode-after", type=int, default=16,
                   help="prompt tokens before the decode run (default 16, as llama-bench's tg; e.g. 1536 to decode "
                        "late in a long conversation)")
    b.add_argument("--repeats", type=int, default=1)
    b.add_argument("--chat", action="store_true",
                   help="also the time to first token of a one-line chat message, right after the load and warm "
                        "(bench.chat_ttft: chat_ttft_ms, chat_ttft_warm_ms, ...)")
    b.add_argument("--profile", action="store_true", help="also time each kind of dispatch alone")
    b.add_argument("--prompt-cache", action="store_true",
                   help="instead: time to first token of --prompt-tokens seen before plus 16 new, recomputed vs "
                        "restored from a snapshot file (bench.prompt_cache)")
    b.add_argument("--draft", metavar="FILE", help="measure speculative decoding with this draft model on chat tasks "
                   "against plain decoding (bench.speculative)")
    b.add_argument("--lookup", action="store_true", help="measure prompt-lookup speculative decoding likewise")
    b.add_argument("--auto", action="store_true", help="measure the default, speculative='auto', likewise")
    b.add_argument("--cpu", action="store_true", help="the numpy reference model on the CPU (the page's CPU path)")
    b.add_argument("--synthetic", nargs="?", const="smollm2-135m", metavar="SHAPE",
                   help="a random-weight model of a named shape instead of a file: smollm2-135m (the default), "
                        "llama-3.2-1b, qwen2.5-1.5b (needs the gguf package)")
    b.add_argument("--quant", default="q4_1",
                   help="tensor types of --synthetic: q4_1 (Q4_1 projections, Q8_0 embedding; the default), q8_0, "
                        "q4_k_m (Q4_K/Q6_K as llama.cpp's Q4_K_M), f16")
    i = sub.add_parser("info", help="describe a GGUF file")
    i.add_argument("path", nargs="?")
    i.add_argument("--tensors", action="store_true", help="list every tensor")
    i.add_argument("--fit", action="store_true",
                   help="the memory it needs (weights, KV cache f32/f16) and whether this GPU adapter's limits take it")
    i.add_argument("--context", type=int, default=None,
                   help="context size for --fit (default: 2048, or the largest that fits here)")
    i.add_argument("--kv-cache", choices=tuple(KV_WIDTH), default=None,
                   help="the KV cache's type for --fit (default: f32, or f16 where f32 does not fit)")
    i.add_argument("--backend", choices=("auto", "webgpu", "cpu"), default="auto",
                   help="where --fit estimates the model runs (default: as the page's auto: the CPU path on software "
                        "adapters for models whose float32 weights fit 1 GiB)")
    i.add_argument("--json", action="store_true", help="--fit prints the preflight report as one JSON object")
    args = p.parse_args(argv)
    try:
        if args.cmd == "generate":
            asyncio.run(_generate(args))
        elif args.cmd == "bench":
            asyncio.run(_bench(args))
        elif args.cmd == "info":
            _info(args)
    except (CeraError, OSError) as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
