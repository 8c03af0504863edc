"""The benchmark's synthetic models (named shapes and tensor types) and the adaptive decode pacing."""
import asyncio
from pathlib import Path

import pytest

from cera_web.tools import bench
from cera_web.gguf import open_gguf
from cera_web.pacing import ReadPacer

SMALL = Path(__file__).parent / "fixtures" / "small"

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()


@pytest.mark.parametrize("shape", list(bench.SHAPES))
@pytest.mark.parametrize("quant", list(bench.QUANTS))
def test_synthetic_files_have_the_named_shapes_and_types(tmp_path, shape, quant):
    cfg = bench.SHAPES[shape]
    path = bench.synthetic_llama(tmp_path / "m.gguf", shape, quant, layers=2, vocab=512)
    g = open_gguf(str(path))
    assert g.architecture == cfg["arch"]
    assert g.arch_get("embedding_length") == cfg["hidden"] and g.arch_get("feed_forward_length") == cfg["ffn"]
    assert g.arch_get("attention.head_count_kv") == cfg["kv_heads"]
    hd = cfg["hidden"] // cfg["heads"]
    assert g.tensor("blk.1.attn_k.weight").shape == (cfg["hidden"], cfg["kv_heads"] * hd)
    assert g.tensor("blk.0.ffn_down.weight").shape == (cfg["ffn"], cfg["hidden"])
    embd, main, more, less = bench.QUANTS[quant]
    fall = (lambda t: bench.K_FALLBACK.get(t, t)) if cfg["hidden"] % 256 else (lambda t: t)
    assert g.tensor("token_embd.weight").type.name == fall(embd)
    assert g.tensor("blk.0.attn_q.weight").type.name == fall(main)
    # llama.cpp's Q4_K_M rule with 2 layers: layer 1 (>= 7/8 of 2) gets more bits, layer 0 does not
    assert g.tensor("blk.1.attn_v.weight").type.name == fall(more)
    assert g.tensor("blk.0.attn_v.weight").type.name == fall(less)
    assert ("blk.0.attn_q.bias" in g.tensors) == (cfg["arch"] == "qwen2")


def test_more_bits_matches_llama_cpp_rule_for_16_layers():
    assert [i for i in range(16) if bench.more_bits(i, 16)] == [0, 1, 4, 7, 10, 13, 14, 15]


def test_synthetic_k_quant_model_generates_on_the_gpu(tmp_path, dev):
    """A 2-layer Llama-3.2-1B-shaped Q4_K_M file loads and decodes (finite logits -> valid token ids)."""
    from cera_web.engine import Engine
    path = bench.synthetic_llama(tmp_path / "m.gguf", "llama-3.2-1b", "q4_k_m", layers=2, vocab=512)

    async def go():
        eng = await Engine.load(str(path), device=dev, context_size=64, chunk=16)
        res = await eng.generate([1, 2, 3, 4], max_tokens=3, stop_at_eos=False)
        return res.tokens
    toks = asyncio.run(go())
    assert len(toks) == 3 and all(0 <= t < 512 for t in toks)


def test_bench_run_reports_every_repeat(tmp_path, dev):
    """bench.run's JSON: the repeat with the fastest decode, and every repeat's prefill and decode speeds."""
    from cera_web.engine import Engine
    path = bench.synthetic_llama(tmp_path / "m.gguf", "smollm2-135m", "q4_1", layers=2, vocab=512)

    async def go():
        eng = await Engine.load(str(path), device=dev, context_size=64, chunk=16)
        return await bench.run(eng, prompt_tokens=20, decode_tokens=3, repeats=2)
    out = asyncio.run(go())
    assert len(out["prefill_tok_s_runs"]) == len(out["decode_tok_s_runs"]) == 2
    assert out["decode_tok_s"] == max(out["decode_tok_s_runs"])
    assert out["prefill_tok_s"] == out["prefill_tok_s_runs"][out["decode_tok_s_runs"].index(out["decode_tok_s"])]
    assert out["prompt_tokens"] == 20 and all(v > 0 for v in out["prefill_tok_s_runs"])


