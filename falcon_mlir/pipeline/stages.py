"""Stages: falcon's Python passes mixed with upstream ones in one pass pipeline.

IREE's ``iree-opt`` cannot load Python passes, so falcon builds an
``iree.compiler.passmanager.PassManager`` itself: falcon's passes
(:data:`falcon_mlir.passes.registry.PASSES`) are added as Python passes,
every other element is handed to MLIR's textual pipeline parser (upstream
and IREE passes by name, nested pipelines such as ``func.func(cse)``
included). falcon-opt runs the stages it parses from its command line;
falcon-compile and the Python API run the stages that
:mod:`falcon_mlir.pipeline.assemble` builds between two IREE phases.

Pipelines are written as in mlir-opt::

    builtin.module(lcma-rewrite{scheme=strassen levels=2},canonicalize,cse)
    builtin.module(lcma-rewrite{scheme=strassen},falcon-tiles{table=cuda-sm80})
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Optional

from iree.compiler import ir, passmanager

from falcon_mlir.options import OptionError
from falcon_mlir.passes import PassError
from falcon_mlir.passes.registry import PASSES, parse_pass_options

__all__ = ["PipelineError", "Stage", "Pipeline", "split_top_level", "parse_element",
           "parse_pipeline", "merge_kernel_entries"]


class PipelineError(ValueError):
    """A pipeline that does not parse: unknown pass, bad options, unbalanced braces."""


@dataclass
class Stage:
    """One pipeline element: a falcon pass (``options`` set) or upstream text.

    Attributes:
        name: the pass name (``lcma-rewrite``, ``canonicalize``, ...).
        text: the element as written (upstream stages are added by it).
        options: the falcon pass's options object (``None`` for upstream).
        when: run the stage only if ``when(report so far)`` is true (``None``:
            always); the pipeline is cut into pass managers at such stages.
        report_extra: keys added to each report entry of this stage (e.g.
            the ``defaults`` a target implied).
    """

    name: str
    text: str
    options: object = None
    when: Optional[Callable[[list], bool]] = None
    report_extra: dict = field(default_factory=dict)

    @property
    def is_falcon(self) -> bool:
        """Whether this stage is one of falcon's Python passes."""
        return self.name in PASSES


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
    A falcon pass whose options turn it off (``lcma-rewrite{none}``) is a
    stage with ``options`` ``None`` that never runs.

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
    if name in PASSES:
        off = getattr(PASSES[name].options, "means_off", None)
        if off is not None and off(opts):  # lcma-rewrite{none}: kept, never run (options None)
            return Stage(name, elem, None, when=lambda report: False)
        try:
            return Stage(name, elem, parse_pass_options(name, opts, filename))
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


def _shape(e: dict) -> tuple:
    return (e.get("M"), e.get("N"), e.get("K"), tuple(e.get("batch") or ()),
            tuple(sorted((e.get("element_types") or {}).items())))


def merge_kernel_entries(report: list, entries: list) -> None:
    """falcon-kernels' entries join the lcma-rewrite entry of their contraction
    (as its ``kernels`` list: the contraction itself, or the products its plan
    emitted); entries with no lcma-rewrite entry are appended as they are.

    Several contractions may share a location (a layer written once and
    called in a loop, ops without locations), so location alone does not say
    whose an entry is. Both passes list contractions in the module's order,
    and a rewrite's products stand where their contraction stood: a kernel
    entry of the same location and shape (sizes, batch, types) is the next
    such contraction that is still an op (kept classical, handed to
    falcon-kernels in the kernel form, or the original op a run-time dispatch
    keeps); any other is a product of the next rewritten contraction of that
    location with products still unaccounted for (its ``products`` count).
    """
    by_loc: dict = {}
    for e in report:
        by_loc.setdefault(e.get("location"), []).append(e)
    own: set = set()
    products: dict = {}

    def still_an_op(e):
        return e.get("plan") == "classical" or "handoff" in e or "dispatch" in e

    for k in entries:
        cands = by_loc.get(k.get("location"))
        if not cands:
            report.append(k)
            continue
        target = next((e for e in cands if id(e) not in own and still_an_op(e)
                       and _shape(e) == _shape(k)), None)
        if target is not None:
            own.add(id(target))
        else:
            target = next((e for e in cands if e.get("plan") != "classical" and "handoff" not in e
                           and products.get(id(e), 0) < (e.get("products") or 0)), cands[0])
            products[id(target)] = products.get(id(target), 0) + 1
        target.setdefault("kernels", []).append(
            {key: v for key, v in k.items() if key not in ("location", "op")})


