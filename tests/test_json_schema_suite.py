"""The schema compiler (cera_web.json_schema) against the official JSON-Schema-Test-Suite, draft 2020-12 (its files
ship in the `jsonschema` sdist, a pinned asset: assets.json "json-schema-test-suite").

Every suite schema either compiles or is refused with a GrammarError (never a crash, never silently weakened).
For every schema that compiles, every instance the suite marks invalid is rejected by the compiled grammar (100%:
the grammar never accepts an invalid value); the valid instances it accepts are counted per keyword file (each
serialized compactly with object keys in the schema's property order, the order the grammar writes them) and the
table is printed (pytest -s). Instances the grammar accepts are also checked with the `jsonschema` package.
"""
import json
from pathlib import Path

import jsonschema
import pytest

from cera_web.grammar import GrammarError
from cera_web.json_schema import matches

SUITE = Path(__file__).resolve().parents[1] / ".assets" / "jsonschema-4.26.0" / "json" / "tests" / "draft2020-12"


@pytest.fixture(scope="module")
def suite():
    from cera_web.tools.assets import ensure_assets
    ensure_assets(["json-schema-test-suite"])      # an optional asset: fetched here on first use (then a stamp check)
    files = sorted(SUITE.glob("*.json"))
    assert len(files) >= 40, f"the suite at {SUITE} is incomplete"
    return {f.stem: json.loads(f.read_text()) for f in files}


def ordered(value, schema, root, depth=0):
    """``value`` with each object's keys in the order its schema lists them (the others after, as they were)."""
    if depth > 20 or not isinstance(schema, dict):
        return value
    if isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, dict) else {}
        return ordered(value, target, root, depth + 1)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        out = {k: ordered(value[k], props[k], root, depth + 1) for k in props if k in value}
        extra = schema.get("additionalProperties")
        out.update({k: ordered(v, extra, root, depth + 1) for k, v in value.items() if k not in out})
        return out
    if isinstance(value, list):
        pre = schema.get("prefixItems") or []
        return [ordered(v, pre[i] if i < len(pre) else schema.get("items"), root, depth + 1)
                for i, v in enumerate(value)]
    return value


def compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_invalid_instances_are_always_rejected(suite):
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    rows, wrong = [], []
    for name, groups in suite.items():
        compiled = valid = valid_ok = invalid = 0
        for group in groups:
            schema = group["schema"]
            try:
                matches(schema, "0")
            except GrammarError:
                continue
            except RecursionError:
                raise AssertionError(f"{name}: {group['description']}: the compiler recursed without end")
            compiled += 1
            validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
            for t in group["tests"]:
                text = compact(ordered(t["data"], schema, schema))
                got = matches(schema, text)
                if got and not validator.is_valid(json.loads(text)):
                    wrong.append((name, group["description"], t["description"], text))
                if t["valid"]:
                    valid += 1
                    valid_ok += got
                else:
                    invalid += 1
                    if got:
                        wrong.append((name, group["description"], t["description"], text))
        rows.append((name, len(groups), compiled, valid, valid_ok, invalid))
    print("\n| keyword file | schemas | compiled | valid instances accepted | invalid instances rejected |")
    print("|---|---|---|---|---|")
    for name, n, c, v, vo, i in rows:
        share = f"{vo}/{v} ({100 * vo / v:.0f}%)" if v else "-"
        print(f"| {name} | {n} | {c} | {share} | {i}/{i} |" if c else f"| {name} | {n} | 0 (refused) | - | - |")
    assert not wrong, "accepted but invalid: " + "; ".join(map(repr, wrong[:10]))
    # the files of the keywords the compiler enforces compile (almost) entirely and accept most valid instances
    by = {r[0]: r for r in rows}
    for name in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
                 "enum", "const", "required", "properties", "prefixItems", "items", "type", "anyOf", "allOf",
                 "multipleOf", "additionalProperties", "propertyNames", "patternProperties", "oneOf",
                 "minItems", "maxItems", "boolean_schema", "format", "ref"):
        assert by[name][2] > 0, f"{name}: no schema of the suite compiles"
