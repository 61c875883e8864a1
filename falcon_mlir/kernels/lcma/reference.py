"""A plan's stages in float64 (no rounding): the reference the tests and the GPU script check against."""

from __future__ import annotations

import numpy as np

from .spec import PlanSpec, plan_geometry, resolve_scheme


def pad_blocks(x: np.ndarray, gr: int, gc: int, br: int, bc: int) -> np.ndarray:
    """``x`` zero-padded to ``gr*br x gc*bc`` and cut into blocks: ``(gr, gc, br, bc)`` float64."""
    out = np.zeros((gr * br, gc * bc))
    out[:x.shape[0], :x.shape[1]] = x
    return out.reshape(gr, br, gc, bc).transpose(0, 2, 1, 3)


def reference_stages(spec: PlanSpec, a: np.ndarray, b: np.ndarray, scheme=None) -> dict:
    """The plan's stages in float64 from ``a``, ``b`` (``b`` as stored: ``N x K`` with ``trans_b``; no
    rounding): ``a_ops``, ``b_ops`` (``R x bk x bn`` whatever the storage), ``products``, ``c``."""
    s = scheme if scheme is not None else resolve_scheme(spec.scheme)
    g = plan_geometry(spec, s)
    U, V, W = (np.asarray(x, dtype=np.float64) for x in (s.U, s.V, s.W))
    ab = pad_blocks(np.asarray(a, dtype=np.float64), g.m, g.k, g.bm, g.bk)
    b = np.asarray(b, dtype=np.float64)
    bb = pad_blocks(b.T if spec.trans_b else b, g.k, g.n, g.bk, g.bn)
    a_ops = np.einsum("rij,ijpq->rpq", U, ab)
    b_ops = np.einsum("rjl,jlpq->rpq", V, bb)
    products = a_ops @ b_ops
    return {"a_ops": a_ops, "b_ops": b_ops, "products": products, "c": combine_c_reference(spec, products, s)}


def combine_c_reference(spec: PlanSpec, products: np.ndarray, scheme=None) -> np.ndarray:
    """C from the R products in float64 (``C_il = sum_r W[r,i,l] P_r``, cut to M x N)."""
    s = scheme if scheme is not None else resolve_scheme(spec.scheme)
    g = plan_geometry(spec, s)
    W = np.asarray(s.W, dtype=np.float64)
    cb = np.einsum("ril,rpq->iplq", W, np.asarray(products, dtype=np.float64))
    return cb.reshape(g.m * g.bm, g.n * g.bn)[:spec.M, :spec.N]
