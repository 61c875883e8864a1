"""falcon-mlir: lower-complexity matrix multiplication (Strassen-like
schemes) as MLIR rewrites on IREE.

The front door mirrors ``iree.compiler``: :func:`compile_str` and
:func:`compile_file` (imported lazily, so ``import falcon_mlir`` stays light);
bad options raise :class:`OptionError`, failed compiles :class:`CompileError`.
"""

__version__ = "0.1.0"

__all__ = ["compile_str", "compile_file", "CompileError", "OptionError", "__version__"]

_LAZY = {
    "compile_str": ("falcon_mlir.api", "compile_str"),
    "compile_file": ("falcon_mlir.api", "compile_file"),
    "CompileError": ("falcon_mlir.pipeline.diagnostics", "CompileError"),
    "OptionError": ("falcon_mlir.options", "OptionError"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'falcon_mlir' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
