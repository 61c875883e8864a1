"""falcon's own CPU GEMM (generated AVX-512 C, gcc, linked into an llvm-cpu IREE module).

The tests that run the kernel need gcc and an AVX-512F CPU (skipped otherwise);
the others check the configuration, the object and the module text.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from falcon_mlir.kernels import cpu_embed, cpu_gemm, cpu_object, cpu_source
from falcon_mlir.kernels.cpu_gemm import CpuGemmConfig
from falcon_mlir.runner import BEST_CPU_FLAGS, Module

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
#: A device target as IREE prints one (texts only: nothing compiles it).
TARGET = ('#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu = "znver4", '
          'max_stack_allocation_size = 32768 : i64, target_triple = "x86_64-unknown-unknown-eabi-elf"}>')
GENERIC = '#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {target_triple = "x86_64-unknown-unknown-eabi-elf"}>'

needs_avx512 = pytest.mark.skipif(not cpu_object.host_has_avx512() or shutil.which("gcc") is None,
                                  reason="needs gcc and an AVX-512F CPU")


def _inputs(M, N, K, seed=0):
    rng = np.random.default_rng([seed, M, N, K])
    return (rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32))


def _rel_err(c, a, b):
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.abs(c - ref).max() / np.abs(ref).max())


def _run(text, M, N, K, fn="main"):
    a, b = _inputs(M, N, K)
    mod = Module(cpu_embed.compile_module(text))
    return mod(fn, a, b), a, b, mod


@pytest.mark.parametrize("bad", [dict(nr=24), dict(mr=15), dict(mc=100), dict(nc=500), dict(kc=0),
                                 dict(mr=True)])
def test_config_rejects(bad):
    with pytest.raises(ValueError, match="CpuGemmConfig"):
        CpuGemmConfig(**bad)


def test_grid_and_buffers():
    c = CpuGemmConfig(pack_rows=64)  # 14x32, kc 256, 112x512
    assert cpu_gemm.grid(257, 129, 300, c) == (5, 3, 1)
    assert cpu_gemm.packed_b_floats(129, 300, c) == 5 * 300 * 32
    assert cpu_gemm.scratch_floats(257, 1025, 300, c) == 3 * 3 * 112 * (256 + 16)


def test_choose_config_by_block_count():
    assert cpu_gemm.choose_config(1024, 1024, 1024) == cpu_gemm.SMALL_CONFIG  # 10 x 2 blocks of 112 x 512
    assert cpu_gemm.choose_config(2048, 2048, 64) == CpuGemmConfig()  # 19 x 4
    assert cpu_gemm.choose_config(100, 70, 50).label == "cpu14x32,k256,28x256"


@needs_gcc
def test_object_has_no_undefined_symbols():
    obj = cpu_source.compile_object()
    assert obj.is_file() and obj.read_bytes()[:4] == b"\x7fELF"
    assert cpu_object.undefined_symbols(obj) == []
    assert cpu_source.compile_object() == obj  # cached by source hash


def test_missing_compiler_is_one_line(monkeypatch):
    monkeypatch.setenv("FALCON_CC", "no-such-cc-falcon")
    with pytest.raises(RuntimeError, match="^no C compiler 'no-such-cc-falcon'.*FALCON_CC$"):
        cpu_source.compile_object()


@needs_gcc
def test_compiler_error_is_reported():
    with pytest.raises(RuntimeError, match="failed on falcon's CPU kernel"):
        cpu_object.compile_source("int f( {", "broken")


@needs_gcc
def test_library_call_is_refused():
    with pytest.raises(RuntimeError, match="cannot link: .*memcpy"):
        cpu_object.compile_source("void *memcpy(void *, const void *, unsigned long);\n"
                                "void f(float *a, float *b) { memcpy(a, b, 64); }", "libc")


def test_module_text_keys_the_object_by_the_device_targets_triple(monkeypatch, tmp_path):
    obj = tmp_path / "k.o"
    text = cpu_embed.gemm_module(100, 70, 50, target_attr=TARGET, obj=obj, flags=())
    assert f'{GENERIC} = [\n      #hal.executable.object<{{path = "{obj}"}}>' in text
    assert "znver4" not in text
    assert "flow.dispatch @falcon_cpu_sgemm::@pack_b[%r_gp](%b, %r_M, %r_N, %r_K)" in text
    assert "-> (tensor<100x70xf32>, tensor<30464xf32>)" in text  # C; 4 workgroups of 28 x (256 + 16) A slots
    assert "%slot = arith.constant 7616" in text and "hal.interface.workgroup.id[1]" in text


@needs_avx512
def test_object_links_when_the_compile_changes_the_target():
    """Were: the object was keyed by the exact target of the module's flags, so a compile with a flag
    that enters the target (here the stack limit: another ``max_stack_allocation_size``, as the
    training job's second half sets it) left the kernel's symbols undefined at link time."""
    M, N, K = 60, 50, 40
    a, b = _inputs(M, N, K)
    text = cpu_embed.gemm_module(M, N, K)
    mod = Module(cpu_embed.compile_module(text, tuple(cpu_embed.DEFAULT_CPU_FLAGS) +
                                          ("--iree-llvmcpu-stack-allocation-limit=2097152",)))
    ref = a.astype(np.float64) @ b
    assert np.abs(mod("main", a, b) - ref).max() / np.abs(ref).max() < 1e-5


@needs_avx512
@pytest.mark.parametrize("cpu", [("--iree-llvmcpu-target-cpu=haswell",), ()])
def test_object_does_not_link_for_a_cpu_without_avx512(cpu):
    """Were: the object was keyed by the target triple alone, so a module made for this machine's CPU
    and compiled (a second half, or falcon-opt's output) for a CPU without AVX-512 (haswell, or no CPU
    flag: LLVM's generic x86-64) linked the AVX-512 object into it, silently: illegal instructions on
    such a CPU. Keyed by the CPU features too, that compile fails to link instead; the same CPU with
    another stack limit still links (the test above)."""
    from iree.compiler import CompilerToolError

    text = cpu_embed.gemm_module(60, 50, 40)
    with pytest.raises(CompilerToolError, match="undefined symbol: falcon_cpu_pack_b_"):
        cpu_embed.compile_module(text, tuple(cpu_embed.DEFAULT_CPU_FLAGS[:2]) + cpu)


@needs_avx512
def test_object_outside_the_cache_outlives_the_process(tmp_path):
    """Were: where the cache could not take the object (here a space in its path, which IREE's link
    step splits), it went to a temporary folder removed when the process exited, so falcon-opt's
    output (exit 0) named an object that no longer existed and the later iree-compile failed
    ("referenced object file not found"). falcon-opt in a process of its own, then IREE on its
    output: it links and matches float64."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from falcon_mlir.ir.matmul_text import matmul_mlir

    M, N, K = 60, 50, 40
    src, out = tmp_path / "mm.mlir", tmp_path / "mm.opt.mlir"
    src.write_text(matmul_mlir(M, N, K, func="main"))
    env = dict(os.environ, FALCON_KERNEL_CACHE=str(tmp_path / "a cache"))
    r = subprocess.run([sys.executable, "-m", "falcon_mlir.tools.falcon_opt", str(src),
                        "--falcon-kernels=x86-avx512 min-flops=0", "-o", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    path = re.search(r'#hal\.executable\.object<\{path = "([^"]+)"\}>', text).group(1)
    assert cpu_object.linkable_path(path) and Path(path).is_file(), path
    a, b = _inputs(M, N, K)
    c = Module(cpu_embed.compile_module(text))("main", a, b)
    assert _rel_err(c, a, b) < 2e-6


def test_objects_target_keeps_backend_format_and_triple():
    assert cpu_embed.objects_target(TARGET) == GENERIC
    featured = TARGET.replace('cpu = "znver4", ', 'cpu = "znver4", cpu_features = "+avx,+avx512f", ')
    assert cpu_embed.objects_target(featured) == GENERIC.replace(
        "{target_triple", '{cpu_features = "+avx,+avx512f", target_triple')
    with pytest.raises(ValueError, match="target_triple"):
        cpu_embed.objects_target('#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu = "x"}>')


@needs_avx512
@pytest.mark.parametrize("shape", [(100, 70, 50), (257, 129, 300), (14, 32, 1), (1, 1000, 513),
                                   (1024, 1024, 1024)])
def test_numerics_against_float64(shape):
    M, N, K = shape
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K), M, N, K)
    assert c.shape == (M, N)
    assert _rel_err(c, a, b) < 2e-6


@needs_avx512
def test_small_blocks_cover_every_edge():
    """Blocks smaller than the shape: several workgroups, K blocks, column and row edges."""
    cfg = CpuGemmConfig(mr=6, nr=48, kc=40, mc=18, nc=96, pack_rows=7)
    M, N, K = 77, 201, 95
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K, cfg), M, N, K)
    assert _rel_err(c, a, b) < 2e-6


