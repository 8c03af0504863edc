"""The WGSL include lines of the kernel builder (kernels.build): //#include "name.wgsl" stands for shaders/name.wgsl,
each file once in a kernel's source; a missing file is a clear error. Code shared by several kernels exists once."""
import re

import pytest

from cera_web import kernels


@pytest.fixture
def shaders(tmp_path, monkeypatch):
    """A shader folder of our own (common.wgsl empty), with kernels._read's cache cleared around the test."""
    (tmp_path / "common.wgsl").write_text("")
    monkeypatch.setattr(kernels, "SHADER_DIR", tmp_path)
    kernels._read.cache_clear()
    yield tmp_path
    kernels._read.cache_clear()


def test_includes_are_resolved_once(shaders):
    (shaders / "k.wgsl").write_text('//#include "a.wgsl"\n//#include "b.wgsl"   // and b\nfn main() {}\n')
    (shaders / "a.wgsl").write_text('//#include "sub/c.wgsl"\nfn a() {}\n')
    (shaders / "b.wgsl").write_text('//#include "sub/c.wgsl"\nfn b() {}\n')
    (shaders / "sub").mkdir()
    (shaders / "sub" / "c.wgsl").write_text("fn c() {}\n")
    text = kernels.build("k", N=3)
    assert [line for line in text.split("\n") if line.startswith("fn ")] == ["fn c() {}", "fn a() {}", "fn b() {}",
                                                                             "fn main() {}"]
    assert "const N: u32 = 3u;" in text and "//#include" not in text


def test_a_kernel_that_includes_itself_gets_no_second_copy(shaders):
    (shaders / "k.wgsl").write_text('//#include "a.wgsl"\nfn main() {}\n')
    (shaders / "a.wgsl").write_text('//#include "k.wgsl"\n//#include "a.wgsl"\nfn a() {}\n')
    text = kernels.build("k")
    assert text.count("fn main()") == 1 and text.count("fn a()") == 1


def test_a_missing_include_names_the_file_and_the_line(shaders):
    (shaders / "k.wgsl").write_text('//#include "a.wgsl"\nfn main() {}\n')
    (shaders / "a.wgsl").write_text('//#include "gone.wgsl"\n')
    with pytest.raises(FileNotFoundError, match=r"shaders/a.wgsl includes 'gone.wgsl', which is not in"):
        kernels.build("k")


def test_every_include_in_the_shaders_resolves():
    for path in sorted(kernels.SHADER_DIR.rglob("*.wgsl")):
        for name in kernels.INCLUDE.findall(path.read_text()):
            assert (kernels.SHADER_DIR / name).is_file(), f"{path.name} includes {name}"


def test_the_argmax_tree_exists_once():
    """argmax, argmax_parts, sample and logprobs share shaders/argmax_tree.wgsl; none has its own copy."""
    tree = re.compile(r"ov > \w+\[tid\] \|\| \(ov == \w+\[tid\] && oi < \w+\[tid\]\)")
    found = [p.name for p in kernels.SHADER_DIR.rglob("*.wgsl") if tree.search(p.read_text())]
    assert found == ["argmax_tree.wgsl"]
    sources = [kernels.argmax(49152), kernels.argmax(24, pairs=True), kernels.argmax_parts(128256),
               kernels.build("sample", V=49152, RING=64, PROBE=False), kernels.build("logprobs", V=49152, TOPN=20)]
    for text in sources:
        assert text.count("fn argmax_tree(tid: u32)") == 1 and "argmax_tree(tid);" in text


def test_kernel_templates_render_their_loops_with_the_constants():
    """A kernel with jinja2 line statements (attention_tiled.wgsl) is rendered with its constants: each shape's
    loops over a thread's rows and output vectors are written out (no template syntax left, one accumulator
    variable a row and output vector), and a template name the constants lack is an error, not empty text."""
    for head_dim, rows, accumulators in ((64, 64, 4 * 2), (64, 32, 2 * 2), (128, 32, 2 * 4)):
        text = kernels.attention_tiled(9, 3, head_dim, 0.125, rows=rows)
        assert not kernels.TEMPLATE_LINE.search(text) and "{{" not in text.split("@group", 1)[1]
        assert len(set(re.findall(r"var (a\d_\d) = ", text))) == accumulators
    with pytest.raises(Exception, match="RT"):
        kernels.build("attention_tiled", HEADS=9, KV_HEADS=3, HD=64, BR=64, BC=32, SG=True, KT=4, OT=2,
                      SCALE=0.1, WINDOW=0, KV16=False, SPLIT=1, TMAX=1)
