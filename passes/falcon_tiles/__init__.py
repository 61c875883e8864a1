"""falcon-tiles: per-contraction tile choices for IREE's CUDA code generation.

IREE 3.13's default CUDA tile choices are poor on large matmuls (H200,
8192^3 f32: 271 ms default vs 31.3 ms with a hand-picked choice; f16:
7.39 ms vs 4.62 ms; ``../shared/iree-notes.md``). IREE honours a
``compilation_info`` attribute on a linalg op (a ``lowering_config`` plus a
``translation_info``) in place of its own choice, so this pass attaches one
to every contraction it can serve:

* ``linalg.matmul`` (default or transposed maps), ``linalg.batch_matmul``
  (the grouped form's one batched product over R), and ``linalg.generic``
  contractions with one M, one N and one K loop (any batch loops), static
  shapes; found with :func:`falcon_mlir.ir.contraction.find_contractions`.
* The choice comes from a tile table per element types (:mod:`.tables`,
  option ``table=``): the first entry whose workgroup tile divides M and N
  and whose K step divides K (entries marked ``batched_only`` serve only
  contractions with batch loops). When none fits, the op keeps IREE's
  default.
* Ops that already carry ``compilation_info`` or ``lowering_config`` are left
  alone.
* The rewrite's combine ops (tagged ``falcon.combine``) get their own choice
  (:mod:`.combines`).

Batch loops get workgroup tile 1 (thread 1 for SIMT, subgroup 0 for MMA, as
IREE's own choices for ``batch_matmul``).

Usage::

    falcon-opt in.mlir --falcon-tiles=table=cuda-sm80
    falcon-opt in.mlir --pass-pipeline='builtin.module(lcma-rewrite{scheme=strassen},falcon-tiles{table=cuda-sm80})'

and inside ``falcon-compile`` / :mod:`falcon_mlir.api` it runs after the
rewrite whenever the IREE target device is ``cuda`` (``--falcon-tiles=none``
turns it off). ``target=`` is accepted for ``table=``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from iree.compiler import ir

from falcon_mlir.ir.contraction import find_contractions, format_location
from falcon_mlir.options import OptionError, option, parse_options

from .combines import COMBINE_MAX_PER_THREAD, combine_choice, combine_info_text, tile_combines
from .tables import SUBGROUP_SIZE, TABLE_NAMES, TABLES, TileChoice, choice_names, choose

__all__ = ["TilesOptions", "run_falcon_tiles", "TABLES", "TABLE_NAMES", "TileChoice", "choose",
           "combine_choice", "combine_info_text", "compilation_info_text", "OptionError",
           "COMBINE_MAX_PER_THREAD"]


def _parse_prefer(text: str) -> tuple:
    """Names of tile choices, comma separated, each one of :func:`.tables.choice_names`."""
    names = choice_names()
    wanted = tuple(v for v in text.split(",") if v)
    bad = [v for v in wanted if v not in names] or ([] if wanted else [text])
    if bad:
        raise OptionError(f"falcon-tiles option prefer='{bad[0]}' is not a tile choice "
                          f"(known: {', '.join(names)})")
    return wanted


@dataclass
class TilesOptions:
    """Options of the falcon-tiles pass (see each field's help for the text form).

    Attributes:
        table: a key of :data:`TABLES`, ``none`` or ``auto`` (see
            :data:`.tables.TABLE_NAMES`); text key ``table=``, also ``target=``
            or a bare name.
        prefer: names of table entries (e.g. ``("simt64x64", "mma128x128")``)
            tried first, in order, for every contraction, before the table's
            own order (for tuning experiments; an entry is skipped where it
            does not fit or belongs to other element types).
        combine_max: most elements one thread forms in a combine (default
            :data:`COMBINE_MAX_PER_THREAD`; narrower vectors above it).
        filename: name used for the ``"-"`` buffer in report locations (not
            a text option).
    """

    PASS: ClassVar[str] = "falcon-tiles"

    table: str = option(
        "cuda-sm80", choices=TABLE_NAMES, aliases=("target",), positional=True,
        expect="one of: " + ", ".join(TABLE_NAMES),
        help="the tile table; none: do nothing; auto: cuda-sm80 (falcon-compile and the API: "
             "when the target device is cuda, else none)")
    prefer: tuple = option(
        (), parse=_parse_prefer, metavar="NAME,...",
        help="table entries tried first, in order (tuning experiments)")
    combine_max: int = option(
        COMBINE_MAX_PER_THREAD, range=(1, 4096),
        help="most elements one thread forms in a combine op")
    filename: Optional[str] = None

    @classmethod
    def parse(cls, text: Optional[str]) -> "TilesOptions":
        """Options from ``"table=cuda-sm80 prefer=simt64x64,mma128x128"`` (a bare
        table name is taken for ``table=``).

        Raises:
            OptionError: unknown key or table, a choice name no table has, a
                key given twice, combine-max not in [1, 4096].
        """
        return parse_options(cls, text)


def compilation_info_text(choice: TileChoice, n_loops: int, m_dim: int, n_dim: int, k_dim: int,
                          batch_dims) -> str:
    """The ``#iree_codegen.compilation_info<...>`` text for ``choice`` on an op
    with ``n_loops`` loops (dims of M, N, K and batch given by index)."""
    def vec(values):
        out = [0] * n_loops
        for d, v in values.items():
            out[d] = v
        return "[" + ", ".join(str(v) for v in out) + "]"

    batch = {d: 1 for d in batch_dims}
    wg = vec({**batch, m_dim: choice.workgroup[0], n_dim: choice.workgroup[1]})
    red = vec({k_dim: choice.reduction})
    if choice.mma:
        sg = vec({m_dim: choice.subgroup[0], n_dim: choice.subgroup[1]})
        lc = (f"#iree_gpu.lowering_config<{{convert_acc_gemm, "
              f"mma_kind = #iree_gpu.mma_layout<{choice.mma}>, promote_operands = [0, 1], "
              f"reduction = {red}, subgroup = {sg}, workgroup = {wg}}}>")
        opts = (", {gpu_pipeline_options = #iree_gpu.pipeline_options<prefetch_num_stages = 2, "
                "no_reduce_shared_memory_bank_conflicts = false, use_igemm_convolution = false>}")
    else:
        th = vec({**batch, m_dim: choice.thread[0], n_dim: choice.thread[1]})
        lc = (f"#iree_gpu.lowering_config<{{promote_operands = [0, 1], reduction = {red}, "
              f"thread = {th}, workgroup = {wg}}}>")
        opts = ""
    ti = (f"#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> "
          f"workgroup_size = [{choice.threads}, 1, 1] subgroup_size = {SUBGROUP_SIZE}{opts}>")
    return f"#iree_codegen.compilation_info<lowering_config = {lc}, translation_info = {ti}>"


def _n_loops(op) -> int:
    maps = list(op.attributes["indexing_maps"])
    return ir.AffineMapAttr(maps[0]).value.n_dims


def run_falcon_tiles(module_op, options=None) -> list:
    """Attaches ``compilation_info`` to every contraction under ``module_op``.

    Args:
        module_op: the ``builtin.module`` operation (call inside its context).
        options: :class:`TilesOptions`, an option string, or a table name.

    Returns:
        One report dict per contraction: ``pass`` (``falcon-tiles``),
        ``location``, ``op``, ``M``, ``N``, ``K``, ``batch``,
        ``element_types``, ``target`` (the table used), ``tiles`` (the
        choice as a dict, or None), ``reason``, ``remark`` (False); then one
        per tagged combine op (:func:`.combines.tile_combines`).

    Raises:
        OptionError: ``options`` is text that does not parse.
    """
    if options is None or isinstance(options, str):
        options = TilesOptions.parse(options)
    table = "cuda-sm80" if options.table == "auto" else options.table
    report = []
    if table == "none":
        return report
    for c in find_contractions(module_op):
        op = c.op
        entry = {"pass": "falcon-tiles", "location": format_location(op.location, options.filename),
                 "op": op.name, "M": c.M, "N": c.N, "K": c.K, "batch": list(c.batch),
                 "element_types": {"lhs": str(c.lhs_type), "rhs": str(c.rhs_type),
                                   "acc": str(c.acc_type)},
                 "target": table, "tiles": None, "remark": False}
        report.append(entry)
        if "compilation_info" in op.attributes or "lowering_config" in op.attributes:
            entry["reason"] = "already carries compilation_info/lowering_config (left alone)"
            continue
        if c.m_dim < 0 or c.lhs_type is None:
            entry["reason"] = f"not served: {c.unsupported}"
            continue
        sizes = [c.M, c.N, c.K] + list(c.batch)
        if any(s is None or s <= 0 for s in sizes):
            entry["reason"] = "dynamic or empty shape (IREE's default)"
            continue
        types = (str(c.lhs_type), str(c.rhs_type), str(c.acc_type))
        choice, reason = choose(table, types, c.M, c.N, c.K, options.prefer,
                                batched=bool(c.batch_dims))
        entry["reason"] = reason
        if choice is None:
            continue
        text = compilation_info_text(choice, _n_loops(op), c.m_dim, c.n_dim, c.k_dim, c.batch_dims)
        op.attributes["compilation_info"] = ir.Attribute.parse(text, context=module_op.context)
        entry["tiles"] = choice.as_dict()
    tile_combines(module_op, table, options.filename, report, options.combine_max)
    return report
