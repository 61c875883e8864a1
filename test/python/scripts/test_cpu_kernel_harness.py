"""scripts/cpu_kernel_harness.py: bad shapes and configs are one usage line; a tiny run on one and two
threads prints its rows, each C right against float64."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from falcon_mlir.kernels import cpu_object

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_kernel_harness.py"


@pytest.mark.parametrize("args, message", [
    (["64x0x8"], "'64x0x8' is not MxNxK with positive integers"),
    (["64x64x64,8x8x8"], "one MxNxK per argument, got '64x64x64,8x8x8'"),
    (["64x64x64", "--config", "kc=384,mc=50"], "mc=50 must be a multiple of mr=14"),
    (["64x64x64", "--config", "kq=3"], "--config takes field=value pairs of CpuGemmConfig, got 'kq=3'"),
    (["64x64x64", "--repeat", "0"], "--repeat must be 1-256 and --threads 1-64"),
])
def test_bad_input_is_one_usage_line(args, message):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert message in r.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(not cpu_object.host_has_avx512() or shutil.which("gcc") is None,
                    reason="needs gcc and an AVX-512F CPU")
def test_tiny_run_on_one_and_two_threads_is_checked():
    """Edges in M, N and K (60 rows: 4 full micro-tiles and one of 4; 1000 columns: a part panel; K 300:
    a part K block) on the plan blocking, each thread count's C against float64."""
    r = subprocess.run([sys.executable, str(SCRIPT), "60x1000x300", "--config", "kc=384,mc=56", "--threads",
                        "2", "--repeat", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "kernel cpu14x32,k384,56x512"
    rows = [ln.split(" | ") for ln in lines[2:]]
    assert [(row[0], row[1]) for row in rows] == [("60x1000x300", "1"), ("60x1000x300", "2")], lines
    for row in rows:
        assert float(row[3]) > 0 and float(row[5]) < 2e-6, row