BEST_FLAGS = cpu_embed.DEFAULT_CPU_FLAGS[:2] + BEST_CPU_FLAGS


@needs_avx512
@pytest.mark.parametrize("flags", [cpu_embed.DEFAULT_CPU_FLAGS, BEST_FLAGS], ids=["host", "data-tiling"])
def test_next_to_iree_own_dispatch(flags):
    """One module holds IREE's own GEMM (@reference) and ours (@main): the object key is the device's
    exact target, which differs between IREE's default and best (data tiling, ukernels) flags."""
    M, N, K = 130, 96, 64
    a, b = _inputs(M, N, K)
    mod = Module(cpu_embed.compile_module(cpu_embed.gemm_module(M, N, K, reference=True, flags=flags), flags))
    c, r = mod("main", a, b), mod("reference", a, b)
    assert _rel_err(c, a, b) < 2e-6 and _rel_err(r, a, b) < 2e-6


@needs_avx512
def test_wrong_index_is_caught():
    """The numerics test fails on a kernel that packs A from the wrong row (i + 1)."""
    M, N, K = 100, 70, 50
    cfg = cpu_gemm.choose_config(M, N, K)  # was kernel_source(): the default blocking's object under
    src = cpu_source.kernel_source(cfg)      # 28 x 256 blocks, NaN with or without the mutant
    bad = src.replace("src[t] = a[t] + i * lda;", "src[t] = a[t] + (i + (i + 1 < mc)) * lda;")
    assert bad != src
    obj = cpu_object.compile_source(bad, "mutant")
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K, cfg, obj=obj), M, N, K)
    assert np.isfinite(c).all() and _rel_err(c, a, b) > 1e-2


