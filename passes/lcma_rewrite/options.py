"""Options of ``lcma-rewrite``, declared once (see :mod:`falcon_mlir.options`).

Text form (mlir-opt style): ``--lcma-rewrite="scheme=strassen levels=2
edge=pad"`` or ``lcma-rewrite{scheme=strassen levels=2}`` in a pipeline
(``none``: the pass does not run, :meth:`LcmaOptions.means_off`);
:meth:`LcmaOptions.parse` reads it, ``falcon-opt --help`` shows the
declarations below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from falcon_mlir.decision.numerics import OPERAND_CHOICES
from falcon_mlir.dialects.plan import EDGES, FORMS
from falcon_mlir.options import OptionError, option, parse_options, strip_text

__all__ = ["LcmaOptions", "OptionError", "MAX_LEVELS"]

#: Most levels a plan may have (``levels=``, or schemes listed in ``scheme=``).
MAX_LEVELS = 4


def _parse_scheme(text: str):
    """``"auto"``, ``"classical"``, or the tuple of catalog names in ``"a,b"``
    (checked in :meth:`LcmaOptions.validate`, after every option is read)."""
    if text in ("auto", "classical"):
        return text
    names = tuple(n for n in text.split(",") if n)
    if not names:
        raise OptionError("lcma-rewrite option scheme= needs a value (auto, or a name "
                          "from `falcon-catalog list`)")
    return names


def _parse_profile(text: str) -> str:
    """A profile preset name or JSON path that loads (``ProfileError`` otherwise)."""
    from falcon_mlir.decision.profile import load_profile

    load_profile(text)
    return text


@dataclass
class LcmaOptions:
    """Options of the lcma-rewrite pass (see each field's help for the text form).

    Attributes:
        scheme: ``"auto"``, ``"classical"`` (every contraction stays IREE's
            one GEMM: no blocking, no LCMA, no run-time dispatch) or a tuple of
            catalog names, one per level (``mxkxn:R`` with ``R = m*k*n`` is
            classical blocking, :func:`falcon_mlir.catalog.blocking_scheme`).
        levels: ``None`` (auto) or L in 1..:data:`MAX_LEVELS`.
        edge: ``"auto"``, ``"peel"`` or ``"pad"``.
        form: ``"auto"`` (the decision picks; per-product for a forced
            scheme), ``"per-product"`` or ``"grouped"`` (see
            :mod:`falcon_mlir.dialects.plan`).
        barriers: put the bare-slice operands of every contraction the
            rewrite emits (accumulators included), and the products'
            results, behind ``iree_tensor_ext.compute_barrier.start``
            (:func:`falcon_mlir.ir.builders.compute_barrier`: dispatch
            creation does not fuse across it, then removes it). Data
            tiling on llvm-cpu needs both: without the first
            a slice's packing is pulled into the product dispatch (stack
            allocation limit), without the second the unpacks of several
            products fuse into the combine-C dispatch and vectorize whole
            ("large vector sizes"), IREE 3.13. ``None`` (auto): on (falcon-compile
            and the Python API apply it as a visible default,
            :mod:`falcon_mlir.pipeline.assemble`; falcon-opt too, so that its
            output compiles with ``iree-compile --iree-opt-data-tiling=true``:
            it was off there, and the break-it review of issue 13 found
            falcon-opt's output failing under data tiling). ``False`` keeps the
            output to upstream dialects only.
        stack: how a per-product plan of several levels is emitted: ``True``
            stacked (:mod:`.stacked`: one batched contraction over all
            R_1 * ... * R_L products; IREE compiles it in seconds), ``False``
            by recursion (R^L contractions; faster at run time on llvm-cpu,
            where the stacked operands are hundreds of MB of transients that
            glibc maps fresh on every call). ``None`` (auto): recursion where
            the profile has no fused combine C (CPU) and
            :func:`falcon_mlir.decision.compile_cost.recursive_compile_seconds`
            is within ``RECURSIVE_SECONDS`` and the module's budget
            ``RECURSIVE_MODULE_SECONDS``, else stacked.
        max_error: error budget (max-norm relative) per contraction, or
            ``None`` (auto): plans whose predicted error
            (:func:`falcon_mlir.decision.numerics.predicted_error`) exceeds it
            are not chosen. With auto, the per-type default
            (:func:`falcon_mlir.decision.numerics.default_max_error`) applies
            to auto plans; a forced scheme is applied unless ``max-error`` is
            given.
        profile: hardware profile of the cost model: ``None`` (the host
            preset, or ``$FALCON_PROFILE``), a preset name or a profile path
            (text key ``profile=``, also ``target=``).
        chunk: rows per chunk of the run-time dispatch on a dynamic M, or
            ``None`` (auto: chosen by the cost model for ``scheme=auto``,
            ``DYNAMIC_CHUNK_M`` for a forced scheme); rounded up to a multiple
            of the plan's blocks along M (see
            :func:`falcon_mlir.passes.lcma_rewrite.dispatch.dynamic_choice`).
        dispatch: emit the run-time dispatch for dynamic sizes; ``None``
            (auto) means on (falcon-compile and the API turn it off for
            CUDA, where IREE 3.13 cannot bufferize the dispatch's dynamic
            slices; shown in the report's ``defaults``).
        sums: for a bf16/f16 result, the type the combined operands are
            formed in: ``"f32"``, ``"input"`` (the input type: one rounding
            of each sum) or ``"auto"`` (the input type where
            :func:`falcon_mlir.decision.numerics.narrow_sums_type` keeps the
            plan within the budget); products and combine C accumulate in
            f32 and C is rounded once whatever this says.
        products: for a bf16/f16 result with f32 sums, the operand types of
            the products: ``"f32"`` (a block used alone, coefficient 1, is
            extended to f32 once: every product is ``f32 x f32 -> f32``),
            ``"mixed"`` (such blocks stay in the input type: ``f32 x bf16 ->
            f32`` where one side is a single block) or ``"auto"`` (``f32``
            where the profile's f32 GEMM rate exceeds the input type's,
            else ``mixed``; :func:`.planning.products_type`). With input-type
            sums every product reads two input-type operands. Exact either
            way: an extension to f32 does not round.
        operands: kernel-form plans (CUDA): the type their combined operands
            and stored products are formed in: ``"auto"`` (scaled f16 for bf16
            inputs, :data:`falcon_mlir.decision.numerics.KERNEL_OPERAND_TYPES`;
            the input type otherwise), ``"input"`` (the input type: bf16
            operands for bf16, no absmax passes) or ``"f16"`` (scaled f16 for
            bf16 inputs). Carried to falcon-kernels in the plan attribute
            (``operands``); :func:`falcon_mlir.decision.numerics.kernel_operands`.
            Where no plan can be kernel-form (the profile's forms hold none:
            CPU profiles, ``h200-iree``) it changes nothing, and the pass says
            so in one warning line.
        filename: name used for the ``"-"`` buffer in report locations (not
            a text option).
    """

    PASS: ClassVar[str] = "lcma-rewrite"

    scheme: object = option(
        "auto", parse=_parse_scheme, metavar="auto|classical|NAME|NAME,NAME,...",
        help="the scheme, or one catalog name per level (`falcon-catalog list`; MxKxN:R with "
             "R = M*K*N is classical blocking); classical: IREE's one GEMM everywhere; auto: the "
             "cost model decides per contraction, against the best classical plan")
    levels: Optional[int] = option(
        None, type=int, auto=True, range=(1, MAX_LEVELS),
        help="number of levels (auto: the model tries 1..3; a forced scheme: 1)")
    edge: str = option(
        "auto", choices=("auto",) + EDGES,
        help="sizes the blocks do not divide: peel (remainders classical) or pad (zero-pad, "
             "slice back); auto: the model picks (peel for a forced scheme)")
    form: str = option(
        "auto", choices=("auto",) + FORMS,
        help="per-product (R contractions per level), grouped (levels composed, one op per "
             "combine, one batched product) or kernel (CUDA: the grouped plan as falcon's own "
             "generated kernels, left to the falcon-kernels pass); auto: the model picks among "
             "the profile's forms (per-product for a forced scheme)")
    barriers: Optional[bool] = option(
        None, type=bool, auto=True,
        help="put bare block operands and products behind iree_tensor_ext.compute_barrier.start (IREE data "
             "tiling needs it); auto: on (false: upstream dialects only, but data tiling then fails)")
    stack: Optional[bool] = option(
        None, type=bool, auto=True,
        help="multi-level per-product plans: true stacked (one batched contraction, compiles "
             "fast), false by recursion (R^L contractions, runs faster on CPU); auto: recursion "
             "on CPU profiles where the compile-cost model predicts it compiles fast, else stacked")
    max_error: Optional[float] = option(
        None, type=float, auto=True, range=(0, None), above=True,
        expect="auto or a relative error > 0 such as 1e-4",
        help="relative error budget per contraction; auto: the per-type default for auto plans, "
             "none for a forced scheme")
    profile: Optional[str] = option(
        None, parse=_parse_profile, aliases=("target",), metavar="host|PRESET|PROFILE.json",
        show=lambda v: "host" if v is None else str(v),
        help="the cost model's hardware profile: a preset (host, h200-iree, h200, a100, "
             "neoverse-n1, ...) or a JSON file from falcon-calibrate; $FALCON_PROFILE replaces "
             "host")
    chunk: Optional[int] = option(
        None, type=int, auto=True, range=(1, 2 ** 40), expect="auto or 1..2**40 rows",
        metavar="auto|ROWS",
        help="rows per chunk of the run-time dispatch on a dynamic M; auto: the cost model "
             "(2048 for a forced scheme)")
    dispatch: Optional[bool] = option(
        None, type=bool, auto=True,
        help="run-time dispatch for a dynamic M or batch dimension (false: dynamic "
             "contractions stay classical); auto: on (off for CUDA in falcon-compile, API)")
    sums: str = option(
        "auto", choices=("auto", "f32", "input"),
        help="bf16/f16 results (products and combine C always in f32, one rounding at the "
             "end): the type of the combined operands, f32 or the input type; auto: the input "
             "type where the error model keeps the plan within the budget, else f32")
    products: str = option(
        "auto", choices=("auto", "f32", "mixed"),
        help="bf16/f16 results with f32 sums: the products' operand types, f32 (blocks used "
             "alone extended to f32 once: every product f32 x f32) or mixed (they stay in the "
             "input type); auto: f32 where the profile's f32 GEMM is faster than the input "
             "type's, else mixed")
    operands: str = option(
        "auto", choices=OPERAND_CHOICES,
        help="kernel-form plans (CUDA): the type of the combined operands and products, input "
             "(the input type) or f16 (bf16 inputs: scaled by powers of two into f16's range); "
             "auto: scaled f16 for bf16 inputs (docs/accuracy.md, Scaled f16 operands), else "
             "the input type")
    filename: Optional[str] = None

    #: The option text that turns the pass off (falcon-opt ``--lcma-rewrite=none``,
    #: ``lcma-rewrite{none}``; falcon-compile ``--lcma-rewrite=none``; the API's ``lcma="none"``).
    OFF: ClassVar[str] = "none"
    #: The option text that names the defaults (falcon-opt ``--lcma-rewrite=auto``, the API's ``lcma="auto"``,
    #: falcon-compile's default): the same as no option at all.
    AUTO: ClassVar[str] = "auto"

    @classmethod
    def means_off(cls, text: Optional[str]) -> bool:
        """Whether option ``text`` is :data:`OFF` (braces, quotes and white space aside)."""
        return isinstance(text, str) and strip_text(text) == cls.OFF

    @classmethod
    def parse(cls, text: Optional[str]) -> "LcmaOptions":
        """Options from ``"scheme=strassen levels=2 edge=pad"`` (space separated;
        see :func:`falcon_mlir.options.parse_options`; :data:`AUTO` alone means the defaults).

        Raises:
            OptionError: unknown key, missing ``=``, a key given twice, levels
                not an integer in [1, 4], unknown edge or form, an unknown
                scheme name, a scheme list whose length differs from
                ``levels``, a profile that does not load.
        """
        return parse_options(cls, text)

    def validate(self) -> None:
        """Checks across options, after all are read (called by :meth:`parse`).

        Raises:
            OptionError: unknown scheme names, more than :data:`MAX_LEVELS`
                schemes, a scheme list whose length differs from ``levels``,
                an empty scheme list, or ``$FALCON_PROFILE`` naming a profile
                that does not load (checked before any rewriting).
        """
        from falcon_mlir.catalog import UnknownSchemeError, get_scheme

        if self.scheme == "classical":
            return
        if self.scheme != "auto":
            names = tuple(self.scheme)
            if not names:
                raise OptionError("lcma-rewrite option scheme= is empty (expected auto or catalog "
                                  "names; run `falcon-catalog list` for the valid names)")
            if len(names) > MAX_LEVELS:
                raise OptionError(f"lcma-rewrite: {len(names)} schemes given; at most {MAX_LEVELS} "
                                  "levels")
            for name in names:
                try:
                    get_scheme(name)
                except UnknownSchemeError as e:
                    raise OptionError(str(e)) from None
            if self.levels is not None and len(names) > 1 and len(names) != self.levels:
                raise OptionError(f"lcma-rewrite: {len(names)} schemes given for "
                                  f"levels={self.levels}")
        elif self.profile is None:
            from falcon_mlir.decision.profile import ProfileError, load_profile

            try:
                load_profile(None)  # $FALCON_PROFILE, checked before any rewriting
            except ProfileError as e:
                raise OptionError(f"lcma-rewrite: {e}") from None

    def forced_schemes(self) -> Optional[tuple]:
        """The per-level scheme names the user forced, or ``None`` for auto and
        ``classical`` (:meth:`keeps_classical`)."""
        if self.scheme in ("auto", "classical"):
            return None
        names = tuple(self.scheme)
        if len(names) == 1:
            return names * (self.levels or 1)
        return names

    def keeps_classical(self) -> bool:
        """``scheme=classical``: every contraction stays IREE's one GEMM."""
        return self.scheme == "classical"

    def edge_strategy(self) -> str:
        """``"peel"`` or ``"pad"`` (``auto`` peels)."""
        return "peel" if self.edge == "auto" else self.edge