def test_chat_ttft_reports_the_first_and_warm_runs(tmp_path, dev):
    """bench.chat_ttft: the first message after the load, then warm ones, each through the chat template."""
    from cera_web.engine import Engine
    path = bench.synthetic_llama(tmp_path / "m.gguf", "smollm2-135m", "q4_1", layers=2, vocab=512)

    async def go():
        eng = await Engine.load(str(path), device=dev, context_size=256, chunk=16)
        return await bench.chat_ttft(eng, repeats=2, max_tokens=2), eng.encode_chat(
            [{"role": "user", "content": bench.CHAT_MESSAGES[0]}])
    out, ids = asyncio.run(go())
    assert len(out["chat_ttft_ms_runs"]) == 3 and out["chat_ttft_ms"] == out["chat_ttft_ms_runs"][0]
    assert out["chat_ttft_warm_ms"] == min(out["chat_ttft_ms_runs"][1:]) and out["chat_ttft_ms"] > 0
    assert out["chat_prompt_tokens"] == len(ids) and out["chat_template"] == "chatml"


def test_speculative_reports_both_runs_and_the_verify_cost(tmp_path, dev):
    """bench.speculative: each task with lookup off and on (the same tokens), and verify_cost: a verify pass of
    verify_rows tokens against a one-token step and a two-token chunk, each timed with its read (draft_cost: only
    with a draft model)."""
    from cera_web.engine import Engine
    path = bench.synthetic_llama(tmp_path / "m.gguf", "smollm2-135m", "q4_1", layers=2, vocab=512)

    async def go():
        eng = await Engine.load(str(path), device=dev, context_size=256, chunk=32)
        tasks = {"repeat": "a b c a b c a b c a b c"}
        look = await bench.speculative(eng, "lookup", decode_tokens=8, repeats=1, tasks=tasks)
        await eng.load_draft(str(path))         # the model as its own draft
        return look, await bench.speculative(eng, "draft", decode_tokens=8, repeats=1, tasks=tasks)
    out, drafted = asyncio.run(go())
    row, cost = out["tasks"]["repeat"], out["verify_cost"]
    assert row["same_tokens"] and row["tokens"] == 8 and row["decode_tok_s"] > 0 and row["decode_tok_s_off"] > 0
    assert cost["rows"] == 16 and cost["verify_ms"] > 0 and cost["step_ms"] > 0
    assert cost["steps_a_verify"] == round(cost["verify_ms"] / cost["step_ms"], 2)
    assert cost["two_tokens_ms"] > 0 and out["draft_cost"] is None
    assert drafted["tasks"]["repeat"]["same_tokens"] and drafted["tasks"]["repeat"]["accepted"] > 0
    assert set(drafted["draft_cost"]) == set(cost) and drafted["draft_cost"]["two_tokens_ms"] > 0


def test_verify_cost_on_the_cpu_model():
    """bench.verify_cost on the numpy CPU model (`bench --cpu --lookup`), which runs only at positions it holds: the
    passes are timed after a prompt of `pos` tokens, each going back there."""
    from cera_web.engine import Engine
    from cera_web.tools.bench import verify_cost

    async def go():
        eng = await Engine.load(SMALL / "qwen3-f32.gguf", device="cpu", context_size=128)
        return await verify_cost(eng.model, repeats=3, pos=20)
    cost = asyncio.run(go())
    assert cost["rows"] == 16 and min(cost["verify_ms"], cost["step_ms"], cost["two_tokens_ms"]) > 0


def test_pacer_sizes_reads_to_the_target_time():
    p = ReadPacer(target_ms=30, first=4, most=128)
    assert p.next(8) == 8                      # a fixed setting is used as it is
    assert p.next() == 4                       # nothing timed yet
    p.observe(4, 0.004)                        # 1 ms a step
    assert p.next() == 16                      # 30 wanted, but at most 4x the last read
    p.observe(16, 0.016)
    assert p.next() == 30
    for _ in range(10):
        p.observe(30, 0.3)                     # the GPU slows to 10 ms a step
    assert p.next() == 3
    for _ in range(10):
        p.observe(3, 3.0)                      # a CPU adapter: 1 s a step
    assert p.next() == 1


