"""Session 15 (issue 31): where greedy decoding with prompt lookup leaves plain greedy decoding on a real model, and
how close the two best logits are there (a near-tie flipped by the verify pass's other float order, or a bug).

    python3 docs/bench/scripts/h200_s15_diverge.py MODEL [max_tokens]

For each bench.SPECULATIVE_TASKS task: the plain and the lookup tokens, the first position where they differ, and
at that position the top-2 logits of the prompt-prefill numerics (Transformer.chunk_logits over the sequence), the
token each run chose and its logit. One JSON object."""
import asyncio
import json
import sys

import numpy as np

from cera_web.engine import Engine
from cera_web.tools.bench import SPECULATIVE_TASKS


async def main(path, n):
    eng = await Engine.load(path, context_size=2048)
    out = {"backend": eng.backend, "tasks": {}}
    for name, text in SPECULATIVE_TASKS.items():
        ids = eng.encode_chat([{"role": "user", "content": text}])
        base = await eng.generate(ids, max_tokens=n, reuse_cache=False, speculative="off")
        spec = await eng.generate(ids, max_tokens=n, reuse_cache=False, speculative="lookup")
        row = {"tokens": len(base.tokens), "same": base.tokens == spec.tokens, "drafted": spec.drafted,
               "accepted": spec.accepted}
        i = next((j for j, (a, b) in enumerate(zip(base.tokens, spec.tokens)) if a != b), None)
        if i is not None:
            seq = ids + base.tokens[:i]
            logits = None
            for at in range(0, len(seq), eng.model.chunk):
                logits = await eng.model.chunk_logits(seq[at:at + eng.model.chunk], at)
            last = logits[len(seq) - 1 - (len(seq) - 1) // eng.model.chunk * eng.model.chunk]
            top = np.argsort(-last)[:2]
            row.update(position=i, plain=int(base.tokens[i]), lookup=int(spec.tokens[i]),
                       top2=[[int(t), float(last[t])] for t in top],
                       gap=float(last[top[0]] - last[top[1]]),
                       logit_plain=float(last[base.tokens[i]]), logit_lookup=float(last[spec.tokens[i]]))
        out["tasks"][name] = row
    print(json.dumps(out))
    eng.close()


asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 256))
