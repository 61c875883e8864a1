"""Pass registry and pipeline assembly: falcon's Python passes mixed with upstream ones.

IREE's ``iree-opt`` cannot load Python passes, so falcon's tools build an
``iree.compiler.passmanager.PassManager`` themselves: falcon's passes are
added as Python passes, every other element is handed to MLIR's textual
pipeline parser (upstream and IREE passes by name, nested pipelines such as
``func.func(cse)`` included).

Pipelines are written as in mlir-opt::

    builtin.module(lcma-rewrite{scheme=strassen levels=2},canonicalize,cse)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from iree.compiler import ir, passmanager

from falcon_mlir.passes.lcma_rewrite import LcmaOptions, OptionError, run_lcma_rewrite


class PipelineError(ValueError):
    """A pipeline that does not parse: unknown pass, bad options, unbalanced braces."""


def _lcma_factory(options_text: str, filename: Optional[str]):
    opts = LcmaOptions.parse(options_text)
    opts.filename = filename
    return opts


#: falcon's own passes: name -> (options parser, runner(module_op, options) -> report list)
FALCON_PASSES = {
    "lcma-rewrite": (_lcma_factory, run_lcma_rewrite),
}


@dataclass
class Stage:
    """One pipeline element: a falcon pass (``options`` set) or upstream text."""

    name: str
    text: str
    options: object = None

    @property
    def is_falcon(self) -> bool:
        return self.name in FALCON_PASSES


def split_top_level(text: str) -> list:
    """Split ``a,b{x=1,y=2},c(d,e)`` at commas outside braces and parentheses.

    Raises:
        PipelineError: unbalanced brackets.
    """
    parts, cur = [], []
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for ch in text:
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in pairs.values():
            if not stack or stack.pop() != ch:
                raise PipelineError(f"unbalanced '{ch}' in pass pipeline '{text}'")
        if ch == "," and not stack:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if stack:
        raise PipelineError(f"unbalanced brackets in pass pipeline '{text}'")
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return [p for p in parts if p]


def parse_element(elem: str, filename: Optional[str] = None) -> Stage:
    """One pipeline element (``name``, ``name{opts}`` or ``anchor(...)``) as a :class:`Stage`.

    Raises:
        PipelineError: an unknown falcon option or an upstream pass MLIR does not know.
    """
    elem = elem.strip()
    name = elem
    opts = ""
    for i, ch in enumerate(elem):
        if ch in "{(":
            name = elem[:i]
            if ch == "{":
                if not elem.endswith("}"):
                    raise PipelineError(f"malformed pass options in '{elem}'")
                opts = elem[i + 1:-1]
            break
    if name in FALCON_PASSES:
        try:
            return Stage(name, elem, FALCON_PASSES[name][0](opts, filename))
        except OptionError as e:
            raise PipelineError(str(e)) from None
    with ir.Context():
        try:
            passmanager.PassManager.parse(f"builtin.module({elem})")
        except ValueError as e:
            first = [ln for ln in str(e).splitlines() if "error:" in ln]
            msg = first[0].split("error:", 1)[1].strip() if first else str(e).splitlines()[0]
            raise PipelineError(msg) from None
    return Stage(name, elem)


def parse_pipeline(text: str, filename: Optional[str] = None) -> list:
    """Parse ``builtin.module(a,b,...)`` (the anchor is optional) into stages.

    Raises:
        PipelineError: see :func:`parse_element`.
    """
    text = text.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        text = text[len("builtin.module("):-1]
    return [parse_element(e, filename) for e in split_top_level(text)]


@dataclass
class Pipeline:
    """An ordered list of stages run on a module, collecting falcon reports.

    Attributes:
        stages: the :class:`Stage` list.
        report: after :meth:`run`, the report entries of every falcon pass.
    """

    stages: list
    report: list = field(default_factory=list)

    def build(self, verify_each: bool = True, print_after_all: bool = False,
              print_before_all: bool = False) -> passmanager.PassManager:
        """A ``PassManager`` for the current context (call inside ``with ctx``)."""
        pm = passmanager.PassManager("builtin.module")
        pm.enable_verifier(verify_each)
        if print_after_all or print_before_all:
            pm.enable_ir_printing(print_before_all=print_before_all,
                                  print_after_all=print_after_all)
        self.errors = []
        for st in self.stages:
            if st.is_falcon:
                pm.add(self._python_pass(st), name=st.name, argument=st.name)
            else:
                pm.add(st.text)
        return pm

    def _python_pass(self, st: Stage) -> Callable:
        runner = FALCON_PASSES[st.name][1]

        def run(op, pass_):
            try:
                self.report.extend(runner(op, st.options))
            except Exception as e:  # reported as one line by the driver
                self.errors.append(f"{st.name}: {type(e).__name__}: {e}")
                pass_.signal_pass_failure()

        run.__name__ = st.name.replace("-", "_")
        return run
