"""falcon's passes by name (like mlir-opt's pass registry).

Each pass has a name, an options dataclass declared with
:mod:`falcon_mlir.options` and a runner ``run(module_op, options) -> report
entries``. The stage machinery (:mod:`falcon_mlir.pipeline.stages`) adds them
to a pass manager as Python passes; falcon-opt's ``--help`` lists their
options from the declarations (:func:`pass_help`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from falcon_mlir.options import format_help, option_specs, parse_options

from .empty_reduction import EmptyReductionOptions, run_empty_reduction
from .falcon_kernels import KernelsOptions, run_falcon_kernels
from .falcon_tiles import TilesOptions, run_falcon_tiles
from .lcma_rewrite import LcmaOptions, run_lcma_rewrite

__all__ = ["PassInfo", "PASSES", "parse_pass_options", "pass_help"]


@dataclass(frozen=True)
class PassInfo:
    """One registered pass.

    Attributes:
        name: the pass's name (``--NAME`` and ``NAME{...}`` in a pipeline).
        options: its options dataclass (:mod:`falcon_mlir.options`).
        run: ``run(module_op, options) -> list of report dicts``.
        summary: what it does, for ``--help`` (a few lines).
    """

    name: str
    options: type
    run: Callable
    summary: str


#: falcon's passes, in the order ``--help`` lists them.
PASSES = {p.name: p for p in (
    PassInfo("lcma-rewrite", LcmaOptions, run_lcma_rewrite,
             "rewrite contractions with LCMA schemes; OPTIONS is none (the pass does not run) or "
             "a space-separated list of key=value:"),
    PassInfo("falcon-kernels", KernelsOptions, run_falcon_kernels,
             "run contractions (and kernel-form plans) as falcon's generated CUDA kernels "
             "(Triton, sm_90a, embedded in the module; needs the cuda extra), or classical "
             "f32 GEMMs as falcon's CPU kernel (x86-avx512 or x86-avx2; needs gcc):"),
    PassInfo("falcon-tiles", TilesOptions, run_falcon_tiles,
             "attach CUDA tile choices (compilation_info) to contractions and to the "
             "rewrite's combines:"),
    PassInfo("empty-reduction", EmptyReductionOptions, run_empty_reduction,
             "replace each contraction whose reduction (K) has the static size 0 by its init "
             "(IREE 3.13 crashes on them; lcma-rewrite does it too, falcon-compile runs this "
             "pass where lcma-rewrite is off)"),
)}


def parse_pass_options(name: str, text: Optional[str], filename: Optional[str] = None):
    """The options object of pass ``name`` from its option text, with
    ``filename`` (the name for the ``-`` buffer in report locations).

    Raises:
        KeyError: ``name`` is not a falcon pass.
        OptionError: the text does not parse.
    """
    opts = parse_options(PASSES[name].options, text)
    opts.filename = filename
    return opts


def pass_help(flag_width: int = 26, width: int = 79) -> list:
    """``--NAME[=OPTIONS]`` lines for every falcon pass (``--NAME`` for one without
    options): its summary, then its options (generated from their declarations)."""
    import textwrap

    lines = []
    for p in PASSES.values():
        flag = (f"  --{p.name}" + ("[=OPTIONS]" if option_specs(p.options) else "")).ljust(flag_width + 2)
        summary = textwrap.wrap(p.summary, width=width - len(flag))
        lines.append(flag + summary[0])
        lines += [" " * len(flag) + s for s in summary[1:]]
        lines += format_help(p.options, indent=len(flag) + 2, width=width)
    return lines
