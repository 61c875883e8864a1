"""scripts/cpu_kernel_pass_bench.py: bad input is one line; a tiny run prints a row for each shape."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from falcon_mlir.kernels import cpu_gemm, cpu_object

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_kernel_pass_bench.py"


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_bad_repeat_is_one_line():
    r = _run("--shapes", "8x8x8", "--repeat", "0")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["cpu_kernel_pass_bench: --repeat and --rounds must be >= 1"]


needs_avx512 = pytest.mark.skipif(not cpu_object.host_has_avx512() or platform.machine() != "x86_64",
                                  reason="needs an AVX-512 F/BW/DQ/VL CPU")
#: This machine's kernel ISA (AVX-512, else the AVX2 build), as the script picks its arch.
HOST_ISA = cpu_object.host_isa() if platform.machine() == "x86_64" else None


@pytest.mark.skipif(HOST_ISA is None, reason="needs a CPU with AVX-512, or AVX2 and FMA")
def test_tiny_run_prints_a_row(tmp_path, monkeypatch):
    try:
        cpu_object.compiler()
    except RuntimeError:
        pytest.skip("needs gcc")
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    r = _run("--shapes", "70x100x33", "--repeat", "1", "--rounds", "1", "--flags", "host")
    assert r.returncode == 0, r.stderr
    rows = [ln.split("|") for ln in r.stdout.splitlines() if ln.startswith("| 70x100x33 |")]
    assert len(rows) == 1 and rows[0][5].strip() == cpu_gemm.choose_config(70, 100, 33, isa=HOST_ISA).label
    assert float(rows[0][2]) > 0 and float(rows[0][3]) > 0 and "uptime before:" in r.stdout


@needs_avx512  # elsewhere the host target's missing AVX-512 is the one line
def test_kernel_that_cannot_be_built_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("FALCON_CC", "/bin/false")
    r = _run("--shapes", "30x40x50", "--repeat", "1", "--rounds", "1", "--flags", "host")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "cpu_kernel_pass_bench: error: falcon-kernels: /bin/false failed on falcon's CPU kernel "
        "(cpu14x32,k256,28x256): exit status 1, no output"], r.stderr
