"""Scaled f16 operands against bf16 operands for bf16 kernel-form plans, in emulation (issue 16).

Usage::

    python3 scripts/scaled_operands.py [--size 1024] [--levels 1,2] [--seed 0] [--long-k]

For each input case (random normal; uniform [0, 1); outlier elements and
outlier channels x1000; rows of A / columns of B scaled by 2^e, e uniform in
[-20, 20] or [-40, 40]; one huge element; the break-it pass's
``A[0, 0] = B[5, 5] = 2^64``, and the same pair at 2^12, 2^16, 2^20) it emulates in numpy, with the arithmetic of
falcon's kernels (:mod:`falcon_mlir.kernels.lcma`; the GPU's f32 accumulation
as numpy's float32 GEMM), ``C = A @ B`` on bf16 inputs with C rounded once to
bf16, three ways:

* ``classical``: the f32-accumulated GEMM;
* ``bf16 ops``: Strassen^L in the kernel form with combined operands and
  stored products in bf16 (``PlanSpec(operand_dtype="bf16")``);
* ``f16 scaled``: the same with scaled f16 operands and products
  (``PlanSpec(operand_dtype="f16")``, :mod:`falcon_mlir.kernels.lcma.scale`:
  A and B scaled by ``2^-(e + s)`` before the sums are rounded to f16,
  combine C scaling back);

and prints, per case and plan, three errors against the float64 product of
the same bf16 inputs: ``max``: ``max|C - C_ref| / max|C_ref|`` (the error
model's measure), ``norm``: ``||C - C_ref||_F / (||A||_F ||B||_F)`` (the
normwise measure Strassen-like schemes are stable in) and ``row``: the worst
row's ``||C_i - C_ref,i|| / ||C_ref,i||`` (what a row far below the others
keeps: classical keeps every row, a plan mixes rows). ``--long-k`` adds the
heavy-tailed case at K = 2^18 (M = N = 128, up to three levels), where the
break-it pass measured 2e-2. The table of docs/accuracy.md, section *Scaled
f16 operands*, is this script's output.

``compare(...)`` returns the rows as dicts (no pytest, no Triton, no GPU).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from falcon_mlir.kernels.lcma import (PlanSpec, max_exponent, operand_shifts, pad_blocks, plan_geometry,
                                      resolve_scheme)

#: Forms compared, in the table's column order.
FORMS = ("classical", "bf16 ops", "f16 scaled")


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` (float32) rounded to ``dtype`` (round to nearest even, subnormals kept, overflow to inf),
    back as float32."""
    import ml_dtypes
    t = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}[dtype]
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(t).astype(np.float32)


def _mul_pow2(x: np.ndarray, n: int) -> np.ndarray:
    """``x * 2^n`` in float32 as the kernels apply it: normal-range factors of n's sign in turn."""
    out = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore"):
        while n:
            step = max(-100, min(100, n))
            out = out * np.float32(2.0 ** step)
            n -= step
    return out


def _combine(coeffs: np.ndarray, blocks: np.ndarray, shift: int = 0) -> np.ndarray:
    """``sum_ij T[r,i,j] X_ij`` for every r, each sum formed in float32 in the order of its terms (as the
    generated kernels write them), times ``2^shift``: ``R x rows x cols`` float32."""
    R, gi, gj = coeffs.shape
    out = np.zeros((R,) + blocks.shape[2:], dtype=np.float32)
    for r in range(R):
        acc = None
        for i in range(gi):
            for j in range(gj):
                c = coeffs[r, i, j]
                if c == 0:
                    continue
                term = blocks[i, j] if c == 1 else (-blocks[i, j] if c == -1 else np.float32(c) * blocks[i, j])
                acc = term.astype(np.float32) if acc is None else acc + term
        if acc is not None:
            out[r] = _mul_pow2(acc, shift) if shift else acc
    return out


