"""Contractions over an empty reduction (K = 0) through falcon-compile.

IREE 3.13 crashes compiling one (SIGFPE: falcon-compile, which runs IREE in
its process, exited 136 without a word). lcma-rewrite (auto, forced schemes)
and, with the rewrite off, the empty-reduction pass replace each by its init;
the compiled module must return the init. The init is a random non-zero
function argument, so a replacement by anything else (zeros, an operand)
fails. falcon-compile runs as a subprocess here: a regression is a failed
test with its exit status, not a dead pytest.

The IR side (matmul, batch_matmul, generic contractions, every option) is in
test/lit/lcma-rewrite/empty_reduction.mlir and test/lit/empty-reduction/.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from falcon_mlir.pipeline import assemble
from falcon_mlir.runner import Module

LLVM_CPU = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-llvmcpu-target-cpu=host"]
VMVX = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=vmvx"]

#: The module of the bug report: C = fill(0) + A (8 x 0) @ B (0 x 16).
FILLED = """func.func @main(%a: tensor<8x0xf32>, %b: tensor<0x16xf32>) -> tensor<8x16xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x0xf32>, tensor<0x16xf32>) outs(%f : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}
"""


def _named(op: str, ta: str, tb: str, tc: str) -> str:
    """``@main(a, b, c) = op(a, b) + c`` for a named contraction op."""
    return (f"func.func @main(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %r = {op} ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n"
            f"  return %r : {tc}\n}}\n")


def _generic(lhs: str, acc: str, ext: str, mul: str, add: str) -> str:
    """A linalg.generic contraction 6 x 0 by 0 x 9 into 6 x 9, its operands cast to ``acc`` in the body."""
    ta, tb, tc = f"tensor<6x0x{lhs}>", f"tensor<0x9x{lhs}>", f"tensor<6x9x{acc}>"
    return f"""func.func @main(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{
  %r = linalg.generic {{indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>,
                                        affine_map<(m, n, k) -> (m, n)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{
  ^bb0(%x: {lhs}, %y: {lhs}, %o: {acc}):
    %xe = {ext} %x : {lhs} to {acc}
    %ye = {ext} %y : {lhs} to {acc}
    %p = {mul} %xe, %ye : {acc}
    %s = {add} %o, %p : {acc}
    linalg.yield %s : {acc}
  }} -> {tc}
  return %r : {tc}
}}
"""


#: name -> (module, A shape, B shape, C shape, input dtype, accumulator dtype)
CASES = {
    "matmul": (_named("linalg.matmul", "tensor<8x0xf32>", "tensor<0x16xf32>", "tensor<8x16xf32>"),
               (8, 0), (0, 16), (8, 16), np.float32, np.float32),
    "batch_matmul": (_named("linalg.batch_matmul", "tensor<2x8x0xf32>", "tensor<2x0x16xf32>",
                            "tensor<2x8x16xf32>"),
                     (2, 8, 0), (2, 0, 16), (2, 8, 16), np.float32, np.float32),
    "generic_f16_f32": (_generic("f16", "f32", "arith.extf", "arith.mulf", "arith.addf"),
                        (6, 0), (0, 9), (6, 9), np.float16, np.float32),
    "generic_i8_i32": (_generic("i8", "i32", "arith.extsi", "arith.muli", "arith.addi"),
                       (6, 0), (0, 9), (6, 9), np.int8, np.int32),
}


#: K = 0 that the op's own types do not show in both operands (were: left to IREE, exit status 136).
HIDDEN = {
    # K is 0 in B, dynamic in A; M and N dynamic as well.
    "mixed": ("""func.func @main(%a: tensor<?x?xf32>, %b: tensor<0x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<0x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
""", (5, 0), (0, 7), (5, 7)),
    # K dynamic in both, each operand a tensor.cast of a static 0 (IREE folds the casts into the op).
    "casts": ("""func.func @main(%a0: tensor<2x8x0xf32>, %b0: tensor<2x0x16xf32>, %c: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %a = tensor.cast %a0 : tensor<2x8x0xf32> to tensor<2x8x?xf32>
  %b = tensor.cast %b0 : tensor<2x0x16xf32> to tensor<2x?x16xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<2x8x?xf32>, tensor<2x?x16xf32>) outs(%c : tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %r : tensor<2x8x16xf32>
}
""", (2, 8, 0), (2, 0, 16), (2, 8, 16)),
    # K dynamic, sliced to the constant size 0 out of non-empty operands (random A and B).
    "slices": ("""func.func @main(%a: tensor<8x4xf32>, %b: tensor<4x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %z = arith.constant 0 : index
  %sa = tensor.extract_slice %a[0, 0] [8, %z] [1, 1] : tensor<8x4xf32> to tensor<8x?xf32>
  %sb = tensor.extract_slice %b[0, 0] [%z, 16] [1, 1] : tensor<4x16xf32> to tensor<?x16xf32>
  %r = linalg.matmul ins(%sa, %sb : tensor<8x?xf32>, tensor<?x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}
""", (8, 4), (4, 16), (8, 16)),
}


def falcon_compile(tmp_path, text: str, *argv) -> tuple:
    """falcon-compile ``text`` in a child process with ``argv``; returns
    ``(returncode, stderr, vmfb bytes or None, report list or None)``."""
    src, out, rep = tmp_path / "in.mlir", tmp_path / "out.vmfb", tmp_path / "report.json"
    src.write_text(text)
    r = subprocess.run([sys.executable, "-m", "falcon_mlir.tools.falcon_compile", str(src), "-o", str(out),
                        f"--lcma-report={rep}", *argv], capture_output=True, timeout=600)
    err = r.stderr.decode("utf-8", "replace")
    vmfb = out.read_bytes() if out.exists() else None
    report = json.loads(rep.read_text()) if rep.exists() else None
    return r.returncode, err, vmfb, report


def _init(shape, dtype, g):
    """A random non-zero init (no element 0)."""
    if np.issubdtype(dtype, np.integer):
        return (g.integers(1, 1000, shape) * g.choice([-1, 1], shape)).astype(dtype)
    return (g.uniform(0.5, 2.0, shape) * g.choice([-1.0, 1.0], shape)).astype(dtype)


@pytest.mark.parametrize("case,mode,flags", [
    ("matmul", None, LLVM_CPU),
    ("matmul", "--lcma-rewrite=scheme=strassen", LLVM_CPU),
    ("matmul", "--no-lcma", LLVM_CPU),
    ("matmul", "--lcma-rewrite=none", VMVX),
    ("batch_matmul", None, LLVM_CPU),
    ("batch_matmul", "--no-lcma", LLVM_CPU),
    ("generic_f16_f32", None, LLVM_CPU),
    ("generic_i8_i32", "--lcma-rewrite=scheme=strassen levels=2 form=grouped", LLVM_CPU),
])
def test_k0_compiles_and_returns_the_init(tmp_path, case, mode, flags):
    """IREE 3.13 alone dies of SIGFPE on each of these modules; compiled by
    falcon-compile (the rewrite auto, forced or off) the module runs and returns
    its init, element for element, with one report entry saying why."""
    text, sa, sb, sc, dt, acc = CASES[case]
    rc, err, vmfb, report = falcon_compile(tmp_path, text, *flags, *([mode] if mode else []))
    assert rc == 0, (rc, err)
    assert "remark" not in err and "error" not in err, err
    g = np.random.default_rng(20261204)
    a, b, c = np.zeros(sa, dt), np.zeros(sb, dt), _init(sc, acc, g)
    got = Module(vmfb)("main", a, b, c)
    assert got.dtype == acc and got.shape == sc
    np.testing.assert_array_equal(got, c)
    [e] = [e for e in report if e.get("replaced_by")]
    assert e["K"] == 0 and e["plan"] == "classical" and e["remark"] is False
    assert e["reason"].startswith("an empty reduction (K = 0): replaced by its init")
    assert "kernels" not in e  # the op is gone: no kernel to speak of


@pytest.mark.parametrize("case", sorted(HIDDEN))
@pytest.mark.parametrize("mode", [None, "--no-lcma"])
def test_k0_hidden_by_dynamic_sizes_compiles_and_returns_the_init(tmp_path, case, mode):
    """Were (break-it): a K that is 0 in one operand and dynamic in the other, or 0 behind a
    tensor.cast, was not seen as empty; IREE's canonicalization made the 0 static and IREE died of
    SIGFPE (exit status 136, no report, no word); likewise a K sliced to the constant size 0. Now
    it is replaced by its init like any K = 0 op."""
    text, sa, sb, sc = HIDDEN[case]
    rc, err, vmfb, report = falcon_compile(tmp_path, text, *LLVM_CPU, *([mode] if mode else []))
    assert rc == 0, (rc, err)
    g = np.random.default_rng([20261205, len(sc)])
    c = _init(sc, np.float32, g)
    a, b = _init(sa, np.float32, g), _init(sb, np.float32, g)  # empty unless sliced to K = 0
    got = Module(vmfb)("main", a, b, c)
    assert got.shape == sc
    np.testing.assert_array_equal(got, c)
    [e] = report
    assert e["replaced_by"] == "init" and e["K"] == 0 and e["plan"] == "classical"


def test_k0_module_of_the_bug_report_compiles_and_explains(tmp_path):
    """The bug report's module (an init filled with zeros) exited 136 without a
    word; now it compiles, returns zeros and --lcma-explain says why."""
    rc, err, vmfb, report = falcon_compile(tmp_path, FILLED, *LLVM_CPU, "--lcma-explain")
    assert rc == 0, (rc, err)
    got = Module(vmfb)("main", np.zeros((8, 0), np.float32), np.zeros((0, 16), np.float32))
    np.testing.assert_array_equal(got, np.zeros((8, 16), np.float32))
    lines = err.strip().splitlines()
    assert lines[0].endswith("in.mlir:5:8: linalg.matmul M=8 N=16 K=0 (f32 x f32 -> f32): replaced by its init"), err
    assert lines[1].startswith("  why: an empty reduction (K = 0): replaced by its init"), err
    assert lines[-1].startswith("lcma-explain: 0 of 1 contractions rewritten, 1 replaced by its init (K = 0)"), err
    assert [e["op"] for e in report] == ["linalg.matmul"] and report[0]["replaced_by"] == "init"


def test_stages_run_empty_reduction_where_the_rewrite_is_off():
    """With the rewrite off falcon-compile and the API still run empty-reduction
    (first); with it on lcma-rewrite does the replacement itself; a custom rewrite
    callable is left alone (it runs in place of both)."""
    names = lambda lcma: [s.name for s in assemble.rewrite_stages(lcma, "none", LLVM_CPU, kernels="none")]
    assert names("none") == names(None) == ["empty-reduction"]
    assert names("auto") == ["lcma-rewrite", "canonicalize"]

    def custom(module_op):
        return []

    assert assemble.make_rewrite(custom, tiles="none", flags=LLVM_CPU, kernels="none") is custom
    assert [s.name for s in assemble.make_rewrite(None, tiles="none", flags=LLVM_CPU, kernels="none").stages] \
        == ["empty-reduction"]
