"""The falcon.plan attribute (dialects/plan.py) through lcma-rewrite: a plan
the rewrite can follow is followed, with its numerics checked on IREE
(llvm-cpu) against a float64 reference; malformed, unknown or unservable
plans never crash, stay classical with a remark, and are removed either way.
"""

from __future__ import annotations

import pytest

from cases import random_inputs, reference, rel_err, rewrite
from falcon_mlir.runner import run_mlir
from tool_checks import MM, opt


def _mm_with_plan(plan, M=8, N=8, K=8, ty="f32", acc=None):
    acc = acc or ty
    ta, tb, tc = f"tensor<{M}x{K}x{ty}>", f"tensor<{K}x{N}x{ty}>", f"tensor<{M}x{N}x{acc}>"
    return (f"func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %0 = linalg.matmul {{falcon.plan = {plan}}} ins(%a, %b : {ta}, {tb}) "
            f"outs(%c : {tc}) -> {tc}\n  return %0 : {tc}\n}}\n")


MALFORMED_PLANS = ['{schemes = "strassen"}', '{schemes = []}', '{schemes = [1, 2]}', '{}',
                   '"strassen"', '["strassen"]', 'unit', '{schemes = ["strassen"], edge = "auto"}',
                   '{schemes = ["strassen"], form = "GROUPED"}',
                   '{schemes = ["strassen"], edge = 1 : i64}', '{schemes = ["nope"]}',
                   '{schemes = ["strassen,strassen"]}',
                   '{schemes = ["strassen", "strassen", "strassen", "strassen", "strassen"]}',
                   # operands name the operand type of a kernel-form plan only
                   '{schemes = ["strassen"], form = "kernel", operands = "f8"}',
                   '{schemes = ["strassen"], form = "grouped", operands = "f16"}']


@pytest.mark.parametrize("plan", MALFORMED_PLANS)
def test_malformed_plan_stays_classical_and_is_removed(plan):
    new, report = rewrite(_mm_with_plan(plan), "scheme=auto")
    assert report[0]["plan"] == "classical"
    assert "falcon.plan" not in new


@pytest.mark.parametrize("plan,schemes", [
    ('{schemes = ["Strassen"], extra = unit, tiles = [1, 2]}', ["Strassen"]),
    ('{schemes = ["strassen*strassen"], form = "grouped"}', ["strassen*strassen"]),
    ('{schemes = ["3x2x4:20"], form = "grouped", edge = "pad"}', ["3x2x4:20"]),
])
def test_plan_attribute_numerics(plan, schemes):
    text = _mm_with_plan(plan, M=9, N=10, K=11)
    new, report = rewrite(text, "scheme=auto")
    assert report[0]["plan"]["schemes"] == schemes
    a, b, c = random_inputs([[9, 11], [11, 10], [9, 10]], ["f32"] * 3, seed=7)
    assert rel_err(run_mlir(new, "f", a, b, c), reference(a, b, c)) < 2e-5


@pytest.mark.parametrize("plan,ty,acc", [
    ('{schemes = ["strassen"], edge = "auto"}', "f32", None),
    ('{schemes = ["nope"]}', "f32", None),
    ('{schemes = ["4x4x4:48"]}', "i8", "i32"),
])
def test_fixed_unserved_plan_gets_no_remark(plan, ty, acc):
    _, report = rewrite(_mm_with_plan(plan, ty=ty, acc=acc), "scheme=auto")
    assert report[0]["plan"] == "classical"
    assert report[0]["remark"] is True


_PLAN_ON_ELEMENTWISE = """#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>, %c: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"], falcon.plan = {schemes = ["strassen"]}} ins(%a, %b : tensor<8x8xf32>, tensor<8x8xf32>) outs(%c : tensor<8x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
"""


def test_fixed_plan_on_non_contraction_survives():
    new, report = rewrite(_PLAN_ON_ELEMENTWISE, "scheme=strassen")
    assert "falcon.plan" not in new


def test_plan_attribute_garbage_stays_classical(capfd, src, tmp_path):
    text = MM.replace("linalg.matmul ins", 'linalg.matmul {falcon.plan = "garbage"} ins')
    p, _ = src(text)
    rc, out, err = opt(capfd, p, "--lcma-rewrite=scheme=strassen")
    assert rc == 0 and "Traceback" not in err and "internal error" not in err
    assert "falcon.plan" not in out


