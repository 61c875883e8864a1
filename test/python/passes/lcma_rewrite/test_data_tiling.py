"""Plans under IREE's best CPU flags (data tiling + microkernels), as falcon-compile builds them.

Regression: a peeled column strip (N mod n = 2) with a long K used to reach a
classical contraction through a bare ``tensor.extract_slice``; IREE pulled the
slice's packing into that dispatch and llvm-cpu failed with "exceeded stack
allocation limit" (2 x 4096 x 4 bytes of packed B). The strips' operands now
go behind IREE's compute barrier like the products' (``barriers=true``).

Regression (issue 13): the accumulator is packed too. A peeled strip of an
accumulating op read a bare slice of the live C as its init (127^3 Strassen:
the K strip's 126 x 126 init, 64 KiB on the stack), and the run-time
dispatch's remainder of a batch_matmul with a dynamic M read dynamic slices
of A and C (384 KiB); both failed where plain iree-compile succeeds. Every
contraction the emitter makes now fences its bare-slice operands, the
accumulator included (a dynamic-shaped barrier carries its sizes).

Regression (issue 12): the fences were ``util.optimization_barrier``, which
IREE 3.13 keeps in the host program: one execute region and a host wait per
barrier, and no dealloca for a transient passing through one, so every call
of a ``.vmfb`` kept those buffers (245 MB per call of a 1024 x 14336 x 4096
2x4x4:26 plan, about 2 GB per Llama-3-8B training step). The fences are now
``iree_tensor_ext.compute_barrier.start``, which dispatch creation removes.
"""

import numpy as np
import pytest

from cases import EPS, contraction_mlir, random_inputs, reference, rel_err
from falcon_mlir import compile_str
from falcon_mlir.catalog import get_scheme
from falcon_mlir.runner import BEST_CPU_FLAGS, Module


def _mm(M, N, K):
    a, b, c = f"tensor<{M}x{K}xf32>", f"tensor<{K}x{N}xf32>", f"tensor<{M}x{N}xf32>"
    return (f"func.func @mm(%a: {a}, %b: {b}, %c: {c}) -> {c} {{\n"
            f"  %0 = linalg.matmul ins(%a, %b : {a}, {b}) outs(%c : {c}) -> {c}\n"
            f"  return %0 : {c}\n}}\n")


@pytest.mark.parametrize("M,N,K,options,products", [
    (16, 8, 4096, "scheme=2x2x3:11", 11 + 1),          # N strip of 2, K = 4096
    (17, 11, 4097, "scheme=2x3x3:15", 15 + 3),         # M, N and K strips
    (16, 8, 4096, "scheme=2x2x3:11 form=grouped", 1 + 1),
])
def test_peeled_strips_compile_and_match_under_data_tiling(M, N, K, options, products):
    vmfb, report = compile_str(_mm(M, N, K), target_backends=["llvm-cpu"], extra_args=list(BEST_CPU_FLAGS),
                               lcma=options, return_report=True)
    assert report[0]["products"] == products, report[0]
    a, b, c = random_inputs([[M, K], [K, N], [M, N]], ["f32"] * 3, seed=M + N)
    got = Module(vmfb)("mm", a, b, c)
    ref = reference(a, b, c)
    # K ~ 4096 f32 through one level: a few 1e-6 (a wrong strip would be O(1))
    assert rel_err(got, ref) < 2e-5
    assert not np.array_equal(got, np.asarray(c))


def _executables(flow: str) -> dict:
    """Executable name -> the ops of its body, from ``--compile-to=flow`` text."""
    import re

    out = {}
    for m in re.finditer(r"flow\.executable private @(\w+) \{(.*?)\n  \}", flow, re.S):
        out[m.group(1)] = re.findall(r"\b(linalg\.\w+|iree_encoding\.\w+)\b", m.group(2))
    return out


def test_combines_fuse_into_operand_packing():
    """Per-product form under data tiling: each combine of A or B shares its dispatch
    with the packing of the combined operand (``iree_encoding.set_encoding``), so
    the combined operand is written once, already in the product's packed layout;
    Strassen has 5 + 5 combined operands. The products unpack their result in
    their own dispatch; combine C stays separate (not fused as an epilogue)."""
    flow = compile_str(_mm(256, 256, 256), target_backends=["llvm-cpu"],
                       extra_args=list(BEST_CPU_FLAGS) + ["--compile-to=flow"],
                       lcma="scheme=strassen levels=1")
    flow = flow.decode() if isinstance(flow, bytes) else flow
    exes = _executables(flow)
    packed_combines = [n for n, ops in exes.items()
                       if "linalg.generic" in ops and "iree_encoding.set_encoding" in ops]
    products = [n for n, ops in exes.items() if "linalg.matmul" in ops]
    assert len(packed_combines) == 10, exes
    assert products and all("iree_encoding.unset_encoding" in exes[n] for n in products), exes
    combine_c = [n for n, ops in exes.items() if "linalg.generic" in ops
                 and not any(o.startswith("iree_encoding.") for o in ops)]
    assert combine_c, exes