def emulate_plan(a: np.ndarray, b: np.ndarray, scheme: str, operands: str) -> np.ndarray:
    """C of a bf16 kernel-form plan on bf16-valued ``a`` (M x K), ``b`` (K x N), as float32 holding bf16
    values: combine A/B in f32 rounded to ``operands`` (``"bf16"``, or ``"f16"`` scaled as the kernels
    scale), the R products accumulated in f32 and stored in the operand type, combine C in f32 (scaled
    back) rounded once to bf16.

    Raises:
        ValueError: ``operands`` other than ``"bf16"`` or ``"f16"`` (PlanSpec's message).
    """
    M, K = a.shape
    N = b.shape[1]
    spec = PlanSpec(M, N, K, scheme=scheme, dtype="bf16", operand_dtype=operands)
    s = resolve_scheme(scheme)
    g = plan_geometry(spec, s)
    U, V, W = (np.asarray(x, dtype=np.float64) for x in (s.U, s.V, s.W))
    ab = pad_blocks(a, g.m, g.k, g.bm, g.bk).astype(np.float32)
    bb = pad_blocks(b, g.k, g.n, g.bk, g.bn).astype(np.float32)
    sh_a = sh_b = sh_c = 0
    if spec.scaled:
        s_a, s_b = operand_shifts(s, g.bk)
        e_a, e_b = max_exponent(a) + s_a, max_exponent(b) + s_b
        sh_a, sh_b, sh_c = -e_a, -e_b, e_a + e_b
    a_ops = _round(_combine(U, ab, sh_a), operands)
    b_ops = _round(_combine(V, bb, sh_b), operands)
    with np.errstate(over="ignore", invalid="ignore"):
        prods = _round(np.matmul(a_ops, b_ops), spec.product_dtype)
        cb = _combine(_w_as_coeffs(W), prods[None], sh_c)
    c = cb.reshape(g.m, g.n, g.bm, g.bn).transpose(0, 2, 1, 3).reshape(g.m * g.bm, g.n * g.bn)[:M, :N]
    return _round(c, "bf16")


def _w_as_coeffs(W: np.ndarray) -> np.ndarray:
    """W (``R x m x n``) as combine C's table: output ``(i, l)`` from input ``(0, r)``: ``m*n x 1 x R``."""
    R, m, n = W.shape
    return W.reshape(R, m * n).T.reshape(m * n, 1, R)


def classical(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f32-accumulated ``a @ b`` rounded once to bf16 (float32 holding bf16 values)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _round(np.matmul(a.astype(np.float32), b.astype(np.float32)), "bf16")


def errors(c: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray) -> Dict[str, float]:
    """``max``, ``norm`` and ``row`` errors of ``c`` against ``ref`` (float64; see the module docstring);
    a non-finite entry of ``c`` where ``ref`` is finite is an error of inf."""
    c = np.asarray(c, dtype=np.float64)
    if not np.isfinite(c).all():
        return {"max": math.inf, "norm": math.inf, "row": math.inf}
    d = c - ref
    rows = np.linalg.norm(ref, axis=1)
    row_err = np.linalg.norm(d, axis=1)[rows > 0] / rows[rows > 0]
    return {"max": float(np.max(np.abs(d)) / np.max(np.abs(ref))),
            "norm": float(np.linalg.norm(d) / (np.linalg.norm(a) * np.linalg.norm(b))),
            "row": float(row_err.max()) if row_err.size else 0.0}


def _scale_lines(x: np.ndarray, rng, span: int, axis: int) -> np.ndarray:
    e = rng.integers(-span, span + 1, size=x.shape[axis])
    return x * (2.0 ** e)[:, None] if axis == 0 else x * (2.0 ** e)[None, :]


def cases(M: int, N: int, K: int, seed: int = 0) -> Dict[str, Callable[[], tuple]]:
    """The input cases by name: each a function giving ``(A, B)`` float64 (rounded to bf16 by the caller)."""
    def normal(rng):
        return rng.standard_normal((M, K)), rng.standard_normal((K, N))

    def outlier_elements(rng):
        a, b = normal(rng)
        a[rng.random((M, K)) < 1e-3] *= 1000
        b[rng.random((K, N)) < 1e-3] *= 1000
        return a, b

    def outlier_channels(rng):
        a, b = normal(rng)
        a[:, rng.random(K) < 1e-2] *= 1000
        return a, b

    def huge(e):
        def f(rng):
            a, b = normal(rng)
            a[3, 7] = 2.0 ** e
            return a, b
        return f

    def pair(e):
        def f(rng):
            a, b = normal(rng)
            a[0, 0] = b[5, 5] = 2.0 ** e
            return a, b
        return f

    def lines(span, which):
        def f(rng):
            a, b = normal(rng)
            if "A" in which:
                a = _scale_lines(a, rng, span, 0)
            if "B" in which:
                b = _scale_lines(b, rng, span, 1)
            return a, b
        return f

    table = {
        "normal": normal,
        "uniform [0,1)": lambda rng: (rng.random((M, K)), rng.random((K, N))),
        "outlier elements x1000 (0.1% of A, B)": outlier_elements,
        "outlier channels x1000 (1% of A's columns)": outlier_channels,
        "rows of A x 2^e, |e| <= 20": lines(20, "A"),
        "rows of A x 2^e, |e| <= 40": lines(40, "A"),
        "columns of B x 2^e, |e| <= 40": lines(40, "B"),
        "rows of A, columns of B x 2^e, |e| <= 20": lines(20, "AB"),
        "one huge element, A[3,7] = 2^20": huge(20),
        "one huge element, A[3,7] = 2^40": huge(40),
        "A[0,0] = B[5,5] = 2^12": pair(12),
        "A[0,0] = B[5,5] = 2^16": pair(16),
        "A[0,0] = B[5,5] = 2^20": pair(20),
        "A[0,0] = B[5,5] = 2^64 (break-it)": pair(64),
    }
    return {name: (lambda f=f, i=i: f(np.random.default_rng(seed + i))) for i, (name, f) in enumerate(table.items())}


def compare(M: int, N: int, K: int, levels=(1, 2), seed: int = 0, only: Optional[List[str]] = None) -> List[dict]:
    """Rows ``{"case", "plan", "form", "max", "norm", "row"}`` for every case (or the ``only`` ones) and
    classical, then Strassen^L for each L in ``levels`` with bf16 and scaled f16 operands."""
    import ml_dtypes
    out = []
    for name, make in cases(M, N, K, seed).items():
        if only and name not in only:
            continue
        a, b = make()
        a = a.astype(ml_dtypes.bfloat16).astype(np.float64)
        b = b.astype(ml_dtypes.bfloat16).astype(np.float64)
        ref = a @ b
        out.append({"case": name, "plan": "classical", "form": "classical", **errors(classical(a, b), ref, a, b)})
        for L in levels:
            scheme = "strassen" if L == 1 else f"strassen^{L}"
            for form, ops in (("bf16 ops", "bf16"), ("f16 scaled", "f16")):
                c = emulate_plan(a, b, scheme, ops)
                out.append({"case": name, "plan": scheme, "form": form, **errors(c, ref, a, b)})
    return out


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.1e}"


