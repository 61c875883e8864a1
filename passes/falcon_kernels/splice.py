"""Putting compiled kernels into a module: the executables at module level, one
private function per kernel (or plan) wrapping its ``flow.dispatch``es, and a
call of it in place of the contraction.

The executables and wrappers are parsed from the text that
:mod:`falcon_mlir.kernels.embed` and :mod:`falcon_mlir.kernels.lcma` (CUDA)
and :mod:`falcon_mlir.kernels.cpu_embed` (falcon's CPU kernel) write and
moved into the module; the call is built with the Python bindings. Modules
whose functions are ``util.func`` (IREE's input phase and later) get
``util.func``/``util.call``; plain ``func.func`` modules (falcon-opt input)
``func.func``/``func.call``. IREE inlines the wrappers.
"""

from __future__ import annotations

import hashlib
from typing import Dict, Optional

from iree.compiler import ir
from iree.compiler.dialects import arith, func

from falcon_mlir.ir.builders import cast, is_float, parallel_generic, tensor_type
from falcon_mlir.kernels.embed import executable_name, executable_source
from falcon_mlir.kernels.lcma import plan_dispatches, plan_executables
from falcon_mlir.kernels.embed import dispatch_text, tensor_type as type_text
from falcon_mlir.passes import PassError

__all__ = ["Splicer", "SymbolClashError", "module_splicer"]


class SymbolClashError(PassError):
    """The module already holds a symbol of the name a kernel's executable or
    wrapper needs, and it is not that same op (names carry a content hash, so
    an equal op is the same kernel, e.g. from an earlier run of the pass)."""


def _symbol_part(scheme: str) -> str:
    """A scheme name as part of an MLIR symbol (a bare identifier: letters, digits, ``_$.``):
    ``strassen^2`` -> ``strassenp2``, ``strassen*2x2x3:11`` -> ``strassen_2x2x3_11``, whitespace
    dropped, any other character ``_``. Were: only ``^*:`` replaced, so the catalog's own name of
    Winograd's scheme, ``2x2x2:7-winograd``, or a plan written ``strassen * winograd``, made a wrapper
    name IREE's parser rejects (falcon-kernels: internal error, nothing written)."""
    s = "".join(scheme.split()).replace("^", "p").replace("*", "_")
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in s)


def _layout_part(trans_a: bool, trans_b: bool, batch: int) -> str:
    """The part of a CPU kernel wrapper's symbol that names its layout: ``_b<batch>`` above 1, ``_ta``
    (A stored K x M), ``_tb`` (B stored N x K); ``""`` for the plain one."""
    return (f"_b{batch}" if batch > 1 else "") + ("_ta" if trans_a else "") + ("_tb" if trans_b else "")


def _own_entry_functions(text: str, exe: str, context) -> tuple:
    """``(text, renamed)``: ``stream.executable`` text with each export and its function renamed
    ``{exe}_{name}``, and ``{old: new}``. IREE links the executables of one llvm-cpu target into one,
    whose functions must differ: two blockings of falcon's CPU kernel in one module each had a public
    ``@pack_b`` ("multiple public symbols with the name: pack_b"); an export under another name than
    its function (``@f as("pack_b")``) crashed iree-compile 3.13 (SpecializeEncodings)."""
    parsed = ir.Module.parse("module {\n" + text + "\n}", context=context)
    renamed = {}
    for exe_op in parsed.body.operations:
        ops = list(exe_op.regions[0].blocks[0].operations)
        funcs = {f.operation.attributes["sym_name"].value: f.operation
                 for m in ops if m.operation.name == "builtin.module"
                 for f in m.regions[0].blocks[0].operations if "sym_name" in f.operation.attributes}
        for op in ops:
            if op.operation.name != "stream.executable.export":
                continue
            old = ir.FlatSymbolRefAttr(op.operation.attributes["function_ref"]).value
            new = renamed[old] = f"{exe}_{old}"
            op.operation.attributes["function_ref"] = ir.FlatSymbolRefAttr.get(new, context=context)
            op.operation.attributes["sym_name"] = ir.StringAttr.get(new, context=context)
            funcs[old].attributes["sym_name"] = ir.StringAttr.get(new, context=context)
    return "\n".join(str(op) for op in parsed.body.operations), renamed


