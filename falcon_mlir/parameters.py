"""Model weights as IREE parameters: arguments of a function made module globals that IREE loads
from a parameter provider, as IREE deploys a model (its weights in a parameter archive, not passed
on every call).

With the weights as immutable globals (``util.global private @w = #flow.parameter.named<"scope"::"key">``,
IREE 3.13), IREE's global optimization hoists everything computed from them alone into the module's
initializer, run once when the module is loaded: its data-tiling packs of the weights, and lcma-rewrite's
combines of B (falcon's ``Problem.const_rhs``). A call then does only the work that depends on its
inputs.

:func:`with_weight_parameters` rewrites the MLIR (through the MLIR Python bindings);
:func:`parameter_types` lists what such a module reads; :func:`parameters_module` makes the
``iree.runtime`` module that serves numpy arrays under those keys (checked against those types; IREE
reads them when the compiled module loads); :class:`falcon_mlir.runner.Module` loads it before the
compiled module; :func:`write_archive` writes them as an ``.irpa`` file for IREE's tools.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional, Sequence

__all__ = ["DEFAULT_SCOPE", "GLOBAL_PREFIX", "with_weight_parameters", "parameter_types", "parameters_module",
           "write_archive", "weight_keys"]

#: The parameter scope :func:`with_weight_parameters` and :func:`parameters_module` use by default.
DEFAULT_SCOPE = "model"
#: The prefix of the globals :func:`with_weight_parameters` makes (``@falcon_param_<key>``).
GLOBAL_PREFIX = "falcon_param_"


def _check_name(what: str, v) -> None:
    """A key or scope: a non-empty printable string without ``"`` or ``\\`` (it goes into an attribute)."""
    if not (isinstance(v, str) and v and v.isprintable() and '"' not in v and "\\" not in v):
        raise ValueError(f"with_weight_parameters: {what} must be a non-empty printable string without "
                         f"'\"' or '\\', got {v!r}")


def with_weight_parameters(text: str, keys: Mapping[int, str], func: str = "main",
                           scope: str = DEFAULT_SCOPE) -> str:
    """``text`` with the arguments of ``func`` numbered in ``keys`` (0-based) turned into module
    globals backed by IREE parameters ``scope::keys[i]``: each becomes ``util.global private
    @falcon_param_<key> = #flow.parameter.named<"scope"::"key"> : T`` and a ``util.global.load`` at the
    start of ``func``'s body; the argument (and its attributes) leaves the signature, the others keep
    their order. Works on any input IREE imports (StableHLO, linalg).

    Args:
        text: MLIR module text (the generic or custom form; IREE's dialects and StableHLO parse).
        keys: argument index (int) -> parameter key (unique).
        func: the ``func.func`` to change (with a body; not called by other functions).
        scope: the parameter scope (:func:`parameters_module` serves the same one).

    Returns:
        The module's text with the globals added.

    Raises:
        ValueError: the text does not parse (the parser's message); no ``func.func @func`` or one
            without a body; an index not an int or out of its argument range; an argument not a
            tensor of static shape; repeated keys, or a key or ``scope`` empty, not printable or
            holding ``"`` or ``\\``; a global of that name exists; the module does not verify after
            the change (e.g. other functions call ``func`` with the weights).
    """
    from iree.compiler import ir

    for k in keys.values():
        _check_name("a parameter key", k)
    _check_name("the scope", scope)
    if len(set(keys.values())) != len(keys):
        raise ValueError("with_weight_parameters: parameter keys must be unique")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in keys):
        raise ValueError("with_weight_parameters: argument indices must be ints")
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = False
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            raise ValueError(f"with_weight_parameters: the module does not parse: {e}") from None
        symbols = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                   if "sym_name" in op.attributes}
        fn = symbols.get(func)
        if fn is None or fn.operation.name != "func.func":
            raise ValueError(f"with_weight_parameters: no func.func @{func}")
        if not len(fn.regions[0].blocks):
            raise ValueError(f"with_weight_parameters: @{func} is a declaration (no body)")
        clash = [GLOBAL_PREFIX + k for k in keys.values() if GLOBAL_PREFIX + k in symbols]
        if clash:
            raise ValueError(f"with_weight_parameters: the module has a symbol @{clash[0]} already")
        block = fn.regions[0].blocks[0]
        n = len(block.arguments)
        bad = [i for i in keys if not 0 <= i < n]
        if bad:
            raise ValueError(f"with_weight_parameters: @{func} has {n} arguments; no argument {bad[0]}")
        for i in sorted(keys):
            t = block.arguments[i].type
            if not (isinstance(t, ir.RankedTensorType) and ir.RankedTensorType(t).has_static_shape):
                raise ValueError(f"with_weight_parameters: argument {i} of @{func} is {t}, not a tensor "
                                 "of static shape")
        fn_type = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        for i in sorted(keys):
            t = block.arguments[i].type
            name = GLOBAL_PREFIX + keys[i]
            with ir.InsertionPoint(fn):
                ir.Operation.create("util.global", attributes={
                    "sym_name": ir.StringAttr.get(name), "sym_visibility": ir.StringAttr.get("private"),
                    "type": ir.TypeAttr.get(t),
                    "initial_value": ir.Attribute.parse(
                        f'#flow.parameter.named<"{scope}"::"{keys[i]}"> : {t}')})
            with ir.InsertionPoint.at_block_begin(block):
                load = ir.Operation.create("util.global.load", results=[t],
                                           attributes={"global": ir.FlatSymbolRefAttr.get(name)})
            block.arguments[i].replace_all_uses_with(load.result)
        kept = [i for i in range(n) if i not in keys]
        for i in sorted(keys, reverse=True):
            block.erase_argument(i)
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([fn_type.inputs[i] for i in kept], list(fn_type.results)))
        if "arg_attrs" in fn.attributes:
            attrs = ir.ArrayAttr(fn.attributes["arg_attrs"])
            fn.attributes["arg_attrs"] = ir.ArrayAttr.get([attrs[i] for i in kept])
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            diags = getattr(e, "error_diagnostics", None)
            why = diags[0].message if diags else str(e).strip().splitlines()[0]
            raise ValueError(f"with_weight_parameters: the module does not verify after the change "
                             f"(are the weights passed to @{func} by a call?): {why}") from None
        return str(module)