def test_fences_leave_stream_scheduling_alone():
    """The rewrite's fences stop fusion only: the host program of a Strassen plan
    under data tiling is one execute region whose transients are all freed
    (every ``stream.resource.alloca`` but the result's has its dealloca), as
    for the classical op."""
    import re

    def stream_ops(lcma):
        text = compile_str(_mm(256, 256, 256), target_backends=["llvm-cpu"],
                           extra_args=list(BEST_CPU_FLAGS) + ["--compile-to=executable-sources"], lcma=lcma)
        text = text.decode() if isinstance(text, bytes) else text
        return {op: len(re.findall(rf"stream\.{op}\b", text))
                for op in ("cmd.execute", "resource.alloca", "resource.dealloca", "timepoint.await")}

    plan, classical = stream_ops("scheme=strassen levels=1"), stream_ops(None)
    assert plan == classical, (plan, classical)
    assert plan["cmd.execute"] == 1 and plan["resource.alloca"] == plan["resource.dealloca"] + 1, plan


def _tolerance(K, schemes, acc="f32"):
    """Error bound for the plan: a few ulps times K times the schemes' stability factors."""
    e = 1.0
    for name in schemes:
        e *= float(get_scheme(name).stability_e)
    return min(8 * EPS[acc] * K * e, 1e-2)


#: Every form and edge of the rewrite on accumulating contractions with odd
#: sizes (peeled row, column and K strips, or padding), under data tiling.
FORMS = ["scheme=strassen", "scheme=strassen form=grouped", "scheme=strassen edge=pad",
         "scheme=strassen form=grouped edge=pad"]


@pytest.mark.parametrize("options", FORMS)
@pytest.mark.parametrize("M,N,K,batch", [
    (127, 127, 127, 0),   # was: "exceeded stack allocation limit" (peel: the K strip's C init)
    (64, 127, 17, 0),     # the issue's example: K strip and N strip, C accumulated
    (127, 127, 127, 3),   # batch_matmul, every strip (was: the same stack failure)
])
def test_accumulating_plans_compile_and_match_under_data_tiling(M, N, K, batch, options):
    text, shapes = contraction_mlir(M, N, K, batch=batch)
    vmfb, report = compile_str(text, target_backends=["llvm-cpu"], extra_args=list(BEST_CPU_FLAGS),
                               lcma=options, return_report=True)
    assert report[0]["plan"]["schemes"] == ["strassen"] and report[0]["combines"] >= 3, report[0]
    a, b, c = random_inputs(shapes, ["f32"] * 3, seed=M + K)
    got = Module(vmfb)("f", a, b, c)
    ref = reference(a, b, c, batch=batch)
    assert rel_err(got, ref) <= _tolerance(K, ["strassen"]), rel_err(got, ref)


def _dynamic(batch, N, K):
    """``C + A B`` with a dynamic M (``batch`` > 0: a batch_matmul with that batch)."""
    lead = f"{batch}x" if batch else ""
    ta, tb, tc = (f"tensor<{lead}?x{K}xf32>", f"tensor<{lead}{K}x{N}xf32>",
                  f"tensor<{lead}?x{N}xf32>")
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    return (f"func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %0 = {op} ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n"
            f"  return %0 : {tc}\n}}\n")


@pytest.mark.parametrize("options", FORMS)
@pytest.mark.parametrize("batch", [4, 0])
def test_run_time_dispatch_compiles_and_matches_under_data_tiling(batch, options):
    """Dynamic M through the run-time dispatch (chunks of 64 rows through the
    plan, the rest classical on dynamic slices); was, for the batch_matmul:
    "exceeded stack allocation limit" (the remainder's dynamic slices packed
    in its dispatch)."""
    N, K, chunk = 95, 97, 64
    vmfb, report = compile_str(_dynamic(batch, N, K), target_backends=["llvm-cpu"],
                               extra_args=list(BEST_CPU_FLAGS), lcma=f"{options} chunk={chunk}",
                               return_report=True)
    assert report[0]["dispatch"] == {"threshold_M": chunk, "chunk_M": chunk}, report[0]
    mod = Module(vmfb)
    lead = [batch] if batch else []
    for M in (5, chunk, 2 * chunk + 7):
        a, b, c = random_inputs([lead + [M, K], lead + [K, N], lead + [M, N]], ["f32"] * 3, seed=M)
        got = mod("f", a, b, c)
        assert got.shape == tuple(lead + [M, N])
        ref = reference(a, b, c, batch=batch)
        assert rel_err(got, ref) <= _tolerance(K, ["strassen"]), (M, rel_err(got, ref))


