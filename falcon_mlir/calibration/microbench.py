"""MLIR text of falcon-calibrate's micro-benchmarks (the compiling side).

* GEMM: ``@gemm(A, B) -> A @ B`` (square, zero-filled accumulator) from
  :func:`falcon_mlir.ir.matmul_text.matmul_mlir`;
* :func:`add_chain_mlir`: the combines' multiply-adds, compute-bound: a chain
  of elementwise generics, step k adding ``c1k X1 + c2k X2 + c3k X3 + c4k X4``
  to the previous step's result (X in the input type, arithmetic in the
  accumulator type as the rewrite does; fresh coefficients per step, so no
  step shares work with another; only the one add on the running result is
  serial; for integers that op is a max, since LLVM reassociates a chain of
  integer adds into one combine). IREE fuses the chain into one dispatch
  that reads each input once: FLOP/s = 2 * 4 * elements * chain / time;
* :func:`ew_add_mlir`: ``A + B`` over f32 vectors, the memory bandwidth:
  (2 read + 1 written) * bytes / time;
* :func:`dispatch_chain_mlir`: tiny elementwise ops chained through the
  rewrite's fence (``iree_tensor_ext.compute_barrier.start``,
  :func:`falcon_mlir.ir.builders.compute_barrier`) so that nothing fuses,
  the per-dispatch cost as the rewrite's plans see it: one execute region,
  no host wait between dispatches. (``util.optimization_barrier``, used
  before, split the host program at every op and waited on the host each
  time: about 70-110 us per dispatch against 0.05-1.4 us on the 2-core x86 host
  under load 4.4, IREE 3.13; profiles calibrated with it carry that.);
* :func:`per_product_mlir`, :func:`grouped_mlir`: the two kinds of combine
  the rewrite emits (``passes/lcma_rewrite``), on blocks sliced out of a
  2b x 2b f32 matrix: per-product is one generic adding two blocks (bytes =
  2 blocks read + 1 written); grouped is Strassen's combine of A, one
  generic writing R = 7 blocks from the 4 blocks with 1-D coefficient tables
  indexed by r (bytes = R * 4 blocks read + R written).
"""

from __future__ import annotations

from falcon_mlir.calibration.measure import STRASSEN_U, is_int
from falcon_mlir.ir.builders import compute_barrier_text
from falcon_mlir.ir.matmul_text import matmul_mlir

__all__ = ["gemm_mlir", "add_chain_mlir", "ew_add_mlir", "dispatch_chain_mlir", "per_product_mlir",
           "grouped_mlir", "DISPATCH_ELEMENTS"]

#: Elements of each tiny op of the dispatch chain.
DISPATCH_ELEMENTS = 256


def gemm_mlir(n: int, tin: str, tacc: str) -> str:
    """``@gemm(A: n x n tin, B: n x n tin) -> A @ B`` with a zero-filled ``tacc`` accumulator."""
    return matmul_mlir(n, n, n, tin, tacc, func="gemm")


def _cast(v: str, src: str, dst: str, out: list, name: str) -> str:
    """Append the cast of scalar ``v`` from ``src`` to ``dst`` to ``out`` (as the rewrite's ``_cast``)."""
    if src == dst:
        return v
    op = "arith.extsi" if is_int(src) else "arith.extf"
    out.append(f"      {name} = {op} {v} : {src} to {dst}")
    return name


def _const(v: float, t: str) -> str:
    return f"arith.constant {int(v)} : {t}" if is_int(t) else f"arith.constant {float(v)!r} : {t}"


