"""Random texts of a compiled grammar, byte by byte (no vocabulary): at each step one of the bytes the recogniser
allows is drawn, structural JSON bytes more often, so the walks finish; the walk may end wherever the grammar does.
Shared by the JSON Schema tests."""
import random

from cera_web.grammar import ACCEPT, Grammar, Recogniser

STRUCTURAL = set(b'"{}[],:')


def random_text(grammar: Grammar | Recogniser, rng: random.Random, max_bytes: int = 3000) -> str | None:
    """One random complete text of the grammar, or None if the walk did not finish within max_bytes."""
    rec = grammar if isinstance(grammar, Recogniser) else Recogniser(grammar)
    st, out = rec.start, bytearray()
    while len(out) < max_bytes:
        if ACCEPT in st and (rng.random() < 0.3 or st == frozenset((ACCEPT,))):
            return out.decode("utf-8")
        bits = rec.allowed_bytes(st)
        allowed = [b for b in range(256) if bits >> b & 1]
        if not allowed:
            raise AssertionError(f"dead end after {bytes(out)!r}")
        struct = [b for b in allowed if b in STRUCTURAL]
        pool = struct if struct and rng.random() < 0.5 else allowed
        b = pool[rng.randrange(len(pool))]
        st = rec.step(st, b)
        assert st, f"byte {b} was allowed but leads nowhere after {bytes(out)!r}"
        out.append(b)
    return None
