"""What falcon-bench compares: candidates (classical IREE, falcon's ``auto``,
forced ``lcma-rewrite`` option strings, the CPU peers numpy and torch, the
cost model's ``top`` plans) and the one-line plan text of falcon's report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from falcon_mlir.bench.shapes import Shape

__all__ = ["Candidate", "parse_candidates", "split_candidates", "expand_top", "plan_text"]


@dataclass
class Candidate:
    """A way to compute the product: ``kind`` is ``iree`` (with ``lcma``, the
    option string handed to :func:`falcon_mlir.compile_str`; None: classical;
    ``kernels``: its ``kernels`` argument, ``"auto"``: falcon's own kernels
    where the target has them, e.g. the CPU kernel on an AVX-512 host, so
    ``classical`` is falcon's classical kernel there; None: IREE's code,
    the ``iree`` candidate), ``numpy`` or ``torch`` (the CPU peers:
    ``numpy.matmul`` on OpenBLAS, ``torch.matmul`` on oneDNN/MKL) or
    ``top`` (expanded per shape by :func:`expand_top`)."""

    name: str
    kind: str
    lcma: Optional[str] = None
    kernels: Optional[str] = "auto"


#: Candidate names that are not lcma option strings.
KEYWORDS = ("classical", "none", "off", "iree", "auto", "numpy", "torch", "top", "blocked")


def split_candidates(text: str) -> List[str]:
    """Split a ``--candidates`` list on its commas, except the commas of a per-level scheme list:
    ``"auto,scheme=strassen,winograd levels=2,numpy"`` -> ``["auto", "scheme=strassen,winograd levels=2",
    "numpy"]``. A piece continues the previous one when that one ends in a ``scheme=`` value and the
    piece's first word is a plain name (no ``=``, not a keyword of :data:`KEYWORDS`)."""
    out: List[str] = []
    for piece in (t.strip() for t in text.split(",")):
        if not piece:
            continue
        first = piece.split()[0]
        if out and out[-1].split()[-1].startswith("scheme=") and "=" not in first and first not in KEYWORDS:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def parse_candidates(text: str, numpy_peer: bool = False, torch_peer: bool = False,
                     flags: Optional[List[str]] = None) -> List[Candidate]:
    """Comma-separated candidates (``classical``, ``iree``, ``auto``, ``numpy``, ``torch``,
    ``top``, ``blocked``, lcma option strings, whose ``scheme=`` may list one name per level with
    commas: :func:`split_candidates`) -> list, ``classical`` first (added when
    absent), then ``numpy`` with ``numpy_peer`` and ``torch`` with
    ``torch_peer`` last; duplicates dropped.

    ``flags``: the iree-compile flags the candidates will be compiled with (target included): an
    option string is checked as that compile takes it, with falcon's kernels where the target has
    them (``form=kernel`` on an AVX-512 host); ``None``: checked without target flags (no kernels).

    Raises:
        ValueError: an empty list, an lcma option string falcon rejects, or
            ``torch`` where torch is not installed.
    """
    from falcon_mlir.api import make_lcma_rewrite
    from falcon_mlir.pipeline.assemble import make_rewrite

    names = split_candidates(text)
    if not names:
        raise ValueError("empty list")
    cands: List[Candidate] = []
    seen = set()
    peers = (["numpy"] if numpy_peer else []) + (["torch"] if torch_peer else [])
    for name in ["classical"] + names + peers:
        if name in seen:
            continue
        seen.add(name)
        if name in ("classical", "none", "off"):
            if "classical" in [c.name for c in cands]:
                continue
            cands.append(Candidate("classical", "iree", None))
        elif name == "iree":
            cands.append(Candidate("iree", "iree", None, kernels=None))
        elif name == "numpy":
            cands.append(Candidate("numpy", "numpy"))
        elif name == "torch":
            import importlib.util

            if importlib.util.find_spec("torch") is None:
                raise ValueError("torch is not installed (the torch peer needs it)")
            cands.append(Candidate("torch", "torch"))
        elif name == "top":
            cands.append(Candidate("top", "top"))
        elif name == "blocked":
            cands.append(Candidate("blocked", "blocked"))
        else:
            try:
                make_lcma_rewrite(name) if flags is None else make_rewrite(name, tiles=None, flags=flags)
            except (ValueError, TypeError) as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ValueError(f"bad lcma option {name!r}: {msg}") from None
            cands.append(Candidate(name, "iree", name))
    return cands