_PARAM = re.compile(r'#flow\.parameter\.named<"([^"]*)"::"([^"]*)">')


def parameter_types(text: str, scope: str = DEFAULT_SCOPE) -> Dict[str, tuple]:
    """``{key: (shape, element type)}`` of the globals of ``text`` backed by IREE parameters of
    ``scope`` (as :func:`with_weight_parameters` makes them), e.g. ``{"w": ((64, 128), "f32")}``;
    for :func:`parameters_module`'s check.

    Raises:
        ValueError: the text does not parse.
    """
    from iree.compiler import ir

    out = {}
    with ir.Context():
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            raise ValueError(f"parameter_types: the module does not parse: {e}") from None
        for op in module.body.operations:
            if op.operation.name != "util.global" or "initial_value" not in op.attributes:
                continue
            m = _PARAM.match(str(op.attributes["initial_value"]))
            if m and m.group(1) == scope:
                t = ir.RankedTensorType(ir.TypeAttr(op.attributes["type"]).value)
                out[m.group(2)] = (tuple(t.shape), str(t.element_type))
    return out


def parameters_module(instance, arrays: Mapping[str, object], scope: str = DEFAULT_SCOPE,
                      types: Optional[Mapping[str, tuple]] = None):
    """The ``iree.runtime`` I/O parameters module serving ``arrays`` (key -> numpy array, made
    C-contiguous) under ``scope``, for a context's VM ``instance``; IREE reads them when the module
    that uses them loads (its initializer). Load it before that module.

    ``types``: the module's parameters (:func:`parameter_types`); each array is then checked against
    its global's shape and element type: IREE itself reads the bytes and refuses only too few of
    them (a float64 array for an f32 weight would load as garbage).

    Raises:
        ValueError: a key is empty; with ``types``, a parameter without an array, an array for no
            parameter, or an array of another shape or dtype (the message names the key and both).
    """
    import numpy as np
    import iree.runtime as rt

    if types is not None:
        _check_arrays(arrays, types, scope)
    index = rt.ParameterIndex()
    for key, a in arrays.items():
        if not key:
            raise ValueError("parameters_module: empty parameter key")
        index.add_buffer(key, np.ascontiguousarray(a))
    return rt.create_io_parameters_module(instance, index.create_provider(scope=scope))


def _check_arrays(arrays: Mapping[str, object], types: Mapping[str, tuple], scope: str) -> None:
    import numpy as np

    from falcon_mlir.dtypes import np_type

    for key, (shape, elem) in types.items():
        want = f"tensor<{'x'.join(map(str, shape))}x{elem}>"
        if key not in arrays:
            raise ValueError(f"parameter {scope}::{key}: the module reads a {want}; no array was given for it")
        a = arrays[key]
        dtype = getattr(a, "dtype", None)
        try:
            ok = dtype is not None and np.dtype(dtype) == np.dtype(np_type(elem))
        except (KeyError, ImportError):
            ok = False
        if not ok or tuple(getattr(a, "shape", ())) != tuple(shape):
            got = (f"a {dtype} array of shape {tuple(a.shape)}" if dtype is not None
                   else f"a {type(a).__name__}")
            raise ValueError(f"parameter {scope}::{key}: the module reads a {want}, got {got}")
    extra = sorted(set(arrays) - set(types))
    if extra:
        raise ValueError(f"parameter {scope}::{extra[0]}: the module has no such parameter "
                         f"(it reads {', '.join(sorted(types)) or 'none'})")


def write_archive(path: str, arrays: Mapping[str, object]) -> None:
    """Write ``arrays`` (key -> numpy array) as an IREE parameter archive (``.irpa``) at ``path``, for
    ``iree-run-module --parameters=model=PATH`` and the like; atomically
    (:func:`falcon_mlir.files.write_atomic_by`: ``path`` is never half-written).

    Raises:
        OSError: the folder cannot be written.
    """
    import numpy as np
    import iree.runtime as rt

    from falcon_mlir.files import write_atomic_by

    index = rt.ParameterIndex()
    for key, a in arrays.items():
        index.add_buffer(key, np.ascontiguousarray(a))
    write_atomic_by(path, lambda tmp: index.create_archive_file(tmp))


def weight_keys(names: Sequence[str], first: int = 1) -> dict:
    """``{first + j: names[j]}``: the argument index -> parameter key map of a function whose
    arguments from ``first`` on are the weights ``names`` (in order)."""
    return {first + j: n for j, n in enumerate(names)}
