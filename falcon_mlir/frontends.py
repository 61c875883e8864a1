"""Frontends: ONNX models and PyTorch modules to MLIR text for :mod:`falcon_mlir.api`.

Both helpers return MLIR text in the ``torch`` dialect (``torch.vtensor``
types, ``torch.aten.*`` / ``torch.operator "onnx.*"`` ops) that
:func:`falcon_mlir.compile_str` (and ``iree-compile``) take as is: IREE's
``input`` phase lowers it to linalg, where ``lcma-rewrite`` finds the
contractions.

    from falcon_mlir.frontends import onnx_to_mlir, torch_to_mlir
    vmfb, report = falcon_mlir.compile_str(onnx_to_mlir("model.onnx"),
                                           lcma="auto", return_report=True)
    vmfb = falcon_mlir.compile_str(torch_to_mlir(torch_module, example_x))

Each frontend is an optional extra; a helper whose packages are missing
raises :class:`FrontendUnavailableError` (an ``ImportError``) saying what to
install:

- ONNX: the ``onnx`` package (``iree-base-compiler[onnx]``); the importer
  itself ships with ``iree-base-compiler`` (``iree.compiler.extras.onnx_importer``,
  the library behind the ``iree-import-onnx`` console script).
- PyTorch: ``torch`` and ``iree-turbine`` (``iree.turbine.aot``).
"""

from __future__ import annotations

import os
from typing import Any, Union

__all__ = ["FrontendError", "FrontendUnavailableError", "onnx_to_mlir", "torch_to_mlir"]


class FrontendUnavailableError(ImportError):
    """A frontend's optional packages are not installed."""


class FrontendError(RuntimeError):
    """A frontend failed on a model for a known reason (the message says which
    and how to work around it); the original exception is chained."""


def _need(module: str, what: str, install: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise FrontendUnavailableError(
            f"{what} needs the '{module}' Python module, which is not importable "
            f"({e}); install it with: python -m pip install {install}"
        ) from e


def onnx_to_mlir(model_or_path: Union[str, "os.PathLike[str]", Any], *,
                 data_prop: bool = True, verify: bool = True) -> str:
    """Import an ONNX model as MLIR text (torch dialect, ``torch.operator "onnx.*"`` ops).

    Does in process what ``iree-import-onnx model.onnx`` does (weights stay
    inline as ``dense_resource`` literals): checks the model, runs ONNX
    shape inference (static shapes are what the rewrite needs), then
    IREE's ONNX importer.

    Args:
        model_or_path: an ``onnx.ModelProto``, or the path of an ``.onnx``
            file (external data is looked up beside it).
        data_prop: ONNX shape inference with data propagation (as
            ``iree-import-onnx`` does by default).
        verify: verify the imported module.

    Returns:
        The module as MLIR text, for :func:`falcon_mlir.compile_str`.

    Raises:
        FrontendUnavailableError: ``onnx`` (``iree-base-compiler[onnx]``) is
            not installed, or this IREE build has no ONNX importer.
        TypeError: ``model_or_path`` is neither a path nor a ModelProto.
        onnx.checker.ValidationError / onnx_importer.OnnxImportError: the
            model is invalid or uses something the importer cannot import.
    """
    onnx = _need("onnx", "onnx_to_mlir", "'iree-base-compiler[onnx]' (or: onnx)")
    onnx_importer = _need("iree.compiler.extras.onnx_importer", "onnx_to_mlir",
                          "'iree-base-compiler[onnx]' (an IREE compiler built with Torch support)")
    from iree.compiler import ir

    if isinstance(model_or_path, (str, bytes, os.PathLike)):
        model = onnx.load(os.fspath(model_or_path))
    elif isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    else:
        raise TypeError("onnx_to_mlir takes an onnx.ModelProto or a path, not "
                        f"{type(model_or_path).__name__}")
    onnx.checker.check_model(model)
    model = onnx.shape_inference.infer_shapes(model, data_prop=data_prop)

    context = ir.Context()
    model_info = onnx_importer.ModelInfo(model)
    module = model_info.create_module(context=context).operation
    importer = onnx_importer.NodeImporter.define_function(model_info.main_graph, module)
    importer.import_all()
    if verify:
        module.verify()
    return module.get_asm(assume_verified=verify)


def torch_to_mlir(module: Any, *example_args: Any, **export_kwargs: Any) -> str:
    """Export a ``torch.nn.Module`` with iree-turbine as MLIR text (torch dialect).

    Runs ``iree.turbine.aot.export(module, args=example_args, **export_kwargs)``
    (``torch.export`` underneath: the graph is traced at the example
    arguments' shapes and dtypes; parameters are embedded in the module:
    up to 1024 elements as literals, larger ones as ``util.global`` with
    inline ``dense_resource`` values) and prints the result.  The module's forward becomes the exported function
    ``main``.

    Args:
        module: a ``torch.nn.Module`` (put it in ``eval()`` mode first for
            inference graphs, e.g. without dropout).
        example_args: example tensors for ``forward``.
        export_kwargs: passed to ``aot.export`` (e.g. ``kwargs``,
            ``dynamic_shapes``, ``strict_export``, ``function_name``: the
            exported function's name, ``main`` by default).

    Returns:
        The module as MLIR text, for :func:`falcon_mlir.compile_str`.

    Raises:
        FrontendUnavailableError: ``torch`` or ``iree-turbine`` is not
            installed.
        FrontendError: a bf16 parameter or buffer of more than 1024
            elements: iree-turbine (3.9.0) lifts such tensors to globals
            through ``numpy.array(tensor)``, which torch refuses for bf16.
            Smaller ones are inlined as literals and work; pass larger bf16
            weights as ``forward`` arguments instead.
        Whatever ``torch.export`` / iree-turbine raise for a module they
        cannot export.
    """
    _need("torch", "torch_to_mlir", "torch")
    aot = _need("iree.turbine.aot", "torch_to_mlir", "iree-turbine")
    try:
        if example_args:
            export_kwargs = dict(export_kwargs, args=tuple(example_args))
        exported = aot.export(module, **export_kwargs)
    except TypeError as e:
        if "BFloat16" not in str(e):
            raise
        raise FrontendError(
            "torch_to_mlir: iree-turbine could not store a bf16 tensor of more than "
            "1024 elements as a global (it converts globals with numpy.array, which "
            f"torch refuses for bf16: {e}). bf16 parameters of at most 1024 elements "
            "are inlined and work; pass larger bf16 weights as forward() arguments, "
            "or export in float32.") from e
    return str(exported.mlir_module)