@dataclass
class Pipeline:
    """An ordered list of stages run on a module, collecting falcon reports.

    Attributes:
        stages: the :class:`Stage` list.
        report: after :meth:`run`, the report entries of every falcon pass.
        stage_reports: after :meth:`run`, ``(stage, entries)`` per falcon pass run.
        errors: one line per falcon pass that raised (``NAME: internal error: ...``,
            or a :class:`~falcon_mlir.passes.PassError`'s message).
        error_locations: per line of ``errors``, the ``file:line:col`` it concerns, or None.
        exceptions: the exceptions those passes raised.
    """

    stages: list
    report: list = field(default_factory=list)
    stage_reports: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    error_locations: list = field(default_factory=list)
    exceptions: list = field(default_factory=list)

    def build(self, stages: Optional[list] = None, verify_each: bool = True,
              print_after_all: bool = False,
              print_before_all: bool = False) -> passmanager.PassManager:
        """A ``PassManager`` of ``stages`` (default: all; ``when`` is not looked
        at) for the current context (call inside ``with ctx``)."""
        pm = passmanager.PassManager("builtin.module")
        pm.enable_verifier(verify_each)
        if print_after_all or print_before_all:
            pm.enable_ir_printing(print_before_all=print_before_all,
                                  print_after_all=print_after_all)
        for st in self.stages if stages is None else stages:
            if st.is_falcon:
                pm.add(self._python_pass(st), name=st.name, argument=st.name)
            else:
                pm.add(st.text)
        return pm

    def run(self, module_op, *, verify_each: bool = True, print_after_all: bool = False,
            print_before_all: bool = False, reraise: bool = False) -> list:
        """Run the stages on ``module_op`` (in its context); returns :attr:`report`.

        Consecutive stages without ``when`` share one pass manager; a stage
        with ``when`` starts a new one and runs only if ``when(report so
        far)`` holds.

        Raises:
            ir.MLIRError: a pass failed or the IR does not verify (falcon
                passes that raised are in :attr:`errors`).
            Exception: with ``reraise``, the exception a falcon pass raised,
                as it was (for callers that report it themselves).
        """
        op = module_op.operation if hasattr(module_op, "operation") else module_op
        groups: list = []
        for st in self.stages:
            if st.when is not None or not groups:
                groups.append([st])
            else:
                groups[-1].append(st)
        for group in groups:
            if group[0].when is not None and not group[0].when(self.report):
                group = group[1:]
            if not group:
                continue
            pm = self.build(group, verify_each, print_after_all, print_before_all)
            try:
                pm.run(op)
            except ir.MLIRError:
                if reraise and self.exceptions:
                    raise self.exceptions[0] from None
                raise
        return self.report

    def joined_report(self) -> list:
        """The report with falcon-kernels' entries joined to the entries of the
        contractions they concern (:func:`merge_kernel_entries`; standalone
        where no earlier pass has an entry for the contraction): one entry per
        contraction, as falcon-compile's report."""
        out: list = []
        for st, entries in self.stage_reports:
            if st.name == "falcon-kernels":
                merge_kernel_entries(out, [dict(e) for e in entries])
            else:
                out.extend(entries)
        return out

    def _python_pass(self, st: Stage) -> Callable:
        runner = PASSES[st.name].run

        def run(op, pass_):
            try:
                entries = runner(op, st.options)
            except PassError as e:  # the input's or the environment's: one line, no "internal"
                self.errors.append(e.message)
                self.error_locations.append(e.location)
                self.exceptions.append(e)
                pass_.signal_pass_failure()
                return
            except Exception as e:  # reported as one line by the driver
                text = " ".join(str(e).split())
                if len(text) > 300:
                    text = text[:300] + " ..."
                self.errors.append(f"{st.name}: internal error: {type(e).__name__}: {text} "
                                   "(please report this with the input)")
                self.error_locations.append(None)
                self.exceptions.append(e)
                pass_.signal_pass_failure()
                return
            for e in entries:  # a copy each: entries are the caller's to change
                e.update({k: dict(v) if isinstance(v, dict) else v
                          for k, v in st.report_extra.items()})
            self.report.extend(entries)
            self.stage_reports.append((st, entries))

        run.__name__ = st.name.replace("-", "_")
        return run
