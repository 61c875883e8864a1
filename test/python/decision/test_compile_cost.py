"""Compile cost (issue 13): what a plan emits, the warning for a forced plan
that will compile for long, and auto never choosing such a plan."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cases import FLAT_PROFILE, contraction_mlir, rewrite
from falcon_mlir.decision import Problem, decide, load_profile
from falcon_mlir.decision.compile_cost import (LONG_COMPILE_SECONDS, SECONDS_PER_COMBINE,
                                               SECONDS_PER_CONTRACTION, SECONDS_PER_TABLE_COMBINE,
                                               compile_seconds, emitted_ops)


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