def add_chain_mlir(elements: int, tin: str, tacc: str, chain: int) -> str:
    """``@add(X1..X4: elements x tin) -> elements x tacc``: ``chain`` elementwise generics,
    step k computing ``y_k = y_{k-1} + c1k X1 + c2k X2 + c3k X3 + c4k X4`` (casts to
    ``tacc`` as the rewrite's combines do; coefficients new each step, so no step
    shares work with another; only the one add on y is serial)."""
    ti, ta = f"tensor<{elements}x{tin}>", f"tensor<{elements}x{tacc}>"
    m = "affine_map<(d0) -> (d0)>"
    fl = not is_int(tacc)
    mul, add = ("arith.mulf", "arith.addf") if fl else ("arith.muli", "arith.addi")
    lines = [f"func.func @add(%x1: {ti}, %x2: {ti}, %x3: {ti}, %x4: {ti}) -> {ta} {{"]
    prev = None
    for k in range(chain):
        if fl:
            coefs = [0.5 + 0.002 * k, 1.0 / (k + 2), -1.0 / (k + 3), 0.25 - 0.001 * k]
        else:
            coefs = [k + 1, -(k + 2), k + 3, 2 * k + 1]
        ins = ["%x1", "%x2", "%x3", "%x4"] + ([prev] if prev else [])
        types = [ti] * 4 + ([ta] if prev else [])
        maps = ", ".join([m] * (len(ins) + 1))
        lines.append(f"  %e{k} = tensor.empty() : {ta}")
        lines.append(f"  %y{k} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [\"parallel\"]}} "
                     f"ins({', '.join(ins)} : {', '.join(types)}) outs(%e{k} : {ta}) {{")
        args = [f"%i{j}: {tin}" for j in range(4)] + ([f"%p: {tacc}"] if prev else []) + [f"%o: {tacc}"]
        lines.append(f"    ^bb0({', '.join(args)}):")
        body: list = []
        total = None
        for j, c in enumerate(coefs):
            v = _cast(f"%i{j}", tin, tacc, body, f"%v{j}")
            body.append(f"      %c{j} = {_const(c, tacc)}")
            body.append(f"      %m{j} = {mul} %c{j}, {v} : {tacc}")
            if total is None:
                total = f"%m{j}"
            else:
                body.append(f"      %s{j} = {add} {total}, %m{j} : {tacc}")
                total = f"%s{j}"
        if prev:  # integers: max, since reassociation would fold a chain of integer adds
            body.append(f"      %acc = {add if fl else 'arith.maxsi'} %p, {total} : {tacc}")
            total = "%acc"
        lines += body
        lines.append(f"      linalg.yield {total} : {tacc}")
        lines.append(f"  }} -> {ta}")
        prev = f"%y{k}"
    lines.append(f"  return {prev} : {ta}\n}}\n")
    return "\n".join(lines)


def ew_add_mlir(elements: int, t: str = "f32") -> str:
    """``@ew_add(A, B) -> A + B`` over vectors of ``elements``."""
    tt = f"tensor<{elements}x{t}>"
    m = "affine_map<(d0) -> (d0)>"
    return (f"func.func @ew_add(%a: {tt}, %b: {tt}) -> {tt} {{\n"
            f"  %e = tensor.empty() : {tt}\n"
            f"  %r = linalg.generic {{indexing_maps = [{m}, {m}, {m}], iterator_types = [\"parallel\"]}} "
            f"ins(%a, %b : {tt}, {tt}) outs(%e : {tt}) {{\n"
            f"    ^bb0(%x: {t}, %y: {t}, %o: {t}):\n"
            f"      %s = arith.addf %x, %y : {t}\n"
            f"      linalg.yield %s : {t}\n"
            f"  }} -> {tt}\n  return %r : {tt}\n}}\n")


def dispatch_chain_mlir(count: int, elements: int = DISPATCH_ELEMENTS) -> str:
    """``@chain(x)``: ``count`` tiny elementwise ops on ``elements`` f32, each behind
    the rewrite's fence (:func:`falcon_mlir.ir.builders.compute_barrier_text`)."""
    tt = f"tensor<{elements}xf32>"
    m = "affine_map<(d0) -> (d0)>"
    lines = [f"func.func @chain(%x: {tt}) -> {tt} {{"]
    prev = "%x"
    for k in range(count):
        lines += [
            f"  %e{k} = tensor.empty() : {tt}",
            f"  %y{k} = linalg.generic {{indexing_maps = [{m}, {m}], iterator_types = [\"parallel\"]}} "
            f"ins({prev} : {tt}) outs(%e{k} : {tt}) {{",
            "    ^bb0(%i: f32, %o: f32):",
            f"      %c = arith.constant {1.0 + 1e-3 * (k + 1)!r} : f32",
            "      %d = arith.constant 0.5 : f32",
            "      %p = arith.mulf %i, %c : f32",
            "      %s = arith.addf %p, %d : f32",
            "      linalg.yield %s : f32",
            f"  }} -> {tt}",
            "  " + compute_barrier_text(f"%b{k}", f"%y{k}", tt),
        ]
        prev = f"%b{k}"
    lines.append(f"  return {prev} : {tt}\n}}\n")
    return "\n".join(lines)