def _unit_lhs_module(M, K, N):
    """``(a + a2) @ b``: a matmul whose LHS an elementwise op makes (as a combine A does)."""
    ta, tb, tc = f"tensor<{M}x{K}xf32>", f"tensor<{K}x{N}xf32>", f"tensor<{M}x{N}xf32>"
    return ("#map = affine_map<(d0, d1) -> (d0, d1)>\n"
            f"func.func @f(%a: {ta}, %a2: {ta}, %b: {tb}) -> {tc} {{\n"
            f"  %e = tensor.empty() : {ta}\n"
            "  %s = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = "
            f"[\"parallel\", \"parallel\"]}} ins(%a, %a2 : {ta}, {ta}) outs(%e : {ta}) {{\n"
            "  ^bb0(%x: f32, %y: f32, %o: f32):\n"
            "    %t = arith.addf %x, %y : f32\n"
            "    linalg.yield %t : f32\n"
            f"  }} -> {ta}\n"
            "  %z = arith.constant 0.0 : f32\n"
            f"  %c0 = tensor.empty() : {tc}\n"
            f"  %c = linalg.fill ins(%z : f32) outs(%c0 : {tc}) -> {tc}\n"
            f"  %r = linalg.matmul ins(%s, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n"
            f"  return %r : {tc}\n}}\n")


def test_iree_still_fails_on_a_made_unit_lhs_under_data_tiling():
    """The IREE 3.13 bug behind ``Emitter.fence_unit_lhs``, without falcon: a 1 x 1 LHS
    made by an elementwise op, N > 1, data tiling on (ukernels or not). When this
    compiles, the fence can go (a 2 x 2 LHS, or a 1 x 1 argument, always compiled)."""
    from iree.compiler import CompilerToolError
    from iree.compiler import compile_str as iree_compile_str

    flags = list(BEST_CPU_FLAGS)
    iree_compile_str(_unit_lhs_module(1, 2, 2), target_backends=["llvm-cpu"], extra_args=flags)
    with pytest.raises(CompilerToolError, match="tiling factors must be less than or equal"):
        iree_compile_str(_unit_lhs_module(1, 1, 2), target_backends=["llvm-cpu"], extra_args=flags)


#: Minimal cases of scripts/fuzz_diff.py with data tiling on: a forced per-product plan
#: whose A blocks are 1 x 1 failed to compile ("tiling factors must be less than or
#: equal to the input rank for pack"); the combined A now goes behind a barrier. The
#: grouped cases failed only without barriers (the fuzzer's first draft): its batched
#: product over R takes the R x 1 x 1 combined A. (M, N, K, lhs, acc, batch,
#: transpose_b, options)
UNIT_LHS_CASES = [
    (2, 4, 2, "f32", "f32", 0, False, "scheme=strassen levels=1 edge=peel form=per-product"),
    (3, 8, 2, "f32", "f32", 0, False, "scheme=strassen levels=3 edge=peel form=per-product"),
    (2, 5, 3, "bf16", "f32", 0, False, "scheme=2x3x4:20 levels=2 edge=peel form=grouped"),
    (3, 7, 8, "bf16", "f32", 3, True, "scheme=2x3x4:20 levels=2 edge=peel form=grouped"),
]


@pytest.mark.parametrize("M,N,K,lhs,acc,batch,transpose_b,options", UNIT_LHS_CASES)
def test_unit_lhs_block_under_data_tiling(M, N, K, lhs, acc, batch, transpose_b, options):
    text, shapes = contraction_mlir(M, N, K, lhs=lhs, acc=acc, batch=batch,
                                    transpose_b=transpose_b)
    vmfb, report = compile_str(text, target_backends=["llvm-cpu"], extra_args=list(BEST_CPU_FLAGS),
                               lcma=options, return_report=True)
    assert report[0]["plan"] != "classical" and report[0]["products"], report[0]
    a, b, c = random_inputs(shapes, [lhs, lhs, acc], seed=M * N * K)
    got = Module(vmfb)("f", a, b, c)
    ref = reference(a, b, c, batch=batch, transpose_b=transpose_b)
    # bf16 operands are exact in f32 products of tiny K; f32 sums of <= 8 terms
    assert got.shape == ref.shape
    assert rel_err(got, ref) <= 1e-5, rel_err(got, ref)
    assert not np.array_equal(got, np.asarray(c))
