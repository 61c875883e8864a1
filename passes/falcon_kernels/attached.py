"""The kernel-form plan a contraction carries (``falcon.plan``, attached by lcma-rewrite or by hand), for
both paths of falcon-kernels (CUDA and the CPU)."""

from __future__ import annotations

from falcon_mlir.dialects.plan import PLAN_ATTR, Plan, PlanError

__all__ = ["kernel_plan"]


def kernel_plan(c) -> tuple:
    """``(Plan or None, why not)``: the op's ``falcon.plan`` if it is in the kernel form.

    A kernel-form plan is taken off the op (this pass serves it); a plan of
    another form stays on it for lcma-rewrite (which may run later), and so
    does a malformed one (lcma-rewrite reports it).
    """
    if PLAN_ATTR not in c.op.attributes:
        return None, None
    try:
        plan = Plan.from_attribute(c.op.attributes[PLAN_ATTR])
    except PlanError as e:
        return None, str(e)
    if plan.form != "kernel":
        return None, f"{PLAN_ATTR} form {plan.form} is lcma-rewrite's to emit"
    del c.op.attributes[PLAN_ATTR]
    return plan, None