def test_kernel_shape_choices(monkeypatch):
    """The prefill tile and decode matrix-vector shape each adapter gets (the H200 measurements behind them are in
    BENCHMARKS.md), and the overrides benchmarks use."""
    from cera_web import kernels
    monkeypatch.delenv("CERA_WEB_TILE", raising=False)
    monkeypatch.delenv("CERA_WEB_MATVEC", raising=False)
    assert kernels.tiled_tile(8192, 2048, 512) == (64, 64, 1)        # Llama-3.2-1B gate/up: many tiles
    assert kernels.tiled_tile(576, 1536, 512) == (32, 32, 4)         # SmolLM2's down projection: few tiles
    monkeypatch.setenv("CERA_WEB_TILE", "64,32,2")
    assert kernels.tiled_tile(8192, 2048, 512) == (64, 32, 2)
    gpu = kernels.matvec_shape(256, 1, False, 32)
    assert gpu == {"lanes": 32, "tokens": 1, "rpt": 1, "wg": 64, "sg": True}
    assert kernels.matvec_shape(256, 1, False, 8)["sg"] is False      # subgroups narrower than a row's lanes
    assert kernels.matvec_shape(256, 1, False, None)["sg"] is False   # no subgroups feature
    assert kernels.matvec_shape(256, 1, True, 32) == {"lanes": 1, "tokens": 1, "rpt": 2, "wg": 64, "sg": False}
    assert kernels.matvec_shape(256, 40, True, 32)["rpt"] == 2        # CPU prefill passes too (a token at a time)
    assert kernels.matvec_shape(256, 40, False, 32)["tokens"] == 8
    monkeypatch.setenv("CERA_WEB_MATVEC", "lanes=16,sg=0,rpt=2")
    assert kernels.matvec_shape(256, 1, False, 32) == {"lanes": 16, "tokens": 1, "rpt": 2, "wg": 64, "sg": False}
    monkeypatch.setenv("CERA_WEB_MATVEC", "lanes=3")
    with pytest.raises(ValueError, match="lanes=3"):
        kernels.matvec_shape(256, 1, False, 32)


def test_bench_kernels_gemm_reports_gflops(dev):
    from cera_web.tools import bench_kernels
    from cera_web.gguf import GGMLType
    out = asyncio.run(bench_kernels.run([GGMLType.Q4_1], [(64, 256)], device=dev, repeats=1, target_ms=1,
                                        rotate_mib=1, gemm_tokens=16, tiles=[(64, 64, 1), (32, 32, 4)]))
    assert [r["tile"] for r in out["gemm"]] == [[64, 64, 1], [32, 32, 4]]
    assert all(r["gflops"] > 0 and r["T"] == 16 for r in out["gemm"])


def test_kernels_without_subgroups_name_no_subgroup_builtin():
    """Browsers reject a call of a subgroup builtin in a module without `enable subgroups;`, even in a branch that
    never runs: kernels built without SG must not contain one."""
    from cera_web import kernels
    from cera_web.gguf import GGMLType
    off = kernels.matmul(GGMLType.Q4_1, 256, 64, tokens=1, lanes=32, sg=False)
    on = kernels.matmul(GGMLType.Q4_1, 256, 64, tokens=1, lanes=32, sg=True)
    code = [line.split("//")[0] for line in off.splitlines()]
    assert not any("subgroup" in line for line in code)
    assert "enable subgroups;" in on and "subgroupShuffleXor" in on


def test_bench_cli_measures_the_default_speculative_mode(capsys):
    """`bench --cpu --auto`: the chat tasks with speculative="auto" against "off" on the CPU model (where "auto" is
    gated prompt lookup), the same tokens, and the verify pass's cost there."""
    import json
    from cera_web.tools.cli import main
    assert main(["bench", "--cpu", "--auto", "--model", str(SMALL / "qwen3-f32.gguf"), "--decode-tokens", "4",
                 "--repeats", "1", "--context", "2048"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "auto" and out["draft_cost"] is None and out["verify_cost"]["rows"] == 16
    assert all(row["same_tokens"] and row["tokens"] == 4 for row in out["tasks"].values())