def test_plan_attribute_with_unknown_scheme(capfd, src):
    p, _ = src(MM.replace("linalg.matmul ins", 'linalg.matmul {falcon.plan = {schemes = ["nosuch"]}} ins'))
    rc, out, err = opt(capfd, p, "--lcma-rewrite")
    assert rc == 0 and "internal error" not in err, err


def test_plan_operands_round_trip_and_errors():
    """A kernel-form plan's operand type survives the attribute; other forms and unknown types are
    PlanErrors (one line)."""
    from iree.compiler import ir

    from falcon_mlir.dialects.plan import Plan, PlanError

    p = Plan(("strassen", "strassen"), "pad", "kernel", operands="f16")
    with ir.Context():
        back = Plan.from_attribute(p.to_attribute())
        plain = Plan.from_attribute(Plan(("strassen",), "pad", "kernel").to_attribute())
    assert back == p and back.to_json()["operands"] == "f16"
    assert plain.operands is None and "operands" not in plain.to_json()
    with pytest.raises(PlanError, match="operands = 'f16' is for kernel-form plans"):
        Plan(("strassen",), "peel", "grouped", operands="f16")
    with pytest.raises(PlanError, match="unknown operands 'f8'"):
        Plan(("strassen",), "pad", "kernel", operands="f8")


def test_operands_option_values():
    from falcon_mlir.options import OptionError
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions

    assert LcmaOptions.parse("").operands == "auto"
    assert LcmaOptions.parse("operands=input").operands == "input"
    with pytest.raises(OptionError, match="operands='bf16' is invalid .expected auto, input or f16."):
        LcmaOptions.parse("operands=bf16")


@pytest.mark.parametrize("ty,operands,served", [
    ("f32", "f16", False), ("f16", "bf16", False), ("bf16", "f32", False),
    ("bf16", "bf16", True), ("bf16", "f16", True), ("f16", "f16", True), ("f32", "f32", True)])
def test_kernel_plan_operands_the_kernels_cannot_form(ty, operands, served):
    """An attached kernel-form plan whose operands falcon's kernels do not form (only the input
    type, or f16 scaled for bf16; falcon_mlir.kernels.lcma.PlanSpec) is declined by lcma-rewrite
    with a remark: falcon-kernels used to leave it to IREE without a word under a report that
    said rewritten."""
    from falcon_mlir.decision import numerics

    plan = f'{{schemes = ["strassen"], edge = "pad", form = "kernel", operands = "{operands}"}}'
    new, report = rewrite(_mm_with_plan(plan, M=64, N=64, K=64, ty=ty), "scheme=auto")
    if served:
        assert numerics.kernel_operands_unserved(ty, operands) is None
        assert report[0]["plan"]["form"] == "kernel" and report[0]["operands"]["type"] == operands
        assert f'operands = "{operands}"' in new
    else:
        assert report[0]["plan"] == "classical" and report[0]["remark"] is True
        assert report[0]["reason"].startswith(f"operands = '{operands}' on {ty} inputs: falcon's kernels")
        assert "falcon.plan" not in new


@pytest.mark.parametrize("ty,acc,options", [
    ("i8", "i32", "scheme=auto"), ("f64", "f64", "scheme=auto"),
    ("i8", "i32", "profile=h200-falcon form=kernel scheme=strassen"),
    ("f64", "f64", "profile=h200-falcon form=kernel scheme=strassen")])
def test_kernel_form_on_inputs_the_kernels_do_not_take(ty, acc, options):
    """A kernel-form plan (attached, or form=kernel) on i8 or f64 inputs was an internal error (PlanError:
    unknown operands 'i8', from the operand type lcma-rewrite filled in); now classical with a remark."""
    plan = '{schemes = ["strassen"], form = "kernel"}' if options == "scheme=auto" else None
    text = _mm_with_plan(plan, M=64, N=64, K=64, ty=ty, acc=acc)
    if plan is None:
        text = text.replace(" {falcon.plan = None}", "")
    new, report = rewrite(text, options)
    assert report[0]["plan"] == "classical" and report[0]["remark"] is True
    assert report[0]["reason"] == (f"{ty} x {ty} -> {acc}: a kernel-form plan needs f32, f16 or bf16 inputs of "
                                   "one type (what falcon's kernels take)")
    assert "falcon.plan" not in new