def markdown(rows: List[dict], title: str) -> str:
    """One table: a row per case and plan, ``max / norm / row`` per form, and the scaled/bf16 ratio of the
    max-norm error."""
    lines = [title, "", "| case | plan | classical max / norm / row | bf16 ops max / norm / row | "
             "f16 scaled max / norm / row | scaled / bf16 (max) |", "|---|---|---|---|---|---|"]
    by = {(r["case"], r["plan"], r["form"]): r for r in rows}
    for (case, plan, form), r in by.items():
        if form != "bf16 ops":
            continue
        cl, sc = by[(case, "classical", "classical")], by[(case, plan, "f16 scaled")]
        trip = lambda x: " / ".join(_fmt(x[k]) for k in ("max", "norm", "row"))  # noqa: E731
        ratio = sc["max"] / r["max"] if r["max"] > 0 and math.isfinite(r["max"]) else math.nan
        lines.append(f"| {case} | {plan} | {trip(cl)} | {trip(r)} | {trip(sc)} | {ratio:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1024, help="M = N = K (default 1024)")
    ap.add_argument("--levels", default="1,2", help="Strassen levels (default 1,2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--long-k", action="store_true",
                    help="also the heavy-tailed cases at M = N = 128, K = 2^18, levels 1-3")
    args = ap.parse_args(argv)
    try:
        levels = tuple(int(x) for x in args.levels.split(","))
        if args.size < 32 or any(not 1 <= L <= 3 for L in levels):
            raise ValueError
    except ValueError:
        print(f"scaled_operands: error: --size must be >= 32 and --levels 1..3 (got {args.size}, "
              f"{args.levels})", file=sys.stderr)
        return 2
    t0 = time.time()
    n = args.size
    print(markdown(compare(n, n, n, levels, args.seed), f"M = N = K = {n}, seed {args.seed}"))
    if args.long_k:
        print()
        print(markdown(compare(128, 128, 2**18, (1, 2, 3), args.seed,
                               only=["normal", "outlier elements x1000 (0.1% of A, B)",
                                     "outlier channels x1000 (1% of A's columns)"]),
                       f"M = N = 128, K = 2^18, seed {args.seed}"))
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
