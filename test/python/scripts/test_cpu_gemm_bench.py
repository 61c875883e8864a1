"""scripts/cpu_gemm_bench.py: bad input is one line before any work; a tiny run prints checked rows."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from falcon_mlir.kernels import cpu_object

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_gemm_bench.py"


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_bad_runner_is_one_line():
    r = _run("--runners", "falcon,blas")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "cpu_gemm_bench: bad --runners ['blas'] or --repeat/--sizes/--check-rows below 1"]


@pytest.mark.skipif(not cpu_object.host_has_avx512() or shutil.which("gcc") is None,
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


def test_check_rows_below_one_is_one_line():
    """Were (break-it review): --check-rows 0 failed after the timing with numpy's 'zero-size array to
    reduction operation maximum', -3 with 'negative dimensions are not allowed' (tracebacks)."""
    for v in ("0", "-3"):
        r = _run("--sizes", "--shapes", "30x40x50", "--repeat", "1", "--runners", "falcon", "--check-rows", v)
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert r.stderr.strip().splitlines() == [
            "cpu_gemm_bench: bad --runners [] or --repeat/--sizes/--check-rows below 1"]


def test_kernel_that_cannot_be_built_is_one_line(tmp_path, monkeypatch):
    """Were: a failing compiler (or a host without AVX-512) ended in a traceback."""
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("FALCON_CC", "/bin/false")
    r = _run("--sizes", "--shapes", "30x40x50", "--repeat", "1", "--runners", "falcon")
    assert r.returncode == 1
    # Without AVX-512 the host check comes first, before the compiler is run.
    why = ("/bin/false failed on falcon's CPU kernel (cpu14x32,k256,28x256): exit status 1, no output"
           if cpu_object.host_has_avx512() else
           "falcon's CPU GEMM kernel needs AVX-512 (F, BW, DQ, VL), which this machine's CPU lacks")
    assert r.stderr.strip().splitlines() == [f"cpu_gemm_bench: error: {why}"]
