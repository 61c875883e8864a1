"""Bundles for a machine without falcon_mlir: which library modules they
carry, and how.

A bundle (``falcon-calibrate --prepare DIR``, ``scripts/gpu_check.py
prepare DIR``) is compiled here and run on a GPU machine that has only
Python, numpy and the ``iree-base-runtime`` wheel. Its scripts import the
few library modules listed in :data:`STANDALONE`, each of which imports only
the standard library and numpy; the bundle carries an unmodified copy of
each under a flat name, and the scripts import them like this::

    try:  # falcon_mlir installed
        from falcon_mlir import cli, compare, files
    except ImportError:  # in a bundle: the copies beside this file
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import falcon_cli as cli, falcon_compare as compare, falcon_files as files

So there is one definition of each (no hand-kept duplicates) on both machines.
"""

from __future__ import annotations

import shutil
from importlib import import_module
from pathlib import Path
from typing import Iterable, List

__all__ = ["STANDALONE", "copy_standalone"]

#: Library module -> its file name in a bundle.
STANDALONE = {
    "falcon_mlir.cli": "falcon_cli.py",
    "falcon_mlir.compare": "falcon_compare.py",
    "falcon_mlir.dtypes": "falcon_dtypes.py",
    "falcon_mlir.files": "falcon_files.py",
    "falcon_mlir.bench.shapes": "falcon_shapes.py",
    "falcon_mlir.calibration.assemble": "falcon_calibrate_assemble.py",
    "falcon_mlir.runner": "falcon_runner.py",
}


def copy_standalone(folder, modules: Iterable[str] = tuple(STANDALONE)) -> List[Path]:
    """Copy the source files of ``modules`` (keys of :data:`STANDALONE`) into
    ``folder`` under their bundle names; returns the paths written.

    Raises:
        KeyError: a module that is not standalone.
        OSError: a file cannot be written.
    """
    out = []
    for name in modules:
        dest = Path(folder) / STANDALONE[name]
        shutil.copyfile(import_module(name).__file__, dest)
        out.append(dest)
    return out
