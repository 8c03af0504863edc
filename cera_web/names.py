"""The name people know a model by, from its GGUF header: "SmolLM2 135M Instruct" for a file whose general.name is
"Smollm2 135M 8k Lc100K Mix1 Ep2". The same rule as web/ggufmeta.js's friendlyName (the page's model menu, which
names models before they download); tests/test_model_names.py checks that both give the same name for every served
checkpoint and test fixture.

The rule: general.name (else general.basename), less its fine-tune's words (general.finetune, when they are the
name's tail and not all of it), then the size (general.size_label, else the parameters counted from the tensor
shapes, as GGUF size labels write them: 135M, 0.5B) unless the name has it already (then spelled as the label), and
Instruct where the file has a chat template (Base where it has none) unless the name says so already. A word the file
name spells with inner capitals ("SmolLM2" for a converter's "Smollm2") takes that spelling. Words are split at
whitespace, '_' and '-' and joined with one space.
"""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

# JavaScript's \s (WhiteSpace and LineTerminator), so that words split exactly as in web/ggufmeta.js
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_SPLIT = re.compile(f"[{_JS_SPACE}_-]+")
_STRIP = "".join(chr(c) for c in range(0x2000, 0x200b)) + "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
_INNER_CAPITAL = re.compile(r".+[A-Z]")


def _words(s: str) -> list[str]:
    return [w for w in _SPLIT.split(s) if w]


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower()


def size_label(n: float) -> str:
    """A parameter count as GGUF size labels write it: 135M, 0.5B, 7B (ggufmeta.js sizeLabel: one decimal below 10,
    halves rounded up, as JavaScript's toFixed and Math.round do)."""
    scale, unit = ((1e12, "T") if n >= 1e12 else (1e9, "B") if n >= 1e9 else (1e6, "M") if n >= 1e6
                   else (1e3, "K"))
    x = Decimal(n / scale)   # the double's exact value, as toFixed rounds it
    if x < 10:
        text = format(x.quantize(Decimal("0.1"), ROUND_HALF_UP), "f")
        text = text[:-2] if text.endswith(".0") else text
    else:
        text = str(int(x.quantize(Decimal(1), ROUND_HALF_UP)))
    return text + unit


def friendly_name(metadata: dict, file_name: str = "", params: int | None = None,
                  complete: bool = True) -> str | None:
    """The name from a header's metadata (params: the parameters counted from its tensor table, None when it was
    not read; complete: every metadata key was read, so a missing chat template means a base model); None when the
    header names nothing."""
    name = metadata.get("general.name")
    basename = metadata.get("general.basename")
    named = name if isinstance(name, str) and name.strip(_STRIP) else basename if isinstance(basename, str) else ""
    out = _words(named)
    if not out:
        return None
    finetune = metadata.get("general.finetune")
    tune = _words(finetune) if isinstance(finetune, str) else []
    if tune and len(tune) < len(out) and all(_same(w, t) for w, t in zip(out[len(out) - len(tune):], tune)):
        out = out[:-len(tune)]
    stem = file_name[:-5] if file_name.lower().endswith(".gguf") else file_name
    file_words = _words(stem.replace(".", " "))
    out = [next((f for f in file_words if _same(f, w) and _INNER_CAPITAL.match(f)), w) for w in out]
    label = metadata.get("general.size_label")
    size = label if isinstance(label, str) else None
    if not size and params:
        size = size_label(params)
    if size:
        at = next((i for i, w in enumerate(out) if _same(w, size)), None)
        if at is None:
            out.append(size)
        else:
            out[at] = size
    if complete:
        chat = bool(metadata.get("tokenizer.chat_template"))
        says = re.compile(r"(instruct|chat|it)" if chat else "base", re.IGNORECASE)
        if not any(says.fullmatch(w) for w in out):
            out.append("Instruct" if chat else "Base")
    return " ".join(out)


def display_name(gguf, file_name: str = "") -> str:
    """The name of a parsed GGUF file (cera_web.gguf.GGUFFile; file_name: the name of the file it came from) as the
    page, the API page and the notebook show it; file_name when the header names nothing."""
    params = sum(t.n_elements for t in gguf.tensors.values())
    return friendly_name(gguf.metadata, file_name, params) or file_name
