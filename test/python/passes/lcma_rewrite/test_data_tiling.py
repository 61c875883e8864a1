"""Plans under IREE's best CPU flags (data tiling + microkernels), as falcon-compile builds them.

Regression: a peeled column strip (N mod n = 2) with a long K used to reach a
classical contraction through a bare ``tensor.extract_slice``; IREE pulled the
slice's packing into that dispatch and llvm-cpu failed with "exceeded stack
allocation limit" (2 x 4096 x 4 bytes of packed B). The strips' operands now
go behind ``util.optimization_barrier`` like the products' (``barriers=true``).
"""

import numpy as np
import pytest

from cases import random_inputs, reference, rel_err
from falcon_mlir import compile_str
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
