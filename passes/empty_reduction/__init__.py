"""empty-reduction: contractions over an empty reduction become their init.

A contraction whose reduction (K) loop dimension has the static size 0 sums
over no terms: its body never runs and its result is its init (the ``outs``
operand), exactly, for every linalg contraction (``matmul``, ``batch_matmul``,
``linalg.generic`` ones with casts or any other body, a dynamic M or N
included). IREE 3.13 crashes compiling one (SIGFPE, "Floating point
exception", on llvm-cpu and vmvx: ``linalg.matmul`` of ``8x0`` by ``0x16``, as
its ``batch_matmul`` form; an empty M, N or batch compiles), and in
falcon-compile, which runs IREE in this process, that was an exit status of
136 without a word. This pass replaces every such op's result by its init and
erases the op; each one gets a report entry.

Where it runs:

* ``lcma-rewrite`` does the same for every contraction it meets
  (:func:`replace_by_init`), whatever its options (auto, a forced scheme,
  ``scheme=classical``, an attached ``falcon.plan``), with the same entry;
* falcon-compile and the Python API (:mod:`falcon_mlir.pipeline.assemble`)
  run this pass where lcma-rewrite does not run (``--no-lcma``,
  ``--lcma-rewrite=none``, ``lcma=None``), so the compile never hands IREE
  such an op;
* ``falcon-opt --empty-reduction`` runs it alone.

The report entry (:func:`entry_of`) has the keys of lcma-rewrite's entries
(location, op, kind, M, N, K, batch, element types, ``plan: "classical"`` (no
LCMA plan), reason, ``predicted_error``/``predicted_time`` ``None``,
``remark: false``) and ``replaced_by: "init"``; ``--lcma-explain`` shows it as
``replaced by its init``.

Options: :class:`EmptyReductionOptions` (none besides the report's file name).

Public names: :func:`run_empty_reduction`, :func:`replace_by_init`,
:func:`entry_of`, :class:`EmptyReductionOptions`, :data:`REASON`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from iree.compiler import ir

from falcon_mlir.ir.contraction import Contraction, find_contractions, format_location
from falcon_mlir.options import parse_options

__all__ = ["EmptyReductionOptions", "run_empty_reduction", "replace_by_init", "entry_of", "REASON"]

#: The report's reason for a contraction replaced by its init.
REASON = ("an empty reduction (K = 0): replaced by its init (a sum over no terms; "
          "IREE 3.13 crashes compiling the op)")


@dataclass
class EmptyReductionOptions:
    """Options of the empty-reduction pass: none (``--empty-reduction`` takes no
    ``key=value``).

    Attributes:
        filename: name used for the ``"-"`` buffer in report locations (not
            an option).
    """

    PASS: ClassVar[str] = "empty-reduction"

    filename: Optional[str] = None

    @classmethod
    def parse(cls, text: Optional[str] = None) -> "EmptyReductionOptions":
        """Options from text (always empty).

        Raises:
            OptionError: any ``key=value`` (the pass has no options).
        """
        return parse_options(cls, text)


def _size(n: int) -> Optional[int]:
    """A size for the report: ``None`` where dynamic."""
    return None if n == ir.ShapedType.get_dynamic_size() else n


def entry_of(c: Contraction, filename: Optional[str] = None) -> dict:
    """The report entry of contraction ``c`` (``c.empty_reduction`` set), replaced by its init.

    Keys as lcma-rewrite's (:func:`passes.lcma_rewrite.report_entry`): ``location``
    (``file:line:col``, ``"-"`` buffers named ``filename``), ``op``, ``kind``, ``M``, ``N``
    (``None`` where dynamic), ``K`` (0), ``batch``, ``element_types`` (lhs, rhs, acc),
    ``plan`` (``"classical"``: no LCMA plan), ``reason`` (:data:`REASON`),
    ``predicted_error`` and ``predicted_time`` (``None``), ``remark`` (``False``: nothing
    asked for is lost), ``replaced_by`` (``"init"``), and ``dims`` where a role has several
    loop dimensions (their sizes, ``None`` where dynamic).
    """
    entry = {
        "location": format_location(c.op.location, filename),
        "op": c.op.name,
        "kind": c.describe_kind(),
        "M": _size(c.M), "N": _size(c.N), "K": 0, "batch": [_size(x) for x in c.batch],
        "element_types": {"lhs": str(c.lhs_type), "rhs": str(c.rhs_type), "acc": str(c.acc_type)},
        "plan": "classical",
        "reason": REASON,
        "predicted_error": None,
        "predicted_time": None,
        "remark": False,
        "replaced_by": "init",
    }
    if c.group_sizes:
        entry["dims"] = {r: [_size(x) for x in xs] for r, xs in c.group_sizes.items()}
    return entry


def replace_by_init(c: Contraction, filename: Optional[str] = None) -> dict:
    """Replace contraction ``c`` (``c.empty_reduction`` set; two inputs, one output on
    tensors) by its init: every use of its result takes the ``outs`` operand, and the op
    is erased. Returns its report entry (:func:`entry_of`), made before the op goes.

    Raises:
        ValueError: ``c`` does not have an empty reduction (a bug of the caller).
    """
    if not c.empty_reduction:
        raise ValueError(f"{c.op.name} has no empty reduction (K = {c.K})")
    entry = entry_of(c, filename)
    init = c.op.operands[2]
    c.op.results[0].replace_all_uses_with(init)
    c.op.erase()
    return entry


def run_empty_reduction(module_op, options: EmptyReductionOptions) -> list:
    """Run the empty-reduction pass on ``module_op`` in place.

    Args:
        module_op: the ``ir.Operation`` (or OpView) of a module; its context
            must be current. Contractions are found anywhere below it.
        options: :class:`EmptyReductionOptions`.

    Returns:
        The report: one entry per contraction replaced (:func:`entry_of`); other
        contractions are left alone and not reported.
    """
    root = module_op.operation if hasattr(module_op, "operation") else module_op
    return [replace_by_init(c, options.filename) for c in find_contractions(root) if c.empty_reduction]
