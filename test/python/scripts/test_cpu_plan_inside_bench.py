"""scripts/cpu_plan_inside_bench.py: a bad shape or a shape off the scheme's format is one line; a tiny run
times the classical kernel and the plan's three product forms, each right against float64."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from falcon_mlir.kernels import cpu_object

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_plan_inside_bench.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def test_bad_shape_is_one_usage_line():
    r = _run("64x0x8")
    assert r.returncode == 2 and r.stdout.strip() == ""
    assert r.stderr.strip().splitlines()[-1].endswith("argument MxNxK: '64x0x8' is not MxNxK with positive integers")


@pytest.mark.skipif(not cpu_object.host_has_avx512() or shutil.which("gcc") is None,
                    reason="needs gcc and an AVX-512F CPU")
def test_odd_shape_is_one_line():
    r = _run("63x64x64", "--rounds", "1")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "cpu_plan_inside_bench: 63x64x64: CpuPlan: 63x64x64 (MxNxK) is not a multiple of strassen's format <2,2,2>"]


@pytest.mark.skipif(not cpu_object.host_has_avx512() or shutil.which("gcc") is None,
                    reason="needs gcc and an AVX-512F CPU")
def test_tiny_run_prints_every_form_checked():
    r = _run("120x1000x600", "--rounds", "2")
    assert r.returncode == 0, r.stderr
    row = r.stdout.strip().splitlines()[-1]
    assert row.startswith("120x1000x600 | ")
    assert len(re.findall(r"\(\d\.\d{3}\)", row)) == 3, row
    err = float(row.split("|")[-1])
    assert err < 2e-6, row
