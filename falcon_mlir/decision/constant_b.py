"""Contractions whose B is a constant of the module (a weight held as a global or an IREE parameter:
``Problem.const_rhs``) where falcon's own CPU kernel is on.

Two ways run such a contraction, and neither wins everywhere:

* **IREE's code**: IREE hoists its data-tiling pack of a constant B, and lcma-rewrite's combines of
  it, into the module's initializer, run once at load; a call pays the products (and combines of A
  and C) alone. Priced on the kernel profile's :attr:`~falcon_mlir.decision.profile.Profile.iree_profile`
  with ``const_rhs``. On aligned shapes this wins: the main job with parameter weights ran 2.10 s
  against 2.32 s with falcon's kernel form (docs/benchmarks.md, *Weights as IREE parameters*).
* **falcon's kernel**: its pack of B is a dispatch of its own, which IREE does not hoist, so B is
  packed on every call; priced on the kernel profile with B not constant. It wins where no plan fits
  IREE's code and IREE's one GEMM is slow: unaligned shapes such as 1000x5000x3000, where IREE's
  GEMM ran at 0.68x numpy and falcon's kernel runs within a few percent of it.

:func:`decide_constant_b` takes the faster prediction (lcma-rewrite); :func:`kernel_serves_constant_b`
compares the two classical predictions (falcon-kernels, for a contraction left classical), which
agrees with it wherever the decision keeps the contraction classical.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from .profile import Profile, load_profile

__all__ = ["constant_b_profile", "decide_constant_b", "kernel_serves_constant_b"]


def constant_b_profile(profile: Profile) -> Optional[Profile]:
    """The profile of IREE's code for a constant B where ``profile`` is that of falcon's CPU kernel
    (a CPU profile whose plan forms include ``kernel``): its ``iree_profile`` (``x86-falcon``:
    ``host``; ``x86-falcon-avx2``: ``x86-avx2``, whose bf16 is emulated) if that one has no kernel
    form; else None.

    Raises:
        ProfileError: ``iree_profile`` does not load.
    """
    if not (profile.kind == "cpu" and "kernel" in profile.plan_forms and profile.iree_profile):
        return None
    iree = load_profile(profile.iree_profile)
    return iree if "kernel" not in iree.plan_forms else None


def decide_constant_b(pb, profile: Profile, decide, **kwargs):
    """The decision for ``pb`` (``const_rhs``) under falcon's kernel profile ``profile``: ``decide(pb,
    iree_profile, forms=its plan forms, **kwargs)`` on IREE's code and ``decide(pb without const_rhs,
    profile, forms=profile's, **kwargs)`` on the kernel, the one with the faster choice (seconds),
    its reason prefixed with the comparison; None where :func:`constant_b_profile` gives none.
    ``decide`` is :func:`falcon_mlir.decision.decide` (passed in: this module is imported by it)."""
    iree = constant_b_profile(profile)
    if iree is None or not pb.const_rhs:
        return None
    on_iree = decide(pb, iree, forms=iree.plan_forms, **kwargs)
    on_kernel = decide(replace(pb, const_rhs=False), profile, forms=profile.plan_forms, **kwargs)
    ti, tk = on_iree.choice.seconds, on_kernel.choice.seconds
    if ti <= tk:
        return replace(on_iree, reason=(
            f"constant B: decided on IREE's code (profile {iree.name}), which packs and combines B once, "
            f"at module load (predicted {ti * 1e3:.3g} ms against {tk * 1e3:.3g} ms on falcon's kernel, "
            f"which packs B every call); {on_iree.reason}"))
    return replace(on_kernel, reason=(
        f"constant B: decided on falcon's kernel (profile {profile.name}; predicted {tk * 1e3:.3g} ms, "
        f"B packed every call, against {ti * 1e3:.3g} ms on IREE's code, profile {iree.name}); "
        f"{on_kernel.reason}"))


def kernel_serves_constant_b(pb, profile: Profile, decide) -> bool:
    """Whether falcon's kernel (``profile``, B packed every call) is predicted faster than IREE's code
    (its ``iree_profile``, B packed at load) for the classical GEMM ``pb`` with a constant B; True where
    ``profile`` names no IREE profile. ``decide`` as in :func:`decide_constant_b`."""
    iree = constant_b_profile(profile)
    if iree is None:
        return True
    return (decide(replace(pb, const_rhs=False), profile).classical.seconds
            < decide(replace(pb, const_rhs=True), iree).classical.seconds)