def expand_top(shape: Shape, cands: List[Candidate], *, dtype: str, acc: str,
               const_weights: bool, top: int, profile: Optional[str] = None) -> List[Candidate]:
    """``cands`` with the ``top`` candidate replaced by the cost model's best
    plans for ``shape`` on ``profile`` (the one ``auto`` decides on when the candidates are compiled,
    :meth:`~falcon_mlir.bench.measure.BenchConfig.auto_profile`; ``None``: the host profile) (at most
    ``top`` of them, forced option strings): the choice's runners-up, or the best plans when the
    choice is classical (where it is classical by the profile's block rules, ``min_block_m``,
    ``min_block_m_deep`` and ``min_block_k``, the best plans without those rules, so that the quality table measures the rules
    against what they keep out); and the ``blocked`` candidate by the best classical
    blocking plan (``blocked scheme=2x2x2:8``: the decision's classical
    reference where it beats IREE's GEMM; left out where none does, IREE's
    GEMM being ``classical``). ``acc`` is the accumulator type (not ``same``)."""
    if not any(c.kind in ("top", "blocked") for c in cands):
        return cands
    from falcon_mlir import decision
    from falcon_mlir.decision import numerics

    pb = decision.Problem(shape.M, shape.N, shape.K, lhs=dtype, rhs=dtype, acc=acc,
                          const_rhs=bool(const_weights))
    prof = decision.load_profile(profile)
    budget = numerics.default_max_error(acc)
    d = (decision.decide_constant_b(pb, prof, decision.decide, budget=budget)  # as auto decides a weight
         or decision.decide(pb, prof, budget=budget))
    plans = ([] if d.choice.is_classical else [d.choice]) + list(d.alternatives)
    free = prof.without_block_minimums()
    if not plans and free != prof:
        # auto is classical by the profile's block rules: test the rules against the plan they kept out
        d_free = (decision.decide_constant_b(pb, free, decision.decide, budget=budget)
                  or decision.decide(pb, free, budget=budget))
        plans = ([] if d_free.choice.is_classical else [d_free.choice]) + list(d_free.alternatives)
    extra, seen = [], {c.lcma for c in cands}
    for e in plans[1:] if not d.choice.is_classical else plans:
        opt = (f"scheme={','.join(e.schemes)} levels={len(e.schemes)} form={e.form} "
               f"edge={e.edge}")
        if opt not in seen and len(extra) < top:
            seen.add(opt)
            extra.append(Candidate(opt, "iree", opt))
    blocked = []
    if d.blocked is not None:
        opt = f"scheme={d.blocked.schemes[0]}"
        blocked = [Candidate(f"blocked {opt}", "iree", opt)]
    out: List[Candidate] = []
    for c in cands:
        out.extend(extra if c.kind == "top" else blocked if c.kind == "blocked" else [c])
    return out


def plan_text(report: list) -> str:
    """One-line plan from falcon's report (a list of per-contraction dicts):
    ``classical``, ``classical (falcon's kernel)`` (falcon-kernels served it) or
    ``strassen x1 (7 products)``, ``strassen x2 (kernel)``, ``strassen x1 (7 products, M edge padded)``
    (the edge policy only where the blocks do not divide the shape); a kernel-form plan that falcon-kernels
    did not build (it ran classical: a format that does not divide the sizes on the CPU kernel, or
    the pass off) is ``classical (falcon's kernel; kernel-form 3x3x3:23 x1 not built)``; entries
    joined by ``; ``."""
    from falcon_mlir.decision.explain import edges_text

    if not report:
        return "classical"
    parts = []
    for e in report:
        p = e.get("plan")
        # falcon-kernels' entries: joined to lcma-rewrite's (``kernels``), or alone without the rewrite
        kernels = e.get("kernels") or ([e] if "kernel" in e else [])
        if not isinstance(p, dict) or "schemes" not in p:
            own = any(k.get("kernel") == "classical" for k in kernels)
            parts.append("classical (falcon's kernel)" if own else "classical")
            continue
        schemes = p.get("schemes") or []
        levels = p.get("levels", len(schemes))
        if len(set(schemes)) == 1:
            s = f"{schemes[0]} x{levels}"
        else:
            s = "+".join(schemes)
        if p.get("form") == "kernel" and not any(k.get("kernel") == "plan" for k in kernels):
            own = "falcon's kernel; " if any(k.get("kernel") == "classical" for k in kernels) else ""
            parts.append(f"classical ({own}kernel-form {s} not built)")
            continue
        extra = []
        if e.get("products"):
            extra.append(f"{e['products']} products")
        if p.get("form") in ("grouped", "kernel"):
            extra.append(p["form"])
        edges = edges_text(e)
        if edges:
            extra.append(edges)
        parts.append(s + (f" ({', '.join(extra)})" if extra else ""))
    return "; ".join(parts)
