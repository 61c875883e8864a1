"""Running falcon-opt and falcon-compile on a temporary input, and checking
the bad-input promise (project standards): bad input never produces a
traceback or a half-written file: one clear line (with the location where
there is one), a non-zero exit, no output file, the input untouched; valid
but unusual input keeps working and stays correct.

falcon-opt runs in process through ``main([...])`` (fast); a few cases
(stdin, a closed pipe, disk full) run it as a subprocess
(:func:`run_subprocess`). Used by tools/test_falcon_opt.py,
tools/test_falcon_compile.py and the lcma-rewrite tests on unusual IR;
test/python/conftest.py makes the ``src`` fixture available to all of them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from falcon_mlir.tools import falcon_opt


IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


MM = """func.func @mm(%a: tensor<8x6xf32>, %b: tensor<6x4xf32>, %c: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x6xf32>, tensor<6x4xf32>) outs(%c : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
"""


# Line 2, column 31: the '>' is missing.
SYNTAX = """func.func @f(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  return %a : tensor<4x4xf32
}
"""


def matmul(M, N, K, lhs="f32", acc=None, name="f", op="linalg.matmul"):
    acc = acc or lhs
    ta, tb, tc = f"tensor<{M}x{K}x{lhs}>", f"tensor<{K}x{N}x{lhs}>", f"tensor<{M}x{N}x{acc}>"
    return (f"func.func @{name}(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %0 = {op} ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n"
            f"  return %0 : {tc}\n}}\n")


def generic(body, lhs="f32", rhs=None, acc=None, M=4, N=4, K=4):
    rhs, acc = rhs or lhs, acc or lhs
    ta, tb, tc = f"tensor<{M}x{K}x{lhs}>", f"tensor<{K}x{N}x{rhs}>", f"tensor<{M}x{N}x{acc}>"
    return f"""#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{
  %0 = linalg.generic {{indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}} ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{
  ^bb0(%x: {lhs}, %y: {rhs}, %o: {acc}):
{body}
  }} -> {tc}
  return %0 : {tc}
}}
"""


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


class Snapshot:
    """Bytes and mtime of a file, to check it was left alone."""

    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            self.data = f.read()
        self.mtime = os.stat(self.path).st_mtime_ns

    def unchanged(self) -> bool:
        with open(self.path, "rb") as f:
            return f.read() == self.data and os.stat(self.path).st_mtime_ns == self.mtime


@pytest.fixture
def src(tmp_path):
    """Writes ``text`` (str or bytes) to ``name`` and returns (path, Snapshot)."""

    def make(text, name="in.mlir"):
        p = tmp_path / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        # An mtime in the past, so a rewrite in the same tick would show.
        os.utime(p, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
        return p, Snapshot(p)

    return make


def opt(capfd, *argv):
    """falcon-opt in process; returns (rc, stdout, stderr) (fd level, so native
    LLVM writes to fd 2 are caught too)."""
    rc = falcon_opt.main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return rc, out, err


def lines(text):
    return [l for l in text.splitlines() if l.strip()]


def one_line_error(rc, err, *needles, rc_expected=1):
    assert rc == rc_expected, (rc, err)
    assert "Traceback" not in err and "internal error" not in err, err
    got = lines(err)
    assert len(got) == 1, f"expected one line, got:\n{err}"
    for n in needles:
        assert n in got[0], (n, got[0])
    return got[0]


def no_files_left(folder, keep=("in.mlir",)):
    left = sorted(p.name for p in folder.iterdir() if p.name not in keep)
    assert left == [], left


def parses(text):
    from iree.compiler import ir

    with ir.Context():
        ir.Module.parse(text)
    return True


def run_subprocess(args, stdin=b"", timeout=120):
    return subprocess.run([sys.executable, "-m", "falcon_mlir.tools.falcon_opt", *map(str, args)],
                          input=stdin, capture_output=True, timeout=timeout)
