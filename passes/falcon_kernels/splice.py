"""Putting compiled kernels into a module: the executables at module level, one
private function per kernel (or plan) wrapping its ``flow.dispatch``es, and a
call of it in place of the contraction.

The executables and wrappers are parsed from the text that
:mod:`falcon_mlir.kernels.embed` and :mod:`falcon_mlir.kernels.lcma` write and
moved into the module; the call is built with the Python bindings. Modules
whose functions are ``util.func`` (IREE's input phase and later) get
``util.func``/``util.call``; plain ``func.func`` modules (falcon-opt input)
``func.func``/``func.call``. IREE inlines the wrappers.
"""

from __future__ import annotations

from typing import Dict

from iree.compiler import ir
from iree.compiler.dialects import arith, func

from falcon_mlir.ir.builders import cast, is_float, parallel_generic, tensor_type
from falcon_mlir.kernels.embed import executable_name, executable_source
from falcon_mlir.kernels.lcma import plan_dispatches, plan_executables
from falcon_mlir.kernels.embed import dispatch_text, tensor_type as type_text

__all__ = ["Splicer"]


class Splicer:
    """Adds kernels to one module and replaces contractions by calls.

    Args:
        module_op: the module's ``ir.Operation``.
        target_attr: the CUDA executable target attribute (the objects' key).
    """

    def __init__(self, module_op, target_attr: str):
        self.module = module_op
        self.target_attr = target_attr
        self.block = module_op.regions[0].blocks[0]
        self.util = any(op.operation.name == "util.func" for op in self.block.operations)
        self.symbols = {op.operation.attributes["sym_name"].value
                        for op in self.block.operations if "sym_name" in op.operation.attributes}
        self.wrappers: Dict[str, str] = {}

    # -- module-level text -------------------------------------------------------
    def _insert(self, text: str) -> None:
        """Parse ``text`` (top-level ops) in the module's context and put it first in the module."""
        parsed = ir.Module.parse("module {\n" + text + "\n}", context=self.module.context)
        first = self.block.operations[0]
        for op in list(parsed.body.operations):
            name = op.operation.attributes["sym_name"].value
            if name in self.symbols:
                continue
            op.operation.move_before(first)
            self.symbols.add(name)

    def _wrapper(self, name: str, args: str, lines: list, result: str, result_type: str) -> str:
        fn, ret = ("util.func", "util.return") if self.util else ("func.func", "return")
        body = "".join(f"  {ln}\n" for ln in lines)
        return (f"{fn} private @{name}({args}) -> {result_type} {{\n{body}"
                f"  {ret} {result} : {result_type}\n}}")

    def gemm_function(self, kernel) -> str:
        """The wrapper function's symbol for a compiled GEMM kernel (added once)."""
        exe = executable_name(kernel)
        name = exe + "_call"
        if name not in self.wrappers:
            s = kernel.spec
            a_t, b_t = type_text(s.a_shape, s.a_dtype), type_text(s.b_shape, s.b_dtype)
            c_t = type_text(s.c_shape, s.out_dtype)
            self._insert(executable_source(kernel, self.target_attr) + "\n" + self._wrapper(
                name, f"%a: {a_t}, %b: {b_t}", [dispatch_text(kernel, exe, "%a", "%b", "%r")],
                "%r#0", c_t))
            self.wrappers[name] = c_t
        return name

    def plan_function(self, plan) -> str:
        """The wrapper function's symbol for a compiled kernel-form plan (added once)."""
        name = "falcon_plan_" + plan.spec.name.replace("-", "_")
        if name not in self.wrappers:
            s = plan.spec
            a_t, b_t = type_text((s.M, s.K), s.dtype), type_text((s.K, s.N), s.dtype)
            c_t = type_text((s.M, s.N), s.out_dtype)
            lines, c = plan_dispatches(plan)
            self._insert(plan_executables(plan, self.target_attr) + "\n" + self._wrapper(
                name, f"%a: {a_t}, %b: {b_t}", lines, c, c_t))
            self.wrappers[name] = c_t
        return name

    # -- the call ----------------------------------------------------------------
    def replace(self, op, function: str, accumulate: bool) -> None:
        """Replace contraction ``op`` (operands A, B, C0) by a call of ``function``
        (plus ``C0 +`` the result when ``accumulate``)."""
        a, b, init = op.operands[0], op.operands[1], op.operands[2]
        rtype = op.results[0].type
        with op.location, ir.InsertionPoint(op):
            if self.util:
                call = ir.Operation.create("util.call", results=[rtype], operands=[a, b],
                                           attributes={"callee": ir.FlatSymbolRefAttr.get(function)})
            else:
                call = func.CallOp([rtype], ir.FlatSymbolRefAttr.get(function), [a, b])
            new = call.results[0]
            if accumulate:
                elem = tensor_type(init).element_type
                add = arith.addf if is_float(elem) else arith.addi
                new = parallel_generic([new], init, lambda args: add(args[1], cast(args[0], elem)))
        op.results[0].replace_all_uses_with(new)
        op.erase()
