"""Pass registry and pipeline assembly: falcon's Python passes mixed with upstream ones.

IREE's ``iree-opt`` cannot load Python passes, so falcon's tools build an
``iree.compiler.passmanager.PassManager`` themselves: falcon's passes are
added as Python passes, every other element is handed to MLIR's textual
pipeline parser (upstream and IREE passes by name, nested pipelines such as
``func.func(cse)`` included).

Pipelines are written as in mlir-opt::

    builtin.module(lcma-rewrite{scheme=strassen levels=2},canonicalize,cse)
    builtin.module(lcma-rewrite{scheme=strassen},falcon-tiles{target=cuda-sm80})
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Optional

from iree.compiler import ir, passmanager

from falcon_mlir.passes.lcma_rewrite import LcmaOptions, OptionError, run_lcma_rewrite
from falcon_mlir.passes.falcon_tiles import TilesOptions, run_falcon_tiles


class PipelineError(ValueError):
    """A pipeline that does not parse: unknown pass, bad options, unbalanced braces."""


def parse_lcma_options(options_text: Optional[str]) -> LcmaOptions:
    """``LcmaOptions.parse`` plus the checks the tools need before any work.

    Raises:
        OptionError: as ``LcmaOptions.parse``; also an empty scheme list
            (``scheme=`` or ``scheme=,``), which the pass cannot run with.
    """
    opts = LcmaOptions.parse(options_text)
    if opts.scheme != "auto" and not tuple(opts.scheme):
        raise OptionError("lcma-rewrite option scheme= is empty (expected auto or catalog names; "
                          "run `falcon-catalog list` for the valid names)")
    return opts


def _lcma_factory(options_text: str, filename: Optional[str]):
    opts = parse_lcma_options(options_text)
    opts.filename = filename
    return opts


def _parse_upstream(elem: str) -> None:
    """``PassManager.parse`` of one element; LLVM's option parser writes some of
    its messages (a bad option value) straight to file descriptor 2, so that
    descriptor is captured and the text joined to the error.

    Raises:
        PipelineError: MLIR rejected the element.
    """
    native = ""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable fd 2: parse without capture
        saved = None
    err = None
    with ir.Context():
        if saved is None:
            try:
                passmanager.PassManager.parse(f"builtin.module({elem})")
            except ValueError as e:
                err = e
        else:
            with tempfile.TemporaryFile() as cap:
                os.dup2(cap.fileno(), 2)
                try:
                    passmanager.PassManager.parse(f"builtin.module({elem})")
                except ValueError as e:
                    err = e
                finally:
                    os.dup2(saved, 2)
                    os.close(saved)
                cap.seek(0)
                native = cap.read().decode("utf-8", "replace")
    if err is None:
        if native.strip():  # not ours to swallow: hand it on
            sys.stderr.write(native)
        return
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    first = [ln for ln in lines if "error:" in ln]
    msg = first[0].split("error:", 1)[1].strip() if first else (lines[0] if lines else "")
    extra = " ".join(native.split()).lstrip(": ")
    if extra and extra not in msg:
        msg = f"{msg}: {extra}" if msg else extra
    raise PipelineError(msg or f"cannot parse pass pipeline element '{elem}'")


def _tiles_factory(options_text: str, filename: Optional[str]):
    opts = TilesOptions.parse(options_text)
    opts.filename = filename
    return opts


#: falcon's own passes: name -> (options parser, runner(module_op, options) -> report list)
FALCON_PASSES = {
    "lcma-rewrite": (_lcma_factory, run_lcma_rewrite),
    "falcon-tiles": (_tiles_factory, run_falcon_tiles),
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
    _parse_upstream(elem)
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
                text = " ".join(str(e).split())
                if len(text) > 300:
                    text = text[:300] + " ..."
                self.errors.append(f"{st.name}: internal error: {type(e).__name__}: {text} "
                                   "(please report this with the input)")
                pass_.signal_pass_failure()

        run.__name__ = st.name.replace("-", "_")
        return run
