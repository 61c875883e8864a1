"""Constant weights: IREE's constant evaluation folds the rewrite's combine B at compile time.

Strassen has 5 products whose B operand is a real combine (B11 + B22, B21 - B11, ...)
and 2 that read one block of B alone (B11, B22), fenced by IREE's compute
barrier; with B a module constant all 7 B operands are folded and their 7
dispatches disappear from the dispatch list (``--compile-to=flow``), the rest
is unchanged. (With the earlier ``util.optimization_barrier`` fence the 2
fenced blocks were not folded: 5 dispatches went.)
"""

import re

import numpy as np

from falcon_mlir import compile_str
from falcon_mlir.decision.scheme_stats import scheme_stats
from falcon_mlir.ir.matmul_text import matmul_mlir

N = 128


def _module(b=None) -> str:
    if b is None:
        return matmul_mlir(N, N, N)
    vals = ", ".join(f"[{', '.join(repr(float(x)) for x in row)}]" for row in b)
    return matmul_mlir(N, N, N, b_const=f"dense<[{vals}]>")


def _dispatches(text: str, lcma) -> int:
    out = compile_str(text, target_backends=["llvm-cpu"], lcma=lcma,
                      extra_args=["--iree-llvmcpu-target-cpu=host", "--compile-to=flow"])
    return len(re.findall(r"flow\.dispatch @", out.decode() if isinstance(out, bytes) else out))


def test_combine_b_is_folded_for_constant_weights():
    b = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)
    stats = scheme_stats("strassen")
    assert len(stats.comb_b) == 5
    folded = stats.R  # 5 combines of B and the 2 fenced blocks read alone
    arg = _dispatches(_module(), "scheme=strassen")
    const = _dispatches(_module(b), "scheme=strassen")
    assert arg - const == folded, (arg, const)
    # classical: one dispatch (fill + matmul fused) either way
    assert _dispatches(_module(b), None) == _dispatches(_module(), None)