# -- break-it review (breakit16): bad compilers, a damaged or unusable cache, hosts and targets
#    without the AVX-512 subsets the object uses, odd shapes ----------------------------------------

def _script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text('#!/bin/sh\ncase "$1" in --version) echo "fake cc 1.0"; exit 0;; esac\n' + body + "\n")
    p.chmod(0o755)
    return str(p)


_LAST_ARG = 'for a; do o="$a"; done'  # the compiler's last argument is the object path (-o k.o)


@needs_gcc
@pytest.mark.parametrize("body, match", [
    ("exit 0", r"made no usable object .*no such file"),  # exits 0, writes nothing
    (_LAST_ARG + '\necho garbage > "$o"', r"made no usable object .*not an ELF file"),
    # an ELF32 object (what gcc -m32 makes): IREE's x86-64 link would fail on it
    (_LAST_ARG + '\ngcc "$@" && printf "\\001" | dd of="$o" bs=1 seek=4 conv=notrunc 2>/dev/null',
     r"made no usable object .*not a 64-bit"),
])
def test_compiler_without_a_usable_object_is_one_line(tmp_path, monkeypatch, body, match):
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FALCON_CC", _script(tmp_path, "cc", body))
    with pytest.raises(RuntimeError, match=match) as e:
        cpu_object.compile_source("void f(float *a) { a[0] = 1.0f; }", "probe")
    assert "\n" not in str(e.value)
    assert not list((tmp_path / "cache").glob("cpu/*")), "nothing is cached, no temporary file is left"


def test_silent_compiler_failure_states_the_exit_status(tmp_path, monkeypatch):
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("FALCON_CC", "/bin/false")
    with pytest.raises(RuntimeError, match=r"^/bin/false failed on falcon's CPU kernel \(probe\): exit status 1, "
                                           r"no output$"):
        cpu_object.compile_source("void f(void) {}", "probe")


