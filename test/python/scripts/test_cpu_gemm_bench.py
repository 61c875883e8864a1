"""scripts/cpu_gemm_bench.py: bad input is one line before any work; a tiny run prints checked rows."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from falcon_mlir.kernels import cpu_gemm

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_gemm_bench.py"


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_bad_runner_is_one_line():
    r = _run("--runners", "falcon,blas")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["cpu_gemm_bench: bad --runners ['blas'] or --repeat/--sizes below 1"]


@pytest.mark.skipif(not cpu_gemm.host_has_avx512() or shutil.which("gcc") is None,
                    reason="needs gcc and an AVX-512F CPU")
def test_tiny_run_prints_rows_with_small_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    r = _run("--sizes", "--shapes", "70x100x33", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| 70x100x33 |")]
    assert [ln.split("|")[2].strip() for ln in rows] == ["iree", "falcon (cpu14x32,k256,28x256)", "numpy"]
    for ln in rows:
        assert float(ln.split("|")[6]) < 1e-5
    assert re.search(r"uptime before: .*load average", r.stdout)
