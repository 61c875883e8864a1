"""Compile cost (issue 13): what a plan emits, the warning for a forced plan
that will compile for long, and auto never choosing such a plan."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cases import FLAT_PROFILE, contraction_mlir, rewrite
from falcon_mlir.decision import Problem, decide, load_profile
from falcon_mlir.decision.compile_cost import (LONG_COMPILE_SECONDS, LONG_KERNEL_COMPILE_SECONDS,
                                               SECONDS_PER_COMBINE, SECONDS_PER_CONTRACTION,
                                               SECONDS_PER_TABLE_COMBINE, compile_seconds, emitted_ops,
                                               kernel_compile_seconds, kernel_source_size)


@pytest.mark.parametrize("options, schemes, form", [
    ("scheme=strassen", ("strassen",), "per-product"),
    ("scheme=3x3x3:23", ("3x3x3:23",), "per-product"),
    ("scheme=strassen levels=2", ("strassen", "strassen"), "per-product"),
    ("scheme=3x3x3:23 levels=2", ("3x3x3:23", "3x3x3:23"), "per-product"),
    ("scheme=strassen,2x3x4:20 levels=2", ("strassen", "2x3x4:20"), "per-product"),
    ("scheme=strassen levels=3", ("strassen",) * 3, "per-product"),
    ("scheme=strassen levels=2 form=grouped", ("strassen", "strassen"), "grouped"),
])
def test_emitted_ops_count_what_the_rewrite_emits(options, schemes, form):
    # 144 x 144 x 144 divides every composed block here: no edge strips.
    text, _ = contraction_mlir(144, 144, 144)
    _, report = rewrite(text, options)
    ops = emitted_ops(schemes, form)
    assert (report[0]["products"], report[0]["combines"]) == (ops.contractions, ops.combines)
    assert report[0]["predicted_time"]["compile_seconds"] == pytest.approx(
        ops.contractions * SECONDS_PER_CONTRACTION + (ops.combines - ops.tables) * SECONDS_PER_COMBINE
        + ops.tables * SECONDS_PER_TABLE_COMBINE, abs=0.06)
    assert ops.tables == (0 if len(schemes) == 1 else 2 if form == "grouped" else ops.combines)


def test_stacked_levels_cost_grows_with_levels_not_products():
    one = emitted_ops(("3x3x3:23",))
    two = emitted_ops(("3x3x3:23",) * 2)
    assert one.contractions == 23 and two.contractions == 1  # not 529
    assert two.combines < 3 * one.combines
    assert compile_seconds(("strassen",) * 4) < compile_seconds(("strassen",) * 2) * 2.5
    assert compile_seconds(("6x6x6:153",)) > LONG_COMPILE_SECONDS


def test_forced_plan_that_compiles_for_long_warns_up_front(tmp_path):
    text, _ = contraction_mlir(240, 240, 240)
    src = tmp_path / "x.mlir"
    src.write_text(text)
    run = lambda opts: subprocess.run(
        [sys.executable, "-m", "falcon_mlir.tools.falcon_opt", str(src), f"--lcma-rewrite={opts}",
         "-o", str(tmp_path / "o.mlir")], capture_output=True, text=True)
    r = run("scheme=6x6x6:153")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"{src}:2:8: warning: lcma-rewrite: plan 6x6x6:153 (per-product) "
                               "emits 153 contractions and 326 combine ops"), lines[0]
    assert "predicted to compile them for about" in lines[0]
    r = run("scheme=strassen levels=4")  # stacked: a handful of ops, no warning
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_auto_never_picks_a_plan_that_compiles_for_long():
    flat = load_profile(FLAT_PROFILE)  # every compute-bound plan predicted faster
    d = decide(Problem(4096, 4096, 4096), flat, levels=1, forms=("per-product",))
    assert not d.choice.is_classical
    assert d.choice.compile_seconds <= LONG_COMPILE_SECONDS
    forced = decide(Problem(4096, 4096, 4096), flat, forced=("6x6x6:153",))
    assert forced.choice.compile_seconds > LONG_COMPILE_SECONDS
    # the flat profile ranks 6x6x6:153 (fewest products per block) above the choice
    assert forced.choice.seconds < d.choice.seconds


# -- the kernel form: Triton's time for the generated combine kernels -----------

def test_kernel_source_size_counts_coefficients_and_block_loads():
    # Strassen: U, V, W have 12 nonzeros each; its combine kernels load 4 + 4 + 7 blocks once.
    assert kernel_source_size(("strassen",)) == 36 + 15
    assert kernel_source_size(("strassen",) * 3) == 3 * 12 ** 3 + 572 + 596 + 773


def test_kernel_compile_seconds_against_the_measured_plans():
    """Measured on the 2-core host, Triton's cache empty (compile_cost's KERNEL_POWER): Strassen^3 43 s,
    Winograd^3 70 s, 2x4x4:26^2 375 s, Strassen^4 over 23 min for its first kernel alone."""
    assert kernel_compile_seconds(("strassen",) * 2) < 1
    assert kernel_compile_seconds(("strassen",) * 3) == pytest.approx(43, rel=0.01)
    assert 70 <= kernel_compile_seconds(("winograd",) * 3) <= 2.5 * 70
    assert kernel_compile_seconds(("2x4x4:26",) * 2) == pytest.approx(375, rel=0.15)
    # (Strassen^4, over 23 min for its first kernel: predicted hours; its size takes 10 s to count)
    assert compile_seconds(("strassen",) * 3, "kernel") > kernel_compile_seconds(("strassen",) * 3)


def test_auto_leaves_out_kernel_plans_that_compile_for_long_and_forced_ones_warn(tmp_path):
    h200 = load_profile("h200-falcon")
    d = decide(Problem(16384, 16384, 16384), h200, forms=("kernel",))
    assert d.choice.schemes == ("strassen",) * 3, d.reason  # 43 s: kept (the kernels are cached)
    assert d.choice.compile_seconds <= LONG_KERNEL_COMPILE_SECONDS
    forced = decide(Problem(16384, 16384, 16384), h200, forced=("2x4x4:26",) * 2, forms=("kernel",))
    assert forced.choice.compile_seconds > LONG_KERNEL_COMPILE_SECONDS  # measured 375 s
    text, _ = contraction_mlir(1024, 1024, 1024)
    src = tmp_path / "x.mlir"
    src.write_text(text)
    r = subprocess.run([sys.executable, "-m", "falcon_mlir.tools.falcon_opt", str(src),
                        "--lcma-rewrite=profile=h200-falcon scheme=2x4x4:26 levels=2 form=kernel",
                        "-o", str(tmp_path / "o.mlir")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(lines) == 1 and lines[0].startswith(
        f"{src}:2:8: warning: lcma-rewrite: plan 2x4x4:26+2x4x4:26 (kernel) has generated "
        "combine kernels of size 16288"), r.stderr
    assert "Triton is predicted to compile them for about" in lines[0]


# -- recursive or stacked emission of multi-level per-product plans -----------

@pytest.mark.parametrize("options, schemes", [
    ("scheme=strassen levels=2 stack=false", ("strassen", "strassen")),
    ("scheme=strassen,2x3x4:20 levels=2 stack=false", ("strassen", "2x3x4:20")),
])
def test_recursive_ops_count_what_the_recursion_emits(options, schemes):
    from falcon_mlir.decision.compile_cost import recursive_compile_seconds, recursive_ops

    text, _ = contraction_mlir(144, 144, 144)
    _, report = rewrite(text, options)
    ops = recursive_ops(schemes)
    assert report[0]["emission"] == "recursive"
    assert (report[0]["products"], report[0]["combines"]) == (ops.contractions, ops.combines)
    assert report[0]["predicted_time"]["compile_seconds"] == pytest.approx(
        recursive_compile_seconds(schemes))


def test_stacked_bytes():
    from falcon_mlir.decision.compile_cost import stacked_bytes

    # strassen^2 on 256 x 4096 x 4096: level 1 7 x (128x2048 + 2048x2048), level 2
    # 49 x (64x1024 + 1024x1024), f32
    want = 4 * (7 * (128 * 2048 + 2048 * 2048) + 49 * (64 * 1024 + 1024 * 1024))
    assert stacked_bytes(("strassen", "strassen"), 256, 4096, 4096) == want
    assert stacked_bytes(("strassen", "strassen"), 256, 4096, 4096, batch=3) == 3 * want


def test_auto_emission_recursion_where_it_compiles_fast_and_the_stack_is_large():
    from falcon_mlir.decision.compile_cost import (RECURSIVE_MODULE_SECONDS, RECURSIVE_SECONDS,
                                                   recursive_compile_seconds)

    big, _ = contraction_mlir(256, 2048, 2048)
    small, _ = contraction_mlir(256, 512, 512)
    assert recursive_compile_seconds(("strassen",) * 2) <= RECURSIVE_SECONDS
    _, rep = rewrite(big, "scheme=strassen levels=2")
    assert (rep[0]["emission"], rep[0]["products"]) == ("recursive", 49)
    _, rep = rewrite(small, "scheme=strassen levels=2")  # 7 MB stacked: fewer dispatches win
    assert (rep[0]["emission"], rep[0]["products"]) == ("stacked", 1)
    _, rep = rewrite(big, "scheme=2x2x4:14 levels=2")  # 196 products: would compile long
    assert recursive_compile_seconds(("2x2x4:14",) * 2) > RECURSIVE_SECONDS
    assert (rep[0]["emission"], rep[0]["products"]) == ("stacked", 1)
    _, rep = rewrite(big, "scheme=strassen levels=2 stack=true")
    assert (rep[0]["emission"], rep[0]["products"]) == ("stacked", 1)
    _, rep = rewrite(big, "scheme=strassen levels=2 profile=h200-iree")  # GPU: stacked
    assert rep[0]["emission"] == "stacked"
    # the module's budget: the first contraction takes recursion, the next
    # would pass RECURSIVE_MODULE_SECONDS and stays stacked
    two = big.replace("func.func @f", "func.func @g") + big
    _, rep = rewrite(two, "scheme=strassen levels=2")
    extra = rep[0]["predicted_time"]["compile_seconds"] - rep[1]["predicted_time"]["compile_seconds"]
    assert 2 * extra > RECURSIVE_MODULE_SECONDS
    assert [e["emission"] for e in rep] == ["recursive", "stacked"]