@needs_gcc
def test_truncated_cached_object_is_compiled_again(tmp_path, monkeypatch):
    """A damaged cache entry (a truncated object: a full disk, a killed copy) is not handed to IREE's
    linker, whose error would repeat on every run until someone deleted the file."""
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    obj = cpu_source.compile_object(cpu_gemm.SMALL_CONFIG)
    good = obj.read_bytes()
    assert cpu_object.object_problem(obj) is None
    for cut in (len(good) - 1, len(good) // 2, 40, 0):
        obj.write_bytes(good[:cut])
        assert cpu_object.object_problem(obj) is not None, cut
        assert cpu_source.compile_object(cpu_gemm.SMALL_CONFIG) == obj
        assert obj.read_bytes() == good, cut


@needs_gcc
def test_unusable_cache_dir_falls_back_to_a_temporary_one(tmp_path, monkeypatch):
    """$FALCON_KERNEL_CACHE that cannot hold the cache (here a file; a read-only folder alike) costs
    the cache only: the object goes to the user's folder under the system's temporary folder."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(blocker))
    obj = cpu_source.compile_object(cpu_gemm.SMALL_CONFIG)
    assert not str(obj).startswith(str(blocker)) and cpu_object.object_problem(obj) is None


@pytest.mark.parametrize("flags, ok", [
    ("fpu avx2 avx512f avx512bw avx512dq avx512vl fma", True),
    ("fpu avx2 avx512f avx512cd avx512er avx512pf fma", False),  # Knights Landing: F without BW/DQ/VL
    ("fpu avx2 fma", False)])
def test_host_check_wants_every_avx512_subset_the_object_uses(tmp_path, flags, ok):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert cpu_object.host_has_avx512(str(info)) is ok
    assert cpu_object.host_has_avx512(str(tmp_path / "none")) is False


def test_host_without_avx512_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_object, "host_has", lambda isa, *a: isa != "avx512")  # what the check calls
    with pytest.raises(RuntimeError, match="needs AVX-512"):
        cpu_embed.gemm_module(30, 40, 50, obj=tmp_path / "k.o")


def test_target_without_avx512_is_refused(tmp_path):
    """A module for another CPU (here Haswell, AVX2 only) would carry the AVX-512 object to a machine
    that cannot run it (SIGILL at the first call): refused at build time, naming what is missing."""
    flags = cpu_embed.DEFAULT_CPU_FLAGS[:2] + ("--iree-llvmcpu-target-cpu=haswell",)
    with pytest.raises(RuntimeError, match=r"target lacks \+avx512f, \+avx512bw, \+avx512dq, \+avx512vl"):
        cpu_embed.gemm_module(30, 40, 50, flags=flags, obj=tmp_path / "k.o")


#: Blockings small enough that prime shapes cross every block edge (M, N, K blocks, K steps of 1).
_TINY = CpuGemmConfig(mr=2, nr=16, kc=3, mc=4, nc=32, pack_rows=5)
_ODD = CpuGemmConfig(mr=28, nr=16, kc=17, mc=28, nc=48, pack_rows=3)


@needs_avx512
@pytest.mark.parametrize("shape, config", [((1, 1, 1), None), ((13, 31, 257), None), ((29, 97, 511), None),
                                           ((113, 513, 257), CpuGemmConfig()), ((31, 1, 300), _TINY),
                                           ((29, 97, 511), _TINY), ((227, 65, 777), _ODD)],
                         ids=lambda v: v.label if isinstance(v, CpuGemmConfig) else str(v))
def test_odd_shapes_against_float64(shape, config):
    M, N, K = shape
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K, config), M, N, K)
    assert c.shape == (M, N) and _rel_err(c, a, b) < 2e-6


@needs_avx512
def test_wrong_column_in_the_packed_b_tail_is_caught():
    """The odd-shape check fails on a kernel that packs the last partial B panel (here one column)
    from the wrong row of B (k + 1)."""
    src = cpu_source.kernel_source(_TINY)
    bad = src.replace("src[t] = b[t] + k * ldb + j * NR;",
                      "src[t] = b[t] + (k + (cols < NR && k + 1 < K)) * ldb + j * NR;")
    assert bad != src
    obj = cpu_object.compile_source(bad, "mutant")
    M, N, K = 29, 97, 511
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K, _TINY, obj=obj), M, N, K)
    assert _rel_err(c, a, b) > 1e-2


@pytest.mark.parametrize("sizes", [(0, 5, 5), (5, 0, 5), (5, 5, 0), (-1, 5, 5), (5, 5, 2.0), (True, 5, 5)])
def test_sizes_below_one_are_refused_by_every_builder(sizes, tmp_path):
    """Were: dispatch_lines (the piece a rewrite uses) took K = 0, where the kernel never writes C (its
    K loop does not run): C = A @ B = 0 is then whatever the buffer held (zeros from a fresh
    allocation when tried, not guaranteed), and M or N = 0 made zero-size tensors."""
    M, N, K = sizes
    with pytest.raises(ValueError, match=r"must be a positive int"):
        cpu_embed.dispatch_lines("exe", M, N, K)
    with pytest.raises(ValueError, match=r"gemm_module: . must be a positive int"):
        cpu_embed.gemm_module(M, N, K, target_attr=TARGET, obj=tmp_path / "k.o", flags=())


@needs_avx512
@pytest.mark.parametrize("folder", ["with space", 'o"brien\\x'])
def test_cache_path_iree_cannot_link_from(tmp_path, monkeypatch, folder):
    """Were: a cache folder with a space (a $HOME like /home/John Doe) or a quote failed in IREE's link
    ('iree-lld: error: cannot open /tmp/.../with: No such file'; 'sh: Unterminated quoted string'):
    IREE 3.13 runs its linker through a shell with the object path unquoted. The object now goes to the
    user's folder under the system's temporary folder then; an unlinkable path handed in is refused in
    one line."""
    odd = tmp_path / folder
    odd.mkdir()
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(odd))
    M, N, K = 20, 40, 30
    text = cpu_embed.gemm_module(M, N, K)
    assert str(odd) not in text
    c, a, b, _ = _run(text, M, N, K)
    assert _rel_err(c, a, b) < 2e-6
    with pytest.raises(ValueError, match="through a shell, unquoted"):
        cpu_embed.gemm_module(M, N, K, obj=odd / "k.o")


@needs_gcc
def test_object_of_another_blocking_is_refused(tmp_path, monkeypatch):
    """Were (break-it review): gemm_module(config=X, obj=object built for Y) gave a module whose grid
    and scratch follow X while the kernel blocks by Y: NaN at 100x70x50 for a 112 x 512 object under
    28 x 256 blocks, silently. The entry points now carry the blocking in their names, and an object
    handed in is checked for them."""
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    obj = cpu_source.compile_object(CpuGemmConfig())
    names = cpu_gemm.entry_names(CpuGemmConfig())
    assert names == ("falcon_cpu_pack_b_14x32_k256_112x512_p16", "falcon_cpu_gemm_14x32_k256_112x512_p16")
    assert cpu_gemm.entry_names(CpuGemmConfig(pack_rows=8)) != names
    for cfg in (cpu_gemm.SMALL_CONFIG, CpuGemmConfig(pack_rows=8)):
        with pytest.raises(ValueError, match=r"has no falcon_cpu_pack_b_.*built for another blocking"):
            cpu_embed.gemm_module(100, 70, 50, cfg, obj=obj, target_attr=TARGET, flags=())
    text = cpu_embed.gemm_module(100, 70, 50, CpuGemmConfig(), obj=obj, target_attr=TARGET, flags=())
    assert "func.call @falcon_cpu_gemm_14x32_k256_112x512_p16(" in text


# -- transposed operands and batches (the general entries: the packs transpose in 16 x 16 register
#    blocks; a batch is a leading dimension of A, B and C) -------------------------------------------

def _layout_inputs(M, N, K, trans_a, trans_b, batch=1, seed=0):
    """Random normal A (``K x M`` where trans_a, else ``M x K``) and B (``N x K`` or ``K x N``), with a
    leading ``batch`` above 1, and the float64 reference of ``op(A) @ op(B)`` per entry."""
    rng = np.random.default_rng([seed, M, N, K, trans_a, trans_b, batch])
    spec = cpu_embed.gemm_spec(M, N, K, trans_a, trans_b, batch)
    a = rng.standard_normal(spec.a_shape, dtype=np.float32)
    b = rng.standard_normal(spec.b_shape, dtype=np.float32)
    t = lambda x, flag: np.swapaxes(x, -1, -2) if flag else x  # noqa: E731
    return a, b, t(a, trans_a).astype(np.float64) @ t(b, trans_b).astype(np.float64)


def _run_layout(M, N, K, trans_a, trans_b, config=None, obj=None, batch=1):
    """``(relative max-norm error against float64, C)`` of falcon's kernel on one layout and batch."""
    a, b, ref = _layout_inputs(M, N, K, trans_a, trans_b, batch)
    text = cpu_embed.gemm_module(M, N, K, config, trans_a=trans_a, trans_b=trans_b, obj=obj, batch=batch)
    c = Module(cpu_embed.compile_module(text))("main", a, b)
    assert c.shape == ref.shape
    return float(np.abs(c - ref).max() / np.abs(ref).max()), c


#: Blockings where the 16 x 16 transposes meet every edge: MC not a multiple of 16 (18, 28), pack rows
#: not 16 (7, 3), K blocks not multiples of 16 (40, 17), NR 48 (three 16-row blocks per B panel).
_EDGES = CpuGemmConfig(mr=6, nr=48, kc=40, mc=18, nc=96, pack_rows=7)
_LAYOUTS = [(True, False), (False, True), (True, True)]


@needs_avx512
@pytest.mark.parametrize("trans_a, trans_b", _LAYOUTS, ids=["ta", "tb", "ta_tb"])
@pytest.mark.parametrize("shape, config", [((37, 53, 29), None), ((77, 201, 95), _EDGES), ((31, 1, 300), _TINY),
                                           ((227, 65, 777), _ODD), ((1, 17, 16), None)],
                         ids=lambda v: v.label if isinstance(v, CpuGemmConfig) else str(v))
def test_transposed_operands_against_float64(trans_a, trans_b, shape, config):
    err, _ = _run_layout(*shape, trans_a, trans_b, config)
    assert err < 2e-6


def test_transposed_module_uses_the_general_entries(tmp_path):
    text = cpu_embed.gemm_module(100, 70, 50, target_attr=TARGET, obj=tmp_path / "k.o", flags=(), trans_b=True)
    assert "func.func @main(%a: tensor<100x50xf32>, %b: tensor<70x50xf32>) -> tensor<100x70xf32>" in text
    assert "flow.dispatch @falcon_cpu_sgemm::@general_pack_b[%r_gp, %r_batch](%b, %r_N, %r_K, %r_tb)" in text
    assert "%r_tb = arith.constant 1 : index" in text and "%r_ta = arith.constant 0 : index" in text
    pack_b, gemm = cpu_gemm.general_entry_names(cpu_gemm.choose_config(100, 70, 50))
    assert gemm == "falcon_cpu_general_gemm_14x32_k256_28x256_p16" and f"func.call @{pack_b}(" in text
    assert "::@pack_b[" not in cpu_embed.gemm_module(100, 70, 50, target_attr=TARGET, obj=tmp_path / "k.o",
                                                     flags=(), trans_a=True)


@needs_avx512
@pytest.mark.parametrize("what, old, new, trans_a, trans_b", [
    # pack_a_t reads the next 16 columns of A^T (rows of A) for the first block of rows
    ("pack_a_t", "src[t] = a[t] + k * lda + i;", "src[t] = a[t] + k * lda + i + (i + 16 < mc ? 16 : 0);",
     True, False),
    # pack_b_t reads the K block one column late (k + 1) in the last panel
    ("pack_b_t", "src[t] = b[t] + (j * NR + v) * ldb + k;",
     "src[t] = b[t] + (j * NR + v) * ldb + k + ((j + 1) * NR >= N && k + 16 < K);", False, True),
    # the transpose's last lane shuffle swapped (0x88 <-> 0xDD on one pair)
    ("tile16", "r0 = _mm512_shuffle_f32x4(t0, t8, 0x88);", "r0 = _mm512_shuffle_f32x4(t0, t8, 0xDD);", True, True),
])
def test_wrong_index_in_a_transposing_pack_is_caught(what, old, new, trans_a, trans_b):
    """The layout check fails on a kernel whose transposing packs read or place one element wrong."""
    M, N, K = 77, 201, 95
    src = cpu_source.kernel_source(_EDGES)
    bad = src.replace(old, new)
    assert bad != src, what
    err, c = _run_layout(M, N, K, trans_a, trans_b, _EDGES, obj=cpu_object.compile_source(bad, "mutant"))
    assert np.isfinite(c).all() and err > 1e-2, (what, err)


def test_batch_groups_bound_the_scratch():
    """Workgroup z runs entries z, z + gz, ...: gz * gm * gn workgroups near BATCH_WORKGROUPS, at most one
    per entry, so the scratch does not grow with the batch."""
    big, small = CpuGemmConfig(), cpu_gemm.SMALL_CONFIG
    assert cpu_gemm.batch_groups(1024, 1024, 32, big) == 4          # 10 x 2 blocks per entry
    assert cpu_gemm.batch_groups(37, 53, 3, small) == 3             # 2 x 1 blocks: one entry each
    assert cpu_gemm.batch_groups(4096, 4096, 8, big) == 1           # 37 x 8 blocks
    assert cpu_gemm.batch_groups(100, 70, 1, small) == 1
    assert cpu_gemm.scratch_floats(1024, 1024, 128, big, batch=32) == 4 * 20 * 112 * 272
    assert cpu_gemm.scratch_floats(1024, 1024, 128, big, batch=320) == 4 * 20 * 112 * 272
    assert cpu_gemm.packed_b_floats(129, 300, CpuGemmConfig(), batch=3) == 3 * 5 * 300 * 32
    assert cpu_gemm.choose_config(1024, 1024, 128, batch=32) == big  # 640 blocks over the batch
    assert cpu_gemm.choose_config(1024, 1024, 128) == small


def test_batched_module_text(tmp_path):
    text = cpu_embed.gemm_module(37, 53, 29, target_attr=TARGET, obj=tmp_path / "k.o", flags=(), batch=3,
                                 trans_b=True)
    assert "func.func @main(%a: tensor<3x37x29xf32>, %b: tensor<3x53x29xf32>) -> tensor<3x37x53xf32>" in text
    assert "flow.dispatch @falcon_cpu_sgemm::@general_pack_b[%r_gp, %r_batch](%b, %r_N, %r_K, %r_tb)" in text
    assert "flow.dispatch @falcon_cpu_sgemm::@general_gemm[%r_gm, %r_gn, %r_gz](%a, %r_bp, %r_M, %r_N, %r_K, " \
           "%r_ta, %r_batch)" in text
    assert "%gz = hal.interface.workgroup.count[2] : index" in text
    with pytest.raises(ValueError, match="batch"):
        cpu_embed.dispatch_lines("exe", 37, 53, 29, batch=0)


@needs_avx512
@pytest.mark.parametrize("trans_a, trans_b", [(False, False)] + _LAYOUTS, ids=["plain", "ta", "tb", "ta_tb"])
@pytest.mark.parametrize("shape, batch, config", [
    ((37, 53, 29), 3, None),       # one workgroup per entry and block
    ((77, 201, 95), 9, _EDGES),    # 5 x 3 blocks per entry: 5 batch groups, workgroups run 1 or 2 entries
    ((13, 1, 300), 2, _TINY),
], ids=lambda v: v.label if isinstance(v, CpuGemmConfig) else str(v))
def test_batch_against_float64(trans_a, trans_b, shape, batch, config):
    err, _ = _run_layout(*shape, trans_a, trans_b, config, batch=batch)
    assert err < 2e-6


@needs_avx512
@pytest.mark.parametrize("what, old, new, M", [
    ("A's entry", "const float *a = a_ptr + a_off + bi * M * K;", "const float *a = a_ptr + a_off + bi * K * N;", 79),
    ("packed B's entry", "float *bp = bp_ptr + bp_off + wg_b * PACKED(N, K);",
     "float *bp = bp_ptr + bp_off + (wg_b == 1 ? 2 : wg_b == 2 ? 1 : wg_b) * PACKED(N, K);", 79),  # 1 <-> 2
    ("the entries of a batch group", "for (size_t bi = wg_b; bi < batch; bi += n_wg_b) {\n    const float *a",
     "for (size_t bi = wg_b; bi < batch; bi += n_wg_b + 1) {\n    const float *a", 83),
])
def test_wrong_batch_entry_is_caught(what, old, new, M):
    """The batch check fails on a kernel that reads one entry of A or packed B for another, or skips
    entries of a batch group (5 x 2 blocks per entry, 7 groups of 9 entries: workgroups 0 and 1 run
    entries 7 and 8 too). The skipping mutant has a shape of its own: an entry never written holds
    whatever the buffer held, in one process possibly an earlier run's right answer of that shape
    (the packed-B mutant computes entry 7 right)."""
    src = cpu_source.kernel_source(_EDGES)
    bad = src.replace(old, new)
    assert bad != src, what
    assert cpu_gemm.batch_groups(M, 190, 9, _EDGES) == 7
    err, _ = _run_layout(M, 190, 90, False, True, _EDGES, obj=cpu_object.compile_source(bad, "mutant"), batch=9)
    assert not err < 1e-2, (what, err)  # NaN (an entry never written) fails too


# -- B packed inside the GEMM (fuse_b_inside): one dispatch, B's panels packed by their workgroup -----

def test_b_inside_rule_and_blocking():
    """At most 1024 rows of A, a B of at least 6e6 elements, two panels of columns or more (and, above 512
    rows, panels that share out over the workers: the next test); then the default 112 x 512 blocking
    (what it was measured with), only for the plain layout without a batch."""
    big = CpuGemmConfig()
    assert cpu_gemm.fuse_b_inside(512, 7168, 2048, big) and cpu_gemm.fuse_b_inside(1024, 2560, 2560, big, 1)
    assert not cpu_gemm.fuse_b_inside(2048, 4096, 4096, big)      # M = 2048: slower there
    assert not cpu_gemm.fuse_b_inside(512, 2048, 2048, big)       # B of 4.2e6: slower there
    assert not cpu_gemm.fuse_b_inside(64, 512, 16384, big)        # one panel of 512 columns
    # K under one K block: the per-workgroup scratch (a full 256 x 512 panel, a packed-A slot) would be
    # 10x B's 25 MB at 14x200003x31; the two-dispatch form's packed B is B's size
    assert not cpu_gemm.b_inside(14, 200003, 31) and cpu_gemm.b_inside(14, 200003, 256)
    assert cpu_gemm.fused_scratch_floats(200003, big) * 4 > 10 * 200003 * 31 * 4
    main = cpu_embed.gemm_module(14, 200003, 31, target_attr=TARGET, obj="/tmp/k.o", flags=()).split("func.func @main")[1]
    assert "::@fgemm[" not in main and "::@pack_b[" in main
    assert cpu_gemm.classical_config(512, 2048, 7168) == big      # choose_config: 28 x 256 (20 blocks)
    assert cpu_gemm.choose_config(512, 2048, 7168) == cpu_gemm.SMALL_CONFIG
    assert cpu_gemm.classical_config(512, 2048, 7168, trans_b=True) == cpu_gemm.SMALL_CONFIG
    assert cpu_gemm.classical_config(512, 2048, 7168, batch=2) == cpu_gemm.choose_config(512, 2048, 7168, 2)
    text = cpu_embed.gemm_module(512, 7168, 2048, target_attr=TARGET, obj="/tmp/k.o", flags=())
    assert "flow.dispatch @falcon_cpu_sgemm::@fgemm[%r_gn](%a, %b, %r_M, %r_N, %r_K)" in text
    assert "::@pack_b[" not in text.split("func.func @main")[1]
    assert "-> (tensor<512x7168xf32>, tensor<2261504xf32>)" in text  # C; 14 slots of 256 x 512 + 112 x 272


@pytest.mark.parametrize("M, N, workers, inside", [
    (1024, 2560, 1, True), (1024, 2560, 2, False),   # 5 panels on 2 workers: 5/6 of the rounds busy
    (1024, 1536, 2, False), (1024, 3584, 2, False),  # 3 and 7 panels: 3/4, 7/8
    (1024, 3072, 2, True), (1024, 4544, 2, True),    # 6 panels: 1; 9: 9/10, the bound itself
    (1024, 4608, 4, False), (1024, 5120, 4, False),  # 9 and 10 panels on 4 workers: 9/12, 10/12
    (1024, 7680, 16, True), (1024, 6656, 16, False),  # 15 panels on 16 workers: 15/16; 13: 13/16
    (512, 2560, 2, True), (513, 2560, 2, False),     # up to 512 rows B goes inside however the panels share
])
def test_b_inside_needs_panels_that_share_out_over_the_workers(M, N, workers, inside):
    """B inside runs one workgroup per 512-column panel: above 512 rows only where p panels keep w workers
    busy at least 9/10 of the rounds, p / (ceil(p / w) w) (measured on a 2-core Zen 4: 3, 5, 7 panels at
    M = 1024 ran 0.74, 0.89, 0.95x of the two dispatches; 9 and 10 panels 1.04 and 1.09x)."""
    assert cpu_gemm.fuse_b_inside(M, N, 4096, CpuGemmConfig(), workers) is inside


@pytest.mark.parametrize("workers, inside", [(1, True), (2, False)])
def test_b_inside_follows_the_machines_workers_through_the_module(monkeypatch, workers, inside):
    """The default worker count (cpu_gemm.workers) reaches b_inside, classical_config and the module's
    dispatches alike: 1024x2560x2560 (5 panels) packs B inside on one worker, not on two (then the
    two dispatches on the blocking choose_config gives)."""
    monkeypatch.setattr(cpu_gemm, "workers", lambda: workers)
    assert cpu_gemm.b_inside(1024, 2560, 2560) is inside
    cfg = cpu_gemm.classical_config(1024, 2560, 2560)
    assert cfg == (CpuGemmConfig() if inside else cpu_gemm.choose_config(1024, 2560, 2560))
    main = cpu_embed.gemm_module(1024, 2560, 2560, target_attr=TARGET, obj="/tmp/k.o", flags=()).split("func.func @main")[1]
    assert ("::@fgemm[" in main) is inside and ("::@pack_b[" in main) is not inside
    with pytest.raises(ValueError, match="n_workers must be >= 0"):
        cpu_gemm.fuse_b_inside(1024, 2560, 2560, cfg, -2)


def test_workers_are_physical_cores(tmp_path, monkeypatch):
    """One worker per (package, core) pair of the CPUs this process may run on, as IREE's local-task
    device counts them (SMT siblings share one); os.cpu_count() where the topology is missing."""
    import os

    for cpu, (pkg, core) in enumerate([(0, 0), (0, 0), (0, 1), (1, 0)]):  # cpu1: cpu0's SMT sibling
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{pkg}\n")
        (topo / "core_id").write_text(f"{core}\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpu_gemm.workers(str(tmp_path)) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert cpu_gemm.workers(str(tmp_path)) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert cpu_gemm.workers(str(tmp_path / "none")) == 1


def test_b_inside_panels_are_512_columns_whatever_the_blocking():
    """N of 257-512 is one panel of 512 columns: two dispatches, also on the 28 x 256 blocking that
    classical_config gives there. dispatch_lines asks the rule again with the blocking it is given, and
    counting that blocking's 256-column panels it ran 64x512x16384 (and 300x300x20001) B inside on
    28 x 256, a blocking B inside was never measured faster on."""
    small = cpu_gemm.SMALL_CONFIG
    assert cpu_gemm.classical_config(64, 512, 16384) == small
    assert not cpu_gemm.fuse_b_inside(64, 512, 16384, small)
    assert not cpu_gemm.fuse_b_inside(300, 300, 20001, small)
    assert cpu_gemm.fuse_b_inside(64, 513, 16384, small)        # two panels of 512 columns
    for M, N, K in ((64, 512, 16384), (300, 300, 20001)):
        main = cpu_embed.gemm_module(M, N, K, target_attr=TARGET, obj="/tmp/k.o", flags=()).split("func.func @main")[1]
        assert "::@fgemm[" not in main and "::@pack_b[" in main and "::@gemm[" in main


@needs_avx512
@pytest.mark.parametrize("shape, cfg", [
    ((30, 3000, 2100), CpuGemmConfig(mr=6, nr=48, kc=40, mc=18, nc=96, pack_rows=7)),  # every edge, 53 K blocks
    ((100, 3000, 2100), None),                                                           # default: edges of M, N, K
])
def test_b_inside_numerics_against_float64(shape, cfg):
    M, N, K = shape
    cfg = cfg or cpu_gemm.classical_config(M, N, K)
    assert cpu_gemm.fuse_b_inside(M, N, K, cfg)
    text = cpu_embed.gemm_module(M, N, K, cfg)
    assert "::@fgemm[" in text
    c, a, b, _ = _run(text, M, N, K)
    assert np.isfinite(c).all() and _rel_err(c, a, b) < 2e-6


@needs_avx512
@pytest.mark.parametrize("old, new", [
    ("src[t] = b[t] + (p0 + k) * ldb + j0 + j;", "src[t] = b[t] + (p0 + k) * ldb + j;"),  # panel
    ("src[t] = b[t] + (p0 + k) * ldb + j0 + j;", "src[t] = b[t] + k * ldb + j0 + j;"),     # K block
])
def test_b_inside_wrong_panel_is_caught(old, new):
    """The numerics test fails on a kernel that packs the wrong columns or the wrong K block of B."""
    M, N, K = 30, 3000, 2100
    cfg = CpuGemmConfig(mr=6, nr=48, kc=40, mc=18, nc=96, pack_rows=7)
    src = cpu_source.kernel_source(cfg)
    bad = src.replace(old, new)
    assert bad != src
    obj = cpu_object.compile_source(bad, "mutant")
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K, cfg, obj=obj), M, N, K)
    assert _rel_err(c, a, b) > 1e-2
