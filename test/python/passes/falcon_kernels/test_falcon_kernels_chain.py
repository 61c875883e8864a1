"""falcon-kernels end to end without a GPU: the module the pass builds computes what the input did.

The kernels' own numerics (a :class:`GemmSpec` against float64, every layout)
are checked under Triton's interpreter in test/python/kernels. What is left
is the pass's part: which spec it derives from an op, which values it passes
to the call (A and B, in order, as stored), how it adds a live accumulator,
the wrapper's types. Here the pass runs with its compile step replaced by
made-up kernels and its splicer by one that puts, in place of each kernel's
dispatch, IREE's own product of the spec the pass derived
(:func:`falcon_mlir.kernels.embed.reference_func`: ``op(A) @ op(B)`` read as
the kernel reads the buffers). Both the input and the result then run on the
CPU, on the same random inputs. A wrong layout flag, swapped operands, a lost
or doubled accumulator, or a wrapper whose types do not fit the op shows as a
wrong result or an IR error. Needs no Triton.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest
from iree.compiler import ir

from falcon_mlir.kernels import GemmSpec
from falcon_mlir.kernels.aot import CompiledKernel
from falcon_mlir.kernels.configs import choose_config
from falcon_mlir.kernels.embed import reference_func, tensor_type
from falcon_mlir.kernels.lcma import PlanSpec
from falcon_mlir.passes import falcon_kernels as fk
from falcon_mlir.passes.falcon_kernels import KernelsOptions, run_falcon_kernels
from falcon_mlir.passes.falcon_kernels.splice import Splicer
from falcon_mlir.runner import run_mlir


def _fake_kernel(spec: GemmSpec) -> CompiledKernel:
    cubin = b"\x7fELF" + hashlib.sha256(spec.name.encode()).digest()
    return CompiledKernel(spec=spec, config=choose_config(spec), arch="sm_90a", name="falcon_gemm", cubin=cubin,
                          num_warps=4, shared=0, global_scratch_size=384, global_scratch_align=128,
                          profile_scratch_size=0, profile_scratch_align=1, num_programs=1,
                          triton_version="fake", key=hashlib.sha256(cubin).hexdigest())


def _fake_plan(spec: PlanSpec):
    from falcon_mlir.kernels.lcma import resolve_scheme

    return SimpleNamespace(spec=spec, scheme_name=resolve_scheme(spec.scheme).name,
                           geometry=SimpleNamespace(R=resolve_scheme(spec.scheme).R),
                           products=SimpleNamespace(config=SimpleNamespace(label="fake")))


def _fake_compile(chosen, arch):
    return [_fake_plan(s.spec) if isinstance(s.spec, PlanSpec) else _fake_kernel(s.spec) for _, s, _ in chosen]


class ReferenceSplicer(Splicer):
    """Puts IREE's own product of the spec where the kernel's dispatch would be."""

    def _reference(self, spec: GemmSpec, types: tuple) -> str:
        name = f"ref_{spec.name}_{hashlib.sha256(' '.join(types).encode()).hexdigest()[:8]}"
        if name in self.symbols:
            return name
        own = (tensor_type(spec.a_shape, spec.a_dtype), tensor_type(spec.b_shape, spec.b_dtype),
               tensor_type(spec.c_shape, spec.out_dtype))
        lines, vals = [], []
        for v, t, o in zip(("%a", "%b"), types[:2], own[:2]):
            if t != o:  # a unit batch dimension the spec drops: the same buffer, read as the kernel reads it
                lines.append(f"  {v}2 = tensor.collapse_shape {v} [[0, 1], [2]] : {t} into {o}")
                v = v + "2"
            vals.append(v)
        lines.append(f"  %r = call @{name}_spec({vals[0]}, {vals[1]}) : ({own[0]}, {own[1]}) -> {own[2]}")
        r = "%r"
        if types[2] != own[2]:
            lines.append(f"  %r2 = tensor.expand_shape %r [[0, 1], [2]] output_shape [1, {spec.M}, {spec.N}] "
                         f": {own[2]} into {types[2]}")
            r = "%r2"
        text = (f"func.func private @{name}(%a: {types[0]}, %b: {types[1]}) -> {types[2]} {{\n"
                + "\n".join(lines) + f"\n  return {r} : {types[2]}\n}}\n" + reference_func(spec, name + "_spec"))
        self._insert(text)
        return name

    def gemm_function(self, kernel, types=None):
        return self._reference(kernel.spec, types)

    def plan_function(self, plan, types=None):
        s = plan.spec  # a plan computes the classical product A @ B (its numerics: test_kernels_lcma.py)
        return self._reference(GemmSpec(s.M, s.N, s.K, s.dtype, s.dtype, s.out_dtype), types)


def _run_pass(text: str, options: str = "min-flops=0 min-intensity=0") -> tuple:
    """(output text, report) of run_falcon_kernels on ``text``, the result verified."""
    with ir.Context():
        m = ir.Module.parse(text)
        rep = run_falcon_kernels(m.operation, KernelsOptions.parse(options))
        m.operation.verify()
        return str(m), rep


@pytest.fixture
def reference_kernels(monkeypatch):
    """run_falcon_kernels with made-up kernels and the reference splicer (no Triton, no IREE probe)."""
    import falcon_mlir.kernels.embed as embed
    import falcon_mlir.passes.falcon_kernels.splice as splice

    monkeypatch.setattr(fk, "triton_available", lambda: True)
    monkeypatch.setattr(fk, "_compile", _fake_compile)
    monkeypatch.setattr(splice, "Splicer", ReferenceSplicer)
    monkeypatch.setattr(embed, "cuda_target_attribute", lambda flags=(): "#fake")

    return _run_pass


def _inputs(text: str, seed: int = 0) -> list:
    """Random arguments for ``@f`` of ``text`` (f32 / f16 tensors)."""
    rng = np.random.default_rng(seed)
    with ir.Context():
        m = ir.Module.parse(text)
        f = [op for op in m.body.operations if op.operation.attributes["sym_name"].value == "f"][0]
        types = [ir.RankedTensorType(t) for t in ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value).inputs]
        return [rng.standard_normal(t.shape).astype({"f32": np.float32, "f16": np.float16}[str(t.element_type)])
                for t in types]


T = "tensor<{}>"
MAP = "affine_map<({d}) -> ({r})>"


def _generic(maps: tuple, shapes: tuple, t: str, acc: str, iters: tuple) -> str:
    """``@f(A, B, C) -> C + contraction`` as a linalg.generic with ``maps`` over loop dims d0...."""
    d = ", ".join(f"d{i}" for i in range(len(iters)))
    am = [MAP.format(d=d, r=", ".join(f"d{i}" for i in m)) for m in maps]
    ta, tb, tc = (T.format("x".join(map(str, s)) + "x" + e) for s, e in zip(shapes, (t, t, acc)))
    ext = (f"    %xe = arith.extf %x : {t} to {acc}\n    %ye = arith.extf %y : {t} to {acc}\n"
           if t != acc else "")
    x, y = ("%xe", "%ye") if ext else ("%x", "%y")
    its = ", ".join(f'"{i}"' for i in iters)
    return (f"func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %0 = linalg.generic {{indexing_maps = [{', '.join(am)}], iterator_types = [{its}]}} "
            f"ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{\n"
            f"  ^bb0(%x: {t}, %y: {t}, %z: {acc}):\n{ext}"
            f"    %p = arith.mulf {x}, {y} : {acc}\n    %s = arith.addf %z, %p : {acc}\n"
            f"    linalg.yield %s : {acc}\n  }} -> {tc}\n  return %0 : {tc}\n}}\n")


M, N, K, B = 24, 16, 40, 3
P, R_, S_ = ("parallel", "parallel", "reduction")
LAYOUTS = {
    # loop dims (m, n, k)
    "nn": ((0, 2), (2, 1), (0, 1)),
    "tn": ((2, 0), (2, 1), (0, 1)),
    "nt": ((0, 2), (1, 2), (0, 1)),
    "tt": ((2, 0), (1, 2), (0, 1)),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("types", [("f32", "f32"), ("f16", "f32")])
def test_layouts_and_live_accumulator_compute_the_op(reference_kernels, layout, types):
    maps = LAYOUTS[layout]
    shapes = tuple(tuple((M, N, K)[i] for i in m) for m in maps)
    text = _generic(maps, shapes, *types, (P, P, S_))
    out, rep = reference_kernels(text)
    assert rep[0]["kernel"] == "classical" and rep[0]["accumulate"], rep
    args = _inputs(text)
    want, got = run_mlir(text, "f", *args), run_mlir(out, "f", *args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_batched_permuted_loops_compute_the_op(reference_kernels):
    # loop dims (n, b, k, m): A (b, k, m), B (b, n, k), C (b, m, n)
    text = _generic(((1, 2, 3), (1, 0, 2), (1, 3, 0)), ((B, K, M), (B, N, K), (B, M, N)), "f32", "f32",
                    (P, P, S_, P))
    out, rep = reference_kernels(text)
    assert rep[0]["kernel"] == "classical" and rep[0]["batch"] == [B]
    args = _inputs(text)
    np.testing.assert_allclose(np.asarray(run_mlir(out, "f", *args)), np.asarray(run_mlir(text, "f", *args)),
                               rtol=2e-5, atol=2e-5)


BMM1 = """func.func @f(%a: tensor<1x{M}x{K}xf32>, %b: tensor<1x{K}x{N}xf32>) -> tensor<1x{M}x{N}xf32> {{
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x{M}x{N}xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x{M}x{N}xf32>) -> tensor<1x{M}x{N}xf32>
  %0 = linalg.batch_matmul {attr} ins(%a, %b : tensor<1x{M}x{K}xf32>, tensor<1x{K}x{N}xf32>) outs(%z : tensor<1x{M}x{N}xf32>) -> tensor<1x{M}x{N}xf32>
  return %0 : tensor<1x{M}x{N}xf32>
}}
"""


@pytest.mark.parametrize("attr", ["", '{falcon.plan = {schemes = ["strassen"], form = "kernel"}}'])
def test_batch_of_one_keeps_its_unit_dimension(reference_kernels, attr):
    """Was: 'func.call' op operand type mismatch (the wrapper took the spec's M x K, the op holds 1 x M x K)."""
    text = BMM1.format(M=32, N=32, K=32, attr=attr)
    out, rep = reference_kernels(text)
    assert rep[0]["kernel"] == ("plan" if attr else "classical") and not rep[0]["accumulate"]
    args = _inputs(text)
    np.testing.assert_allclose(np.asarray(run_mlir(out, "f", *args)), np.asarray(run_mlir(text, "f", *args)),
                               rtol=2e-5, atol=2e-5)


LOOP = """func.func @f(%a: tensor<32x48xf32>, %b: tensor<48x32xf32>, %p: tensor<32x32xf32>) -> (tensor<32x32xf32>, tensor<32x32xf32>) {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<32x32xf32>
  %f = linalg.fill ins(%one : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<32x48xf32>, tensor<48x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %1 = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %0) -> tensor<32x32xf32> {
    %2 = linalg.matmul ins(%a, %b : tensor<32x48xf32>, tensor<48x32xf32>) outs(%acc : tensor<32x32xf32>) -> tensor<32x32xf32>
    scf.yield %2 : tensor<32x32xf32>
  }
  %3 = arith.addf %0, %p : tensor<32x32xf32>
  return %1, %3 : tensor<32x32xf32>, tensor<32x32xf32>
}
"""


def test_non_zero_fill_loop_carried_accumulator_and_a_result_used_twice(reference_kernels):
    out, rep = reference_kernels(LOOP)
    assert [e["kernel"] for e in rep] == ["classical", "classical"] and all(e["accumulate"] for e in rep)
    assert out.count("func.func private @ref_f32_32x32x48_nn_of32_") == 1  # one wrapper for both
    args = _inputs(LOOP)
    for got, want in zip(run_mlir(out, "f", *args), run_mlir(LOOP, "f", *args)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_a_wrong_layout_would_be_caught(reference_kernels, monkeypatch):
    """The check has teeth: a spec with A's transpose flag flipped (M = K here, so the shapes still fit)
    computes something else."""
    import dataclasses

    real = fk.serve

    def flipped(c, *a, **k):
        s, kind = real(c, *a, **k)
        return dataclasses.replace(s, spec=dataclasses.replace(s.spec, trans_a=not s.spec.trans_a)), kind
    monkeypatch.setattr(fk, "serve", flipped)
    text = _generic(LAYOUTS["nn"], ((32, 32), (32, 16), (32, 16)), "f32", "f32", (P, P, S_))
    out, _ = reference_kernels(text)
    args = _inputs(text)
    got, want = np.asarray(run_mlir(out, "f", *args)), np.asarray(run_mlir(text, "f", *args))
    assert np.max(np.abs(got - want)) > 0.1 * np.max(np.abs(want))


ATTENTION_PV = """func.func @f(%v: tensor<1x64x4x32xf32>, %p: tensor<1x1x4x48x64xf32>) -> tensor<4x32x48xf32> {
  %e1 = tensor.empty() : tensor<1x4x32x64xf32>
  %vt = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x64x4x32xf32>) outs(%e1 : tensor<1x4x32x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x4x32x64xf32>
  %e2 = tensor.empty() : tensor<1x4x64x1x48xf32>
  %pt = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d3, d0, d1, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%p : tensor<1x1x4x48x64xf32>) outs(%e2 : tensor<1x4x64x1x48xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x4x64x1x48xf32>
  %a = tensor.collapse_shape %vt [[0, 1], [2], [3]] : tensor<1x4x32x64xf32> into tensor<4x32x64xf32>
  %b = tensor.collapse_shape %pt [[0, 1], [2], [3, 4]] : tensor<1x4x64x1x48xf32> into tensor<4x64x48xf32>
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x32x48xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<4x32x48xf32>) -> tensor<4x32x48xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<4x32x64xf32>, tensor<4x64x48xf32>) outs(%z : tensor<4x32x48xf32>) -> tensor<4x32x48xf32>
  return %r : tensor<4x32x48xf32>
}
"""

TRANSPOSED_2D = """func.func @f(%s: tensor<48x32xf32>, %t: tensor<16x48xf32>, %c: tensor<32x16xf32>) -> tensor<32x16xf32> {{
  %ea = tensor.empty() : tensor<32x48xf32>
  %a = linalg.transpose ins(%s : tensor<48x32xf32>) outs(%ea : tensor<32x48xf32>) permutation = [1, 0]
  {b}
  %0 = linalg.matmul ins(%a, %b : tensor<32x48xf32>, tensor<48x16xf32>) outs(%c : tensor<32x16xf32>) -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}}
"""
B_TRANSPOSED = """%eb = tensor.empty() : tensor<48x16xf32>
  %b = linalg.transpose ins(%t : tensor<16x48xf32>) outs(%eb : tensor<48x16xf32>) permutation = [1, 0]"""
B_COPIED = """%eb = tensor.empty() : tensor<48x16xf32>
  %tt = linalg.transpose ins(%t : tensor<16x48xf32>) outs(%eb : tensor<48x16xf32>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<48x16xf32>
  %b = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%tt : tensor<48x16xf32>) outs(%e2 : tensor<48x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %x = arith.negf %in : f32
    linalg.yield %x : f32
  } -> tensor<48x16xf32>"""
BATCH_LAST = """func.func @f(%s: tensor<32x48x4xf32>, %b: tensor<4x48x16xf32>) -> tensor<4x32x16xf32> {
  %ea = tensor.empty() : tensor<4x32x48xf32>
  %a = linalg.transpose ins(%s : tensor<32x48x4xf32>) outs(%ea : tensor<4x32x48xf32>) permutation = [2, 0, 1]
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x32x16xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  %0 = linalg.batch_matmul ins(%a, %b : tensor<4x32x48xf32>, tensor<4x48x16xf32>) outs(%z : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  return %0 : tensor<4x32x16xf32>
}
"""


@pytest.mark.parametrize("text, layout, through", [
    (ATTENTION_PV, "_nt_", "B read through the transpose"),      # P of P.V: read in place, V (batch in between) not
    (TRANSPOSED_2D.format(b=B_TRANSPOSED), "_tt_", "A and B read through"),
    (TRANSPOSED_2D.format(b=B_COPIED), "_tn_", "A read through"),  # B's producer is not a plain permutation
    (BATCH_LAST, "_nn_", None),                                     # batch last in the source: no view of it
])
def test_operands_are_read_through_the_transposes_that_made_them(reference_kernels, text, layout, through):
    """An operand that is a permutation of a value the kernel can read in place (IREE's StableHLO import
    writes batched dot_generals so) is read there with its layout flag flipped: the same values, no
    transposed copy for IREE to fuse into the producer."""
    out, rep = reference_kernels(text)
    assert layout in out, out
    assert (through in rep[0]["reason"]) if through else ("read through" not in rep[0]["reason"]), rep
    args = _inputs(text, seed=3)
    got, want = run_mlir(out, "f", *args), run_mlir(text, "f", *args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_explain_says_which_operands_are_read_through_their_transposes(reference_kernels):
    """Was: --lcma-explain dropped the reason's '; A and B read through the transpose that made them'
    (it showed a classical kernel's reason only when it began 'kernel-form')."""
    from falcon_mlir.decision.explain import explain

    _, rep = reference_kernels(TRANSPOSED_2D.format(b=B_TRANSPOSED))
    assert "kernels: falcon's classical GEMM" in explain(rep) and \
        "A and B read through the transpose that made them" in explain(rep), explain(rep)
    _, rep = reference_kernels(TRANSPOSED_2D.format(b=B_COPIED))
    assert "; A read through the transpose that made it" in explain(rep), explain(rep)


CHAIN_THROUGH = """func.func @f(%x: tensor<32x48xf32>, %w: tensor<48x32xf32>, %v: tensor<32x16xf32>) -> tensor<32x16xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x32xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
  %p = linalg.matmul ins(%x, %w : tensor<32x48xf32>, tensor<48x32xf32>) outs(%z : tensor<32x32xf32>) -> tensor<32x32xf32>
  %et = tensor.empty() : tensor<32x32xf32>
  %pt = linalg.transpose ins(%p : tensor<32x32xf32>) outs(%et : tensor<32x32xf32>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<32x16xf32>
  %z2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<32x16xf32>) -> tensor<32x16xf32>
  %0 = linalg.matmul ins(%pt, %v : tensor<32x32xf32>, tensor<32x16xf32>) outs(%z2 : tensor<32x16xf32>) -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}
"""


def test_an_operand_read_through_the_transpose_of_a_served_contractions_result(reference_kernels):
    """Was: a segmentation fault (falcon-opt too, default options at 1024^3 f16): the transpose's
    source, found before any op was replaced, was the first matmul's result, erased when its call
    took its place; the second call then read the erased value."""
    out, rep = reference_kernels(CHAIN_THROUGH)
    assert [e["kernel"] for e in rep] == ["classical", "classical"], rep
    assert "A read through" in rep[1]["reason"], rep
    args = _inputs(CHAIN_THROUGH, seed=3)
    np.testing.assert_allclose(np.asarray(run_mlir(out, "f", *args)),
                               np.asarray(run_mlir(CHAIN_THROUGH, "f", *args)), rtol=2e-5, atol=2e-5)


DYNAMIC_SOURCE = """func.func @f(%s: tensor<{src}xf32>, %b: tensor<48x16xf32>) -> tensor<32x16xf32> {{
  %ea = tensor.empty() : tensor<{t}xf32>
  %{tn} = linalg.generic {{indexing_maps = [affine_map<({d}) -> ({inmap})>, affine_map<({d}) -> ({d})>], iterator_types = [{its}]}} ins(%s : tensor<{src}xf32>) outs(%ea : tensor<{t}xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<{t}xf32>
  {collapse}
  %cst = arith.constant 0.0 : f32
  %ec = tensor.empty() : tensor<32x16xf32>
  %z = linalg.fill ins(%cst : f32) outs(%ec : tensor<32x16xf32>) -> tensor<32x16xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<32x48xf32>, tensor<48x16xf32>) outs(%z : tensor<32x16xf32>) -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}}
"""


@pytest.mark.parametrize("text", [
    DYNAMIC_SOURCE.format(src="?x32", t="32x48", tn="a", d="d0, d1", inmap="d1, d0", its='"parallel", "parallel"',
                          collapse=""),
    DYNAMIC_SOURCE.format(src="?x4x32", t="32x12x4", tn="t", d="d0, d1, d2", inmap="d1, d2, d0",
                          its='"parallel", "parallel", "parallel"',
                          collapse="%a = tensor.collapse_shape %t [[0], [1, 2]] : tensor<32x12x4xf32> into tensor<32x48xf32>"),
])
def test_a_permuted_copy_of_a_dynamic_source_is_not_read_through(reference_kernels, text):
    """A linalg.generic may copy a tensor of dynamic size into a static one. Was: an internal error
    ('tensor<?x32xf32>' passed as the kernel's A: the wrapper did not parse; for the collapsed view
    RankedTensorType.get of a size that is the product with the dynamic marker: TypeError)."""
    out, rep = reference_kernels(text)
    assert rep[0]["kernel"] == "classical" and "read through" not in rep[0]["reason"], rep
    src_shape = (48, 32) if "tensor<?x32xf32>" in text else (12, 4, 32)  # a size for the dynamic dimension
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(src_shape).astype(np.float32), rng.standard_normal((48, 16)).astype(np.float32)]
    np.testing.assert_allclose(np.asarray(run_mlir(out, "f", *args)), np.asarray(run_mlir(text, "f", *args)),
                               rtol=2e-5, atol=2e-5)


@pytest.fixture
def fake_kernels(monkeypatch):
    """run_falcon_kernels with made-up kernels and the real splicer (no Triton, no IREE probe)."""
    import falcon_mlir.kernels.embed as embed

    monkeypatch.setattr(fk, "triton_available", lambda: True)
    monkeypatch.setattr(fk, "_compile", _fake_compile)
    monkeypatch.setattr(embed, "cuda_target_attribute", lambda flags=(): '#hal.executable.target<"cuda", "cuda-nvptx-fb">')

    return _run_pass


MM = """func.func @{f}(%a: tensor<32x48xf32>, %b: tensor<48x32xf32>, %c: tensor<32x32xf32>) -> tensor<32x32xf32> {{
  %0 = linalg.matmul ins(%a, %b : tensor<32x48xf32>, tensor<48x32xf32>) outs(%c : tensor<32x32xf32>) -> tensor<32x32xf32>
  return %0 : tensor<32x32xf32>
}}
"""


def test_a_symbol_of_the_kernels_name_that_is_not_the_kernel_is_an_error(fake_kernels):
    """Was: the pass skipped its own wrapper because the name was taken and called the user's
    function (here: one returning 7s) in place of the matmul."""
    from falcon_mlir.kernels.embed import executable_name
    from falcon_mlir.passes.falcon_kernels.splice import SymbolClashError

    name = executable_name(_fake_kernel(GemmSpec(32, 32, 48, "f32", "f32", "f32"))) + "_call"
    user = (f"func.func private @{name}(%a: tensor<32x48xf32>, %b: tensor<48x32xf32>) -> tensor<32x32xf32> {{\n"
            "  %cst = arith.constant 7.0 : f32\n  %e = tensor.empty() : tensor<32x32xf32>\n"
            "  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>\n"
            "  return %f : tensor<32x32xf32>\n}\n")
    with pytest.raises(SymbolClashError, match=f"@{name}"):
        fake_kernels(user + MM.format(f="f"))


def test_failures_are_one_line_errors_of_falcon_opt_not_internal_errors(monkeypatch, capfd, src, tmp_path):
    """A kernel Triton cannot compile, a cuda-target IREE does not know, a symbol clash: one line with
    the location, exit 1, no output file (were: 'falcon-kernels: internal error: RuntimeError: ...
    (please report this with the input)'; for cuda-target=garbage IREE's crash text)."""
    from tool_checks import no_files_left, one_line_error, opt

    monkeypatch.setattr(fk, "triton_available", lambda: True)

    def failing(chosen, arch):
        return [RuntimeError("Triton failed to compile f32_32x32x48_nn_of32 with 128x128x32,s3,w8,g8: "
                             "ptxas fatal : Unknown option '-bogus-flag'") for _ in chosen]
    monkeypatch.setattr(fk, "_compile", failing)
    path, snap = src(MM.format(f="f"))
    out = tmp_path / "out.mlir"
    rc, _, err = opt(capfd, path, "--falcon-kernels=min-flops=0 min-intensity=0", "-o", out)
    line = one_line_error(rc, err, f"{path}:2:8: error: falcon-kernels: Triton failed to compile", "ptxas fatal")
    assert snap.unchanged()
    no_files_left(tmp_path)

    monkeypatch.setattr(fk, "_compile", _fake_compile)
    rc, _, err = opt(capfd, path, "--falcon-kernels=min-flops=0 min-intensity=0 cuda-target=garbage", "-o", out)
    one_line_error(rc, err, "falcon-kernels: IREE rejects cuda-target=garbage: Unknown CUDA target 'garbage'")
    no_files_left(tmp_path)
    assert line


def test_the_pass_on_its_own_output_reuses_its_executables(fake_kernels):
    once, _ = fake_kernels(MM.format(f="f"))
    twice, rep = fake_kernels(once[:once.rindex("}")] + MM.format(f="g") + "}\n")
    assert rep[0]["kernel"] == "classical"
    assert twice.count("hal.executable.source") == 1 and twice.count("func.func private") == 1
    assert twice.count("call @falcon_gemm_f32_32x32x48_nn_of32_") == 2


def test_a_kernel_failure_in_the_api_names_the_pass_not_lcma_rewrite(monkeypatch):
    """Was: 'lcma rewrite failed: RuntimeError: falcon-kernels: ...'."""
    import falcon_mlir
    from falcon_mlir.pipeline import CompileError, assemble

    monkeypatch.setattr(fk, "triton_available", lambda: True)
    monkeypatch.setattr(assemble, "triton_available", lambda: True)
    monkeypatch.setattr(fk, "_compile", lambda chosen, arch: [RuntimeError("Triton failed to compile X: boom")
                                                              for _ in chosen])
    with pytest.raises(CompileError) as e:
        falcon_mlir.compile_str(MM.format(f="f"), target_backends=["cuda"], input_name="mm.mlir",
                                kernels="min-flops=0 min-intensity=0", extra_args=["--iree-cuda-target=sm_80"])
    assert e.value.summary == "mm.mlir:2:8: falcon-kernels: Triton failed to compile X: boom", e.value.summary


PINNED = """func.func @f(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {{
  %0 = linalg.matmul {{falcon.plan = {plan}}} ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}}
"""


def test_a_plan_of_another_form_stays_for_lcma_rewrite(fake_kernels):
    """Was: falcon-kernels removed a grouped plan it does not serve, so a later lcma-rewrite never saw it."""
    out, rep = fake_kernels(PINNED.format(plan='{schemes = ["strassen"], form = "grouped"}'))
    assert rep[0]["kernel"] is None and "lcma-rewrite's to emit" in rep[0]["reason"]
    assert 'falcon.plan = {form = "grouped", schemes = ["strassen"]}' in out and "linalg.matmul" in out


def test_a_kernel_plan_of_an_unknown_scheme_is_left_to_iree_with_the_reason(fake_kernels):
    """Was: 'falcon-kernels: internal error: RuntimeError: ... unknown scheme' (a pinned plan)."""
    out, rep = fake_kernels(PINNED.format(plan='{schemes = ["nope"], form = "kernel"}'))
    assert rep[0]["kernel"] is None and rep[0]["reason"].startswith("left to IREE: unknown scheme 'nope'")
    assert "linalg.matmul" in out and "falcon.plan" not in out


MIX = """func.func @f(%a: tensor<64x32xf32>, %b: tensor<32x48xf32>) -> tensor<64x48xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x48xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<64x48xf32>) -> tensor<64x48xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x48xf32>) outs(%z : tensor<64x48xf32>) -> tensor<64x48xf32>
  %1 = math.exp %0 : tensor<64x48xf32>
  return %1 : tensor<64x48xf32>
}
"""


def test_falcon_opt_output_compiles_with_falcons_cuda_flags(monkeypatch):
    """Was: the default cuda-target was IREE's own (sm_60), so iree-compile --iree-cuda-target=sm_80 (the
    flags falcon documents and compiles with) rejected falcon-opt's output: 'no objects defined for
    external variant' (the object's key is the exact target attribute; IREE's own dispatch beside ours
    makes the key matter)."""
    from falcon_mlir.kernels.embed import KERNEL_MODULE_FLAGS, compile_module

    monkeypatch.setattr(fk, "triton_available", lambda: True)
    monkeypatch.setattr(fk, "_compile", _fake_compile)
    assert KernelsOptions.parse("").cuda_target == "sm_80"
    assert "--iree-cuda-target=sm_80" in KERNEL_MODULE_FLAGS
    with ir.Context():
        m = ir.Module.parse(MIX)
        rep = run_falcon_kernels(m.operation, KernelsOptions.parse("min-flops=0 min-intensity=0"))
        text = str(m)
    assert rep[0]["kernel"] == "classical" and 'arch = "sm_80"' in text
    assert b"falcon_gemm" in compile_module(text)


def test_kernels_option_text_is_checked_whatever_the_target_and_its_type_too():
    """Were: any kernels= text passed on a CPU target unread; bytes, lists, dicts were str()-ed into
    confusing messages ("unknown falcon-kernels option ''['arch'")."""
    from falcon_mlir.options import OptionError
    from falcon_mlir.pipeline import assemble

    with pytest.raises(OptionError, match="unknown falcon-kernels option 'bogus'"):
        assemble.kernels_options("bogus=1", [])
    for bad in (b"arch=none", ["arch=sm_90a"], {"arch": "sm_90a"}, 0, 1.5):
        with pytest.raises(TypeError, match="kernels must be"):
            assemble.kernels_options(bad, ["--iree-hal-target-device=cuda"])
        with pytest.raises(TypeError, match="tiles must be"):
            assemble.tiles_options(bad, ["--iree-hal-target-device=cuda"])
    mine = KernelsOptions.parse("arch=sm_90a cuda-target=sm_86")
    got = assemble.kernels_options(mine, ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"])
    assert got.cuda_target == "sm_80" and mine.cuda_target == "sm_86"  # the caller's object is not changed


SAME_LOC = """func.func @f(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %w: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32> loc("model.py":10:3)
  %e2 = tensor.empty() : tensor<64x32xf32>
  %z2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<64x32xf32>) -> tensor<64x32xf32>
  %1 = linalg.matmul ins(%0, %w : tensor<64x64xf32>, tensor<64x32xf32>) outs(%z2 : tensor<64x32xf32>) -> tensor<64x32xf32> loc("model.py":10:3)
  return %1 : tensor<64x32xf32>
}
"""


def test_report_joins_kernels_to_their_own_contraction_when_locations_repeat(monkeypatch):
    """Was: joined by location alone, so of two contractions written on one line (a layer in a loop)
    the first got both kernel entries and the second none."""
    import falcon_mlir
    from falcon_mlir.pipeline import assemble

    monkeypatch.setattr(fk, "triton_available", lambda: True)
    monkeypatch.setattr(assemble, "triton_available", lambda: True)
    monkeypatch.setattr(fk, "_compile", _fake_compile)
    _, rep = falcon_mlir.compile_str(SAME_LOC, target_backends=["cuda"], return_report=True, lcma="auto",
                                     kernels="min-flops=0 min-intensity=0", extra_args=["--iree-cuda-target=sm_80"])
    assert [e["location"] for e in rep] == ["model.py:10:3"] * 2
    assert [[(k["M"], k["N"], k["K"]) for k in e["kernels"]] for e in rep] == [[(64, 64, 64)], [(64, 32, 64)]]


def test_report_join_gives_products_to_their_plan():
    from falcon_mlir.pipeline.stages import merge_kernel_entries

    def e(M, N, K, **kw):
        return dict({"location": "x:1:1", "M": M, "N": N, "K": K, "batch": [],
                     "element_types": {"lhs": "f32", "rhs": "f32", "acc": "f32"}}, **kw)
    report = [e(8, 8, 8, plan="classical"), e(64, 64, 64, plan={"schemes": ["strassen"]}, products=2),
              e(64, 64, 64, plan={"schemes": ["strassen"]}, products=2), e(8, 8, 8, plan="classical")]
    kernels = [e(8, 8, 8, kernel="classical"), e(32, 32, 32, kernel="classical"), e(32, 32, 32, kernel=None),
               e(32, 32, 32, kernel="classical"), e(32, 32, 32, kernel=None), e(8, 8, 8, kernel=None)]
    merge_kernel_entries(report, kernels)
    assert [[k["kernel"] for k in r["kernels"]] for r in report] == \
        [["classical"], ["classical", None], ["classical", None], [None]]
    assert len(report) == 4


def test_without_triton_each_entry_says_why_no_kernel_ran(monkeypatch):
    """Was: on a cuda target without Triton the report had no 'kernels' entry at all (the pass was
    off by default), so nothing said why IREE's code ran."""
    import falcon_mlir
    from falcon_mlir.pipeline import assemble

    monkeypatch.setattr(fk, "triton_available", lambda: False)
    monkeypatch.setattr(assemble, "triton_available", lambda: False)
    _, rep = falcon_mlir.compile_str(MM.format(f="f"), target_backends=["cuda"], return_report=True)
    assert rep[0]["kernels"][0]["kernel"] is None
    assert rep[0]["kernels"][0]["reason"].startswith("left to IREE: Triton is not installed")
    _, rep = falcon_mlir.compile_str(MM.format(f="f"), target_backends=["cuda"], return_report=True,
                                     kernels="none")
    assert "kernels" not in rep[0]  # asked off: nothing to explain


def test_a_contraction_in_a_nested_module_calls_a_kernel_of_that_module(fake_kernels):
    """Was: the executables and wrapper went into the outer module, which the nested module's
    functions cannot call: "'func.call' op '..._call' does not reference a valid function"."""
    out, rep = fake_kernels("module {\n  module @inner {\n" + MM.format(f="f") + "  }\n}\n")
    assert rep[0]["kernel"] == "classical"
    inner = out[out.index("module @inner"):]
    assert "hal.executable.source" in inner and "func.func private @falcon_gemm_" in inner


def test_falcon_opt_joins_kernel_entries_and_explains_them(monkeypatch, capfd, src, tmp_path):
    """Was: 'falcon-opt: internal error: KeyError: 'schemes'' for --lcma-rewrite="... form=kernel"
    --falcon-kernels --lcma-explain (a kernel entry's plan read as lcma-rewrite's), and the report
    listed each contraction twice (once per pass: "0 of 18 contractions" for 9)."""
    import json

    import falcon_mlir.kernels.embed as embed
    import falcon_mlir.passes.falcon_kernels.splice as splice
    from tool_checks import opt

    monkeypatch.setattr(fk, "triton_available", lambda: True)
    monkeypatch.setattr(fk, "_compile", _fake_compile)
    monkeypatch.setattr(splice, "Splicer", ReferenceSplicer)
    monkeypatch.setattr(embed, "cuda_target_attribute", lambda flags=(): "#fake")
    path, _ = src(PINNED.format(plan='{schemes = ["strassen"], form = "kernel"}').replace(
        " {falcon.plan = {schemes = [\"strassen\"], form = \"kernel\"}}", "") + MM.format(f="g"))
    rep = tmp_path / "r.json"
    rc, _, err = opt(capfd, path, "--lcma-rewrite=scheme=strassen form=kernel", "--falcon-kernels=min-flops=0",
                     "--lcma-report", rep, "--lcma-explain", "-o", tmp_path / "o.mlir")
    assert rc == 0 and "internal error" not in err, err
    entries = json.loads(rep.read_text())
    assert len(entries) == 2 and [e["kernels"][0]["kernel"] for e in entries] == ["plan", "plan"]
    assert "lcma-explain: 2 of 2 contractions rewritten" in err
    assert "7 products, handed to falcon-kernels" in err and "kernels: plan 2x2x2:7 (R = 7" in err
    # falcon-kernels alone: its own entries, explained as such
    rc, _, err = opt(capfd, path, "--falcon-kernels=min-flops=0 min-intensity=0", "--lcma-explain", "-o",
                     tmp_path / "o.mlir")
    assert rc == 0 and ": falcon's kernels\n  kernels: falcon's classical GEMM" in err, err


def test_form_kernel_where_falcon_kernels_does_not_run_is_an_option_error():
    """Was: on a CPU target (or kernels=none) form=kernel left every contraction classical under a
    report that said 'rewritten: ... 7 products, 3 combines emitted'. (On a CPU with AVX-512 the
    CPU kernel runs kernel-form plans: test_falcon_kernels_cpu.py.)"""
    import falcon_mlir
    from falcon_mlir.options import OptionError

    with pytest.raises(OptionError, match=r"form=kernel needs the falcon-kernels pass.*\(kernels=none\)"):
        falcon_mlir.compile_str(MM.format(f="f"), kernels="none", lcma="scheme=strassen form=kernel")
    with pytest.raises(OptionError, match="form=kernel needs the falcon-kernels pass"):
        falcon_mlir.compile_str(MM.format(f="f"), target_backends=["cuda"], kernels="none",
                                lcma="scheme=strassen form=kernel")


def _installed(name: str) -> bool:
    import importlib.machinery

    return importlib.machinery.PathFinder.find_spec(name) is not None  # without importing it


@pytest.mark.skipif(not (_installed("triton") and _installed("torch")), reason="needs triton and torch (in a child)")
def test_the_kernel_on_the_spec_the_pass_derives_reads_the_ops_buffers_right():
    """The other half of the chain: the generated kernel itself (Triton's interpreter, in a child
    process) on the spec the pass derives from an op, fed the op's operand buffers as they are stored
    (a unit batch dimension, transposed layouts, permuted loops), against numpy's einsum of the op."""
    import string

    from falcon_mlir.ir.contraction import find_contractions
    from falcon_mlir.kernels.configs import KernelConfig
    from falcon_mlir.kernels.interpret import run_interpreted
    from falcon_mlir.passes.falcon_kernels.serve import serve

    cases = [
        (LAYOUTS["tn"], ((40, 24), (40, 16), (24, 16)), (P, P, S_)),
        (LAYOUTS["nt"], ((24, 40), (16, 40), (24, 16)), (P, P, S_)),
        (LAYOUTS["tt"], ((40, 24), (16, 40), (24, 16)), (P, P, S_)),
        # loop dims (k, n, m): A (k, m), B (n, k), C (m, n)
        (((0, 2), (1, 0), (2, 1)), ((40, 24), (16, 40), (24, 16)), (S_, P, P)),
        # loop dims (n, b, k, m): A (b, k, m), B (b, n, k), C (b, m, n)
        (((1, 2, 3), (1, 0, 2), (1, 3, 0)), ((3, 40, 24), (3, 16, 40), (3, 24, 16)), (P, P, S_, P)),
        # a batch of one: A (1, m, k), B (1, k, n)
        (((0, 1, 3), (0, 3, 2), (0, 1, 2)), ((1, 24, 40), (1, 40, 16), (1, 24, 16)), (P, P, P, S_)),
    ]
    rng = np.random.default_rng(7)
    jobs, refs = [], []
    for maps, shapes, iters in cases:
        text = _generic(maps, shapes, "f32", "f32", iters)
        with ir.Context():
            m = ir.Module.parse(text)
            c = find_contractions(m.operation)[0]
            s, kind = serve(c)
            assert kind == "classical", kind
            L = string.ascii_lowercase
            eq = ",".join("".join(L[d] for d in dl) for dl in (c.lhs_dims, c.rhs_dims)) + "->" + \
                "".join(L[d] for d in c.out_dims)
        a, b = (rng.standard_normal(sh).astype(np.float32) for sh in shapes[:2])
        jobs.append((s.spec, KernelConfig.parse("16x16x16,s2,w4,g2,masked"),
                     a.reshape(s.spec.a_shape), b.reshape(s.spec.b_shape)))
        refs.append((np.einsum(eq, a.astype(np.float64), b.astype(np.float64)), shapes[2]))
    for out, (ref, cshape) in zip(run_interpreted(jobs), refs):
        assert not isinstance(out, str), out
        got = out.astype(np.float64).reshape(cshape)
        assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))
