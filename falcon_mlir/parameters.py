"""Model weights as IREE parameters: arguments of a function made module globals that IREE loads
from a parameter provider, as IREE deploys a model (its weights in a parameter archive, not passed
on every call).

With the weights as immutable globals (``util.global private @w = #flow.parameter.named<"scope"::"key">``,
IREE 3.13), IREE's global optimization hoists everything computed from them alone into the module's
initializer, run once when the module is loaded: its data-tiling packs of the weights, and lcma-rewrite's
combines of B (falcon's ``Problem.const_rhs``). A call then does only the work that depends on its
inputs.

:func:`with_weight_parameters` rewrites the MLIR (through the MLIR Python bindings);
:func:`parameters_module` makes the ``iree.runtime`` module that serves the arrays (numpy, host memory,
read in place) under those keys; :class:`falcon_mlir.runner.Module` loads it before the compiled module.
"""

from __future__ import annotations

from typing import Mapping, Sequence

__all__ = ["DEFAULT_SCOPE", "GLOBAL_PREFIX", "with_weight_parameters", "parameters_module", "write_archive", "weight_keys"]

#: The parameter scope :func:`with_weight_parameters` and :func:`parameters_module` use by default.
DEFAULT_SCOPE = "model"
#: The prefix of the globals :func:`with_weight_parameters` makes (``@falcon_param_<key>``).
GLOBAL_PREFIX = "falcon_param_"


def with_weight_parameters(text: str, keys: Mapping[int, str], func: str = "main",
                           scope: str = DEFAULT_SCOPE) -> str:
    """``text`` with the arguments of ``func`` numbered in ``keys`` (0-based) turned into module
    globals backed by IREE parameters ``scope::keys[i]``: each becomes ``util.global private
    @falcon_param_<key> = #flow.parameter.named<"scope"::"key"> : T`` and a ``util.global.load`` at the
    start of ``func``'s body; the argument (and its attributes) leaves the signature, the others keep
    their order. Works on any input IREE imports (StableHLO, linalg).

    Args:
        text: MLIR module text (the generic or custom form; IREE's dialects and StableHLO parse).
        keys: argument index -> parameter key (unique non-empty strings).
        func: the ``func.func`` to change.
        scope: the parameter scope (:func:`parameters_module` serves the same one).

    Returns:
        The module's text with the globals added.

    Raises:
        ValueError: no ``func.func @func``; an index out of its argument range; an argument not a
            ranked tensor; empty or repeated keys, or a key with ``"`` or ``\\``; the text does not parse (the parser's message).
    """
    from iree.compiler import ir

    if len(set(keys.values())) != len(keys) or not all(
            isinstance(k, str) and k and '"' not in k and "\\" not in k for k in keys.values()):
        raise ValueError("with_weight_parameters: parameter keys must be unique non-empty strings "
                         "without '\"' or '\\'")
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = False
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            raise ValueError(f"with_weight_parameters: the module does not parse: {e}") from None
        fn = next((op for op in module.body.operations if op.operation.name == "func.func"
                   and ir.StringAttr(op.attributes["sym_name"]).value == func), None)
        if fn is None:
            raise ValueError(f"with_weight_parameters: no func.func @{func}")
        block = fn.regions[0].blocks[0]
        n = len(block.arguments)
        bad = [i for i in keys if not 0 <= i < n]
        if bad:
            raise ValueError(f"with_weight_parameters: @{func} has {n} arguments; no argument {bad[0]}")
        for i in sorted(keys):
            if not isinstance(block.arguments[i].type, ir.RankedTensorType):
                raise ValueError(f"with_weight_parameters: argument {i} of @{func} is "
                                 f"{block.arguments[i].type}, not a ranked tensor")
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
        if not module.operation.verify():
            raise ValueError(f"with_weight_parameters: @{func} does not verify after the change")
        return str(module)


def parameters_module(instance, arrays: Mapping[str, object], scope: str = DEFAULT_SCOPE):
    """The ``iree.runtime`` I/O parameters module serving ``arrays`` (key -> numpy array, made
    C-contiguous; its bytes are read in place: keep the arrays alive while the module is) under
    ``scope``, for a context's VM ``instance``. Load it before the module that uses the parameters.

    Raises:
        ValueError: a key is empty.
    """
    import numpy as np
    import iree.runtime as rt

    index = rt.ParameterIndex()
    for key, a in arrays.items():
        if not key:
            raise ValueError("parameters_module: empty parameter key")
        index.add_buffer(key, np.ascontiguousarray(a))
    return rt.create_io_parameters_module(instance, index.create_provider(scope=scope))


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
