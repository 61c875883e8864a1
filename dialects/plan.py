"""The plan: what the decision attaches to a contraction and the rewrite consumes.

A plan fixes, for one contraction, how it is computed:

* ``schemes``: one catalog scheme name per level (``len(schemes)`` is the
  number of levels L; level 1 is applied to the whole operation, level 2 to
  each of its products, and so on),
* ``edge``: how sizes that the scheme's block counts do not divide are
  handled: ``"peel"`` (the divisible part goes through the scheme, the
  remainder through classical products) or ``"pad"`` (operands are padded
  with zeros up to the next multiple and the result is sliced back),
* ``form``: how the levels are emitted. ``"per-product"``: R separate
  contractions of combined blocks per level, recursively. ``"grouped"``
  (the FalconGEMM paper's group-parallel execution): the levels' schemes are
  composed (Kronecker product) into one scheme, combine A writes all R
  combined operands as one R x block tensor in one op (likewise B), one
  batched contraction over R computes every product, and combine C reads the
  products from that one tensor. ``"kernel"`` (CUDA, the FalconGEMM paper's
  generated kernels): the same grouped plan run by falcon's own generated
  kernels, four dispatches (combine A, combine B, the R products as one
  batched GEMM, combine C; :mod:`falcon_mlir.kernels.lcma`); lcma-rewrite
  leaves the op with its plan and the ``falcon-kernels`` pass replaces it,
* ``tiles``: per-product tile choices (reserved; ``None`` = IREE's default),
* ``operands`` (kernel form only, optional): the type the combined operands
  and stored products are formed in (``"bf16"``, ``"f16"``, ``"f32"``;
  ``"f16"`` for bf16 inputs is the scaled form of
  :mod:`falcon_mlir.kernels.lcma.scale`); absent: the kernels' default for
  the input type (scaled f16 for bf16). lcma-rewrite writes it from its
  ``operands`` option.

In the IR the plan is the discardable attribute ``falcon.plan`` on the
contraction op, a dictionary::

    linalg.matmul {falcon.plan = {schemes = ["strassen", "strassen"],
                                  edge = "peel", form = "per-product"}} ...
    linalg.matmul {falcon.plan = {schemes = ["strassen", "strassen"], edge = "pad",
                                  form = "kernel", operands = "f16"}} ...

The rewrite removes it (``falcon-kernels`` for the ``kernel`` form), so IREE
only ever sees upstream dialects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

#: Name of the discardable attribute that carries a plan.
PLAN_ATTR = "falcon.plan"
#: Unit attribute lcma-rewrite sets on a module it rewrote contractions of (products emitted or kernel-form
#: plans handed off): a second run leaves such a module as it is, rather than rewriting its products
#: again as a further level.
REWRITTEN_ATTR = "falcon.lcma_rewritten"
#: Edge strategies and forms of a plan: the one list the options, the
#: decision and the cost model use.
EDGES = ("peel", "pad")
FORMS = ("per-product", "grouped", "kernel")
#: Operand types a kernel-form plan may name (``operands``).
OPERAND_TYPES = ("bf16", "f16", "f32")


class PlanError(ValueError):
    """A plan that is malformed (unknown edge or form, no levels)."""


@dataclass(frozen=True)
class Plan:
    """How one contraction is rewritten.

    Attributes:
        schemes: catalog names, one per level, outermost first (e.g.
            ``("strassen", "3x3x3:23")``).
        edge: ``"peel"`` or ``"pad"``.
        form: ``"per-product"``, ``"grouped"`` or ``"kernel"``.
        tiles: reserved for per-product tile choices; ``None`` today.
        operands: kernel form: the combined operands' type (one of
            :data:`OPERAND_TYPES`), or ``None`` for the kernels' default.

    Raises:
        PlanError: on an empty scheme list, an unknown edge/form, or
            ``operands`` that is not an operand type or on a plan not in the
            kernel form.
    """

    schemes: tuple
    edge: str = "peel"
    form: str = "per-product"
    tiles: Optional[tuple] = field(default=None)
    operands: Optional[str] = None

    def __post_init__(self):
        if not self.schemes:
            raise PlanError("a plan needs at least one level")
        if self.edge not in EDGES:
            raise PlanError(f"unknown edge strategy '{self.edge}' (expected one of {', '.join(EDGES)})")
        if self.form not in FORMS:
            raise PlanError(f"unknown form '{self.form}' (expected one of {', '.join(FORMS)})")
        if self.operands is not None and self.operands not in OPERAND_TYPES:
            raise PlanError(f"unknown operands '{self.operands}' (expected one of {', '.join(OPERAND_TYPES)})")
        if self.operands is not None and self.form != "kernel":
            raise PlanError(f"operands = '{self.operands}' is for kernel-form plans (this one is {self.form})")

    @property
    def levels(self) -> int:
        """Number of levels L (= ``len(schemes)``)."""
        return len(self.schemes)

    def inner(self) -> "Plan | None":
        """The plan for the products of the first level (``None`` when L = 1)."""
        if len(self.schemes) == 1:
            return None
        return Plan(tuple(self.schemes[1:]), self.edge, self.form, self.tiles, self.operands)

    def to_json(self) -> dict:
        """The plan as a JSON-ready dict (used in the ``--lcma-report``)."""
        out = {"schemes": list(self.schemes), "levels": self.levels,
               "edge": self.edge, "form": self.form}
        if self.operands is not None:
            out["operands"] = self.operands
        return out

    def to_attribute(self, context=None):
        """The plan as an MLIR ``DictAttr`` (built in ``context`` or the current one)."""
        from iree.compiler import ir

        with context or ir.Context.current:
            d = {"schemes": ir.ArrayAttr.get([ir.StringAttr.get(s) for s in self.schemes]),
                 "edge": ir.StringAttr.get(self.edge),
                 "form": ir.StringAttr.get(self.form)}
            if self.operands is not None:
                d["operands"] = ir.StringAttr.get(self.operands)
            return ir.DictAttr.get(d)

    @staticmethod
    def from_attribute(attr) -> "Plan":
        """Read a plan back from its ``DictAttr``.

        Raises:
            PlanError: if the attribute is not a plan dictionary.
        """
        from iree.compiler import ir

        try:
            d = ir.DictAttr(attr)
            schemes = tuple(ir.StringAttr(s).value for s in ir.ArrayAttr(d["schemes"]))
            edge = ir.StringAttr(d["edge"]).value if "edge" in d else "peel"
            form = ir.StringAttr(d["form"]).value if "form" in d else "per-product"
            operands = ir.StringAttr(d["operands"]).value if "operands" in d else None
        except (ValueError, KeyError, TypeError) as e:
            raise PlanError(f"malformed {PLAN_ATTR} attribute {attr}: {e}") from None
        return Plan(schemes, edge, form, operands=operands)
