"""What the tools say when a forced scheme is not applied: one line each, exit status 0.

falcon-compile prints the rewrite's remarks as falcon-opt does
(``FILE:LINE:COL: remark: lcma-rewrite: REASON``): a forced scheme it declines
(a rational scheme on integers, an overflow risk) is no longer silent.
falcon-opt on StableHLO input finds no linalg contraction (it does not
convert frontends) and says so, pointing at falcon-compile, which converts
the input first and rewrites it.
"""

from __future__ import annotations

import json

from falcon_mlir.tools import falcon_compile
from tool_checks import lines, opt, parses

CPU = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
       "--iree-llvmcpu-target-cpu=host"]

I32 = """func.func @main(%a: tensor<64x64xi32>, %b: tensor<64x64xi32>, %c: tensor<64x64xi32>) -> tensor<64x64xi32> {
  %r = linalg.matmul ins(%a, %b : tensor<64x64xi32>, tensor<64x64xi32>) outs(%c : tensor<64x64xi32>) -> tensor<64x64xi32>
  return %r : tensor<64x64xi32>
}
"""

HLO = """func.func @main(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}
"""


def compile_(capfd, *argv):
    rc = falcon_compile.main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return rc, out, err


def test_falcon_compile_says_when_it_declines_a_forced_scheme(capfd, src, tmp_path):
    p, _ = src(I32, "i32.mlir")
    out, rep = tmp_path / "o.vmfb", tmp_path / "r.json"
    rc, _, err = compile_(capfd, p, "-o", out, "--lcma-rewrite=scheme=2x4x5:32", f"--lcma-report={rep}", *CPU)
    assert rc == 0, err
    assert lines(err) == [f"{p}:2:8: remark: lcma-rewrite: scheme 2x4x5:32 has non-integer "
                          "coefficients and i32 is an integer type; kept classical"], err
    assert out.stat().st_size > 0
    assert json.loads(rep.read_text())[0]["plan"] == "classical"
    # the same decline in falcon-opt: the same line
    rc, _, opt_err = opt(capfd, p, "--lcma-rewrite=scheme=2x4x5:32", "-o", tmp_path / "o.mlir")
    assert rc == 0 and lines(opt_err) == lines(err)


def test_falcon_compile_overflow_decline_is_one_line(capfd, src, tmp_path):
    p, _ = src(I32, "i32.mlir")
    rc, _, err = compile_(capfd, p, "-o", tmp_path / "o.vmfb", "--lcma-rewrite=scheme=3x3x3:23", *CPU)
    assert rc == 0, err
    assert len(lines(err)) == 1 and ": remark: lcma-rewrite: worst-case magnitude" in err
    assert err.rstrip().endswith("exceeds i32 (limit 2147483647); kept classical"), err


def test_falcon_compile_applied_scheme_says_nothing(capfd, src, tmp_path):
    p, _ = src(I32.replace("i32", "f32"), "f32.mlir")
    rc, _, err = compile_(capfd, p, "-o", tmp_path / "o.vmfb", "--lcma-rewrite=scheme=strassen", *CPU)
    assert rc == 0 and err == "", err


def test_falcon_opt_on_stablehlo_says_why_nothing_happened(capfd, src, tmp_path):
    p, _ = src(HLO, "hlo.mlir")
    rep = tmp_path / "r.json"
    rc, out, err = opt(capfd, p, "--lcma-rewrite=scheme=strassen", f"--lcma-report={rep}")
    assert rc == 0, err
    assert lines(err) == [f"{p}:2:8: remark: lcma-rewrite: no contraction found: the input holds "
                          "StableHLO ops (stablehlo.dot_general), which falcon-opt does not "
                          "convert to linalg; use falcon-compile --lcma-rewrite=..., which "
                          "converts the input first"], err
    assert parses(out) and "stablehlo.dot_general" in out  # unchanged
    (entry,) = json.loads(rep.read_text())
    assert entry["kind"] == "no contraction" and entry["remark"] and entry["plan"] == "classical"
    # auto (no scheme forced) on StableHLO: the same line
    rc, _, err_auto = opt(capfd, p, "--lcma-rewrite", "-o", tmp_path / "o.mlir")
    assert rc == 0 and lines(err_auto) == lines(err)
    # --lcma-explain counts no contraction
    rc, _, err_x = opt(capfd, p, "--lcma-rewrite", "--lcma-explain", "-o", tmp_path / "o.mlir")
    assert rc == 0 and "lcma-explain: 0 of 0 contractions rewritten" in err_x


def test_falcon_compile_rewrites_the_same_stablehlo(capfd, src, tmp_path):
    p, _ = src(HLO, "hlo.mlir")
    rep = tmp_path / "r.json"
    rc, _, err = compile_(capfd, p, "-o", tmp_path / "o.vmfb", "--lcma-rewrite=scheme=strassen",
                          f"--lcma-report={rep}", *CPU)
    assert rc == 0 and err == "", err
    (entry,) = json.loads(rep.read_text())
    assert entry["plan"]["schemes"] == ["strassen"] and entry["products"] == 7


def test_falcon_opt_on_linalg_without_contractions_stays_silent(capfd, src):
    p, _ = src("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n")
    rc, out, err = opt(capfd, p, "--lcma-rewrite=scheme=strassen")
    assert rc == 0 and err == "" and parses(out)