def _block_slices(b: int, names) -> list:
    at = f"tensor<{2 * b}x{2 * b}xf32>"
    bt = f"tensor<{b}x{b}xf32>"
    off = {"a11": (0, 0), "a12": (0, b), "a21": (b, 0), "a22": (b, b)}
    return [f"  %{nm} = tensor.extract_slice %a[{off[nm][0]}, {off[nm][1]}] [{b}, {b}] [1, 1] : "
            f"{at} to {bt}" for nm in names]


def per_product_mlir(b: int) -> str:
    """``@per_product(A: 2b x 2b) -> A11 + A22``: the per-product form's combine
    (``_combine``: one elementwise generic over two blocks)."""
    at, bt = f"tensor<{2 * b}x{2 * b}xf32>", f"tensor<{b}x{b}xf32>"
    m = "affine_map<(d0, d1) -> (d0, d1)>"
    return "\n".join([f"func.func @per_product(%a: {at}) -> {bt} {{"] + _block_slices(b, ["a11", "a22"]) + [
        f"  %e = tensor.empty() : {bt}",
        f"  %r = linalg.generic {{indexing_maps = [{m}, {m}, {m}], iterator_types = [\"parallel\", \"parallel\"]}} "
        f"ins(%a11, %a22 : {bt}, {bt}) outs(%e : {bt}) {{",
        "    ^bb0(%x: f32, %y: f32, %o: f32):",
        "      %s = arith.addf %x, %y : f32",
        "      linalg.yield %s : f32",
        f"  }} -> {bt}",
        f"  return %r : {bt}\n}}\n"])


def grouped_mlir(b: int) -> str:
    """``@grouped(A: 2b x 2b) -> G: 7 x b x b``, ``G[r] = sum_blk U[r, blk] * blk``: the
    grouped form's combine (``_group_combine``: one generic, 1-D coefficient tables indexed by r)."""
    R = len(STRASSEN_U["a11"])
    at, bt, gt = f"tensor<{2 * b}x{2 * b}xf32>", f"tensor<{b}x{b}xf32>", f"tensor<{R}x{b}x{b}xf32>"
    tt = f"tensor<{R}xf32>"
    names = list(STRASSEN_U)
    blk = "affine_map<(d0, d1, d2) -> (d1, d2)>"
    tab = "affine_map<(d0, d1, d2) -> (d0)>"
    out = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
    lines = [f"func.func @grouped(%a: {at}) -> {gt} {{"] + _block_slices(b, names)
    for nm in names:
        vals = ", ".join(f"{float(v)!r}" for v in STRASSEN_U[nm])
        lines.append(f"  %t_{nm} = arith.constant dense<[{vals}]> : {tt}")
    ins = ", ".join(f"%{nm}, %t_{nm}" for nm in names)
    types = ", ".join(f"{bt}, {tt}" for _ in names)
    maps = ", ".join([blk, tab] * len(names) + [out])
    lines += [f"  %e = tensor.empty() : {gt}",
              f"  %g = linalg.generic {{indexing_maps = [{maps}], iterator_types = "
              f"[\"parallel\", \"parallel\", \"parallel\"]}} ins({ins} : {types}) outs(%e : {gt}) {{",
              "    ^bb0(" + ", ".join(f"%x{i}: f32, %w{i}: f32" for i in range(len(names))) + ", %o: f32):"]
    total = None
    for i in range(len(names)):
        lines.append(f"      %p{i} = arith.mulf %w{i}, %x{i} : f32")
        if total is None:
            total = f"%p{i}"
        else:
            lines.append(f"      %s{i} = arith.addf {total}, %p{i} : f32")
            total = f"%s{i}"
    lines += [f"      linalg.yield {total} : f32", f"  }} -> {gt}", f"  return %g : {gt}\n}}\n"]
    return "\n".join(lines)
