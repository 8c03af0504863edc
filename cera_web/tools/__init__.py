"""Tools that run beside the engine, never inside it: the command line (cli), pinned asset fetching (assets) and the
benchmarks (bench, bench_kernels, bench_grammar, bench_logprobs). The runtime (every other module of cera_web) never
imports this package, so the browser bundle leaves it out by structure."""
