"""python gemm_bench.py TILE|best ARGS...: cera_web bench with matmul_tiled's tile fixed (e.g. 64x64x1u2) or chosen
per shape from best.json (written by gemm_micro.py)."""
import json, sys
from cera_web import kernels
from cera_web.__main__ import main


def parse(v):
    t, u = v.split("u")
    return tuple(map(int, t.split("x"))), int(u)


choice = sys.argv[1]
if choice.startswith("default"):    # the committed policy (tiled_tile), unroll as committed or u1 / u2
    if "u" in choice[7:]:
        kernels.TILED_UNROLL = int(choice.split("u")[1])
elif choice == "best":
    best = {k: parse(v) for k, v in json.load(open("best.json")).items()}
    kernels.TILED_UNROLL = best["qkv"][1]
    by = {(960, 576): best["qkv"][0], (576, 576): best["o"][0], (1536, 576): best["gate_up"][0],
          (576, 1536): best["down"][0]}
    kernels.tiled_tile = lambda N, K, T: by.get((N, K), (64, 64, 1))
else:
    tile, kernels.TILED_UNROLL = parse(choice)
    kernels.tiled_tile = lambda N, K, T: tile
sys.exit(main(sys.argv[2:]))
