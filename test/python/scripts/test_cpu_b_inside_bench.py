"""scripts/cpu_b_inside_bench.py: a bad shape is one usage line; a tiny run times both forms of falcon's
classical CPU GEMM, each right against float64; dispatch_lines' b_inside choice."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from falcon_mlir.kernels import cpu_embed, cpu_object

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_b_inside_bench.py"


def test_bad_shape_is_one_usage_line():
    r = subprocess.run([sys.executable, str(SCRIPT), "64x0x8"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert "a shape is MxNxK with positive sizes, got '64x0x8'" in r.stderr.strip().splitlines()[-1]


def test_dispatch_lines_b_inside_choice():
    """Default: the rule (64x3000x2100 takes it, B of 6.3e6); False: two dispatches all the same; True
    where the layout cannot: refused."""
    text = "\n".join(cpu_embed.dispatch_lines("exe", 64, 3000, 2100))
    assert "::@fgemm[" in text and "::@pack_b[" not in text
    text = "\n".join(cpu_embed.dispatch_lines("exe", 64, 3000, 2100, b_inside=False))
    assert "::@fgemm[" not in text and "::@pack_b[" in text and "::@gemm[" in text
    assert "::@fgemm[" in "\n".join(cpu_embed.dispatch_lines("exe", 64, 64, 64, b_inside=True))
    with pytest.raises(ValueError, match="plain layout at batch 1"):
        cpu_embed.dispatch_lines("exe", 64, 64, 64, trans_b=True, b_inside=True)


@pytest.mark.skipif(not cpu_object.host_has_avx512() or shutil.which("gcc") is None,
                    reason="needs gcc and an AVX-512F CPU")
def test_tiny_run_prints_both_forms_checked():
    r = subprocess.run([sys.executable, str(SCRIPT), "60x1000x300", "--rounds", "2"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    row = r.stdout.strip().splitlines()[-1]
    assert row.startswith("60x1000x300 | ")
    errs = [float(x) for x in re.findall(r"(\d\.\de-\d\d)", row.split("|")[-1])]
    assert len(errs) == 2 and max(errs) < 2e-6, row