class Splicer:
    """Adds kernels to one module and replaces contractions by calls.

    Args:
        module_op: the module's ``ir.Operation``.
        target_attr: the executable target attribute (the objects' key): CUDA's for the CUDA
            kernels, llvm-cpu's for the CPU kernel (one splicer serves one target).
    """

    def __init__(self, module_op, target_attr: str):
        self.module = module_op
        self.target_attr = target_attr
        self.block = module_op.regions[0].blocks[0]
        self.util = any(op.operation.name == "util.func" for op in self.block.operations)
        self.symbols = {op.operation.attributes["sym_name"].value: op.operation
                        for op in self.block.operations if "sym_name" in op.operation.attributes}
        self.wrappers: Dict[tuple, str] = {}
        self.executables: Dict[tuple, str] = {}

    # -- module-level text -------------------------------------------------------
    def _insert(self, text: str) -> None:
        """Parse ``text`` (top-level ops) in the module's context and put it first in the module.

        An op whose symbol the module already holds is not added again when
        the one there is the same op (printed alike).

        Raises:
            SymbolClashError: the module holds another op under that symbol.
        """
        parsed = ir.Module.parse("module {\n" + text + "\n}", context=self.module.context)
        first = self.block.operations[0]
        for op in list(parsed.body.operations):
            name = op.operation.attributes["sym_name"].value
            old = self.symbols.get(name)
            if old is not None:
                if str(old) != str(op.operation):
                    raise SymbolClashError(
                        f"falcon-kernels: the module already holds a symbol @{name} that is not "
                        "falcon's kernel of that name; rename it")
                continue
            op.operation.move_before(first)
            self.symbols[name] = op.operation

    def _wrapper(self, name: str, args: str, lines: list, result: str, result_type: str) -> str:
        fn, ret = ("util.func", "util.return") if self.util else ("func.func", "return")
        body = "".join(f"  {ln}\n" for ln in lines)
        return (f"{fn} private @{name}({args}) -> {result_type} {{\n{body}"
                f"  {ret} {result} : {result_type}\n}}")

    @staticmethod
    def _name(base: str, types: tuple, canonical: tuple) -> str:
        """``base``, or ``base`` with a short hash of ``types`` where they are
        not the spec's own (e.g. a unit batch dimension): one wrapper per signature."""
        if types == canonical:
            return base
        return base + "_" + hashlib.sha256(" ".join(types).encode()).hexdigest()[:8]

    def gemm_function(self, kernel, types: Optional[tuple] = None) -> str:
        """The wrapper function's symbol for a compiled GEMM kernel (added once per signature).

        ``types``: A, B and C's tensor types as the contraction holds them
        (default the spec's; they differ by unit dimensions, e.g. a batch of 1).
        """
        exe = executable_name(kernel)
        s = kernel.spec
        canonical = (type_text(s.a_shape, s.a_dtype), type_text(s.b_shape, s.b_dtype),
                     type_text(s.c_shape, s.out_dtype))
        types = tuple(types or canonical)
        key = (exe, types)
        if key not in self.wrappers:
            name = self._name(exe + "_call", types, canonical)
            a_t, b_t, c_t = types
            self._insert(executable_source(kernel, self.target_attr) + "\n" + self._wrapper(
                name, f"%a: {a_t}, %b: {b_t}",
                [dispatch_text(kernel, exe, "%a", "%b", "%r", types=types)], "%r#0", c_t))
            self.wrappers[key] = name
        return self.wrappers[key]

    def plan_function(self, plan, types: Optional[tuple] = None) -> str:
        """The wrapper function's symbol for a compiled kernel-form plan (added once per signature).

        ``types``: as for :meth:`gemm_function` (default ``M x K``, ``K x N``, ``M x N``).
        """
        s = plan.spec
        canonical = (type_text((s.M, s.K), s.dtype), type_text((s.K, s.N), s.dtype),
                     type_text((s.M, s.N), s.out_dtype))
        types = tuple(types or canonical)
        # The kernels' keys name the wrapper: a plan compiled otherwise (another
        # Triton, other tiles) is another wrapper, never a clash.
        digest = hashlib.sha256("".join(k.key for k in plan.kernels).encode()).hexdigest()[:8]
        key = ("plan", digest, types)
        if key not in self.wrappers:
            name = self._name(f"falcon_plan_{plan.spec.name.replace('-', '_')}_{digest}", types, canonical)
            a_t, b_t, c_t = types
            lines, c = plan_dispatches(plan, types=types)
            self._insert(plan_executables(plan, self.target_attr) + "\n" + self._wrapper(
                name, f"%a: {a_t}, %b: {b_t}", lines, c, c_t))
            self.wrappers[key] = name
        return self.wrappers[key]

    def _cpu_executable(self, obj, config) -> tuple:
        """``(symbol, renamed exports)`` of the executable of CPU kernel object ``obj`` (blocking ``config``),
        added once per (object, config), keyed by this splicer's llvm-cpu target."""
        from falcon_mlir.kernels import cpu_embed

        exe_key = ("cpu", str(obj), config)
        if exe_key not in self.executables:
            # Named by the blocking and a hash of the executable's text (object path, target, blocking).
            digest = hashlib.sha256(cpu_embed.executable_text("falcon_cpu_sgemm", obj, self.target_attr,
                                                              config).encode()).hexdigest()[:8]
            c = config
            name = f"falcon_cpu_sgemm_{c.mr}x{c.nr}_k{c.kc}_{c.mc}x{c.nc}_p{c.pack_rows}_{digest}"
            text, renamed = _own_entry_functions(cpu_embed.executable_text(name, obj, self.target_attr, config),
                                                 name, self.module.context)
            self._insert(text)
            self.executables[exe_key] = name, renamed
        return self.executables[exe_key]

    def _cpu_wrapper(self, key: tuple, base: str, exe: str, renamed: dict, lines: list, result: str,
                     types: tuple, canonical: tuple) -> str:
        """Add (once per ``key``) the wrapper running ``lines`` (dispatches of ``@exe``'s exports by their
        generic names, renamed here) whose C is ``result``; its symbol."""
        if key not in self.wrappers:
            name = self._name(base, types, canonical)
            a_t, b_t, c_t = types
            called = [old for old in renamed if any(f"@{exe}::@{old}[" in ln for ln in lines)]
            assert called, f"no dispatch of @{exe}'s exports in the wrapper's lines"
            for old in called:  # the exports' own names (see _own_entry_functions)
                lines = [ln.replace(f"@{exe}::@{old}[", f"@{exe}::@{renamed[old]}[") for ln in lines]
            if c_t != canonical[2]:  # the op's C has unit dimensions: the same buffer, reshaped
                lines = lines + [f"%c = flow.tensor.reshape {result} : {canonical[2]} -> {c_t}"]
                result = "%c"
            self._insert(self._wrapper(name, f"%a: {a_t}, %b: {b_t}", lines, result, c_t))
            self.wrappers[key] = name
        return self.wrappers[key]

    def cpu_function(self, obj, config, M: int, N: int, K: int, types: Optional[tuple] = None,
                     trans_a: bool = False, trans_b: bool = False, batch: int = 1) -> str:
        """The wrapper function's symbol for ``C = A @ B`` (f32, ``M x K`` times ``K x N``; A stored
        ``K x M`` where ``trans_a``, B ``N x K`` where ``trans_b``; ``batch`` of them, a leading
        dimension of all three) on falcon's CPU kernel: the executable of object file ``obj`` (built
        for blocking ``config``, :func:`falcon_mlir.kernels.cpu_source.compile_object`) is added once
        per (object, config), keyed by this splicer's llvm-cpu target; the wrapper (two
        ``flow.dispatch``: pack B, then the GEMM, :func:`falcon_mlir.kernels.cpu_embed.dispatch_lines`)
        once per signature, named ``<executable>_<M>x<N>x<K>[_b<batch>][_ta][_tb]_call``.

        ``types``: A, B and C's tensor types as the contraction holds them (default the stored shapes,
        :func:`falcon_mlir.kernels.cpu_embed.gemm_spec`; any shapes of those buffers, e.g. with unit
        dimensions: C is reshaped from ``(batch x) M x N``).

        Raises:
            ValueError: the object's path cannot be linked by IREE (see
                :func:`falcon_mlir.kernels.cpu_embed.executable_text`).
            SymbolClashError: the module holds another op under the executable's or wrapper's name.
        """
        from falcon_mlir.kernels import cpu_embed

        spec = cpu_embed.gemm_spec(M, N, K, trans_a, trans_b, batch)
        canonical = tuple(type_text(x, "f32") for x in (spec.a_shape, spec.b_shape, spec.c_shape))
        types = tuple(types or canonical)
        exe, renamed = self._cpu_executable(obj, config)
        lines = cpu_embed.dispatch_lines(exe, M, N, K, config, types=types[:2], trans_a=trans_a, trans_b=trans_b,
                                         batch=batch)
        base = f"{exe}_{M}x{N}x{K}{_layout_part(trans_a, trans_b, batch)}_call"
        return self._cpu_wrapper((exe, M, N, K, trans_a, trans_b, batch, types), base, exe, renamed, lines, "%r#0",
                                 types, canonical)

    def cpu_plan_function(self, obj, plan, types: Optional[tuple] = None) -> str:
        """The wrapper function's symbol for ``C = A @ B`` by LCMA plan ``plan``
        (:class:`falcon_mlir.kernels.cpu_plan.CpuPlan`: ``2 R`` dispatches, or ``R`` where its products pack
        B inside, the combines inside the kernel; its layout and batch as the plan's) on falcon's CPU
        kernel object ``obj`` (built for ``plan.config``); ``types`` as for :meth:`cpu_function`.

        Raises:
            as :meth:`cpu_function`.
        """
        from falcon_mlir.kernels import cpu_plan

        p = plan
        canonical = tuple(type_text(x, "f32") for x in (p.spec.a_shape, p.spec.b_shape, p.spec.c_shape))
        types = tuple(types or canonical)
        exe, renamed = self._cpu_executable(obj, p.config)
        lines, result = cpu_plan.plan_dispatch_lines(exe, p, types=types[:2])
        base = f"{exe}_{_symbol_part(p.scheme)}_{p.M}x{p.N}x{p.K}{_layout_part(p.trans_a, p.trans_b, p.batch)}_call"
        return self._cpu_wrapper((exe, p.scheme, p.M, p.N, p.K, p.trans_a, p.trans_b, p.batch, p.b_inside, types),
                                 base, exe, renamed, lines, result, types, canonical)

    # -- the call ----------------------------------------------------------------
    def replace(self, op, function: str, accumulate: bool, operands: Optional[tuple] = None) -> None:
        """Replace contraction ``op`` (operands A, B, C0) by a call of ``function``
        (plus ``C0 +`` the result when ``accumulate``); ``operands``: the call's
        A and B (default the op's)."""
        a, b = operands or (op.operands[0], op.operands[1])
        init = op.operands[2]
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


def module_splicer(op, root, splicers: dict, target_attr: str) -> Splicer:
    """The :class:`Splicer` of the module ``op`` is in (made once, kept in ``splicers``; ``root`` where
    ``op`` has no module around it): a nested module's functions cannot call symbols of the module
    around it, so each module gets its own executables and wrappers."""
    m = op.parent
    while m is not None and m.name != "builtin.module":
        m = m.parent
    m = (m or root).operation
    for known, sp in splicers.items():
        if known == m:
            return sp
    splicers[m] = Splicer(m, target_attr)
    return splicers[m]
