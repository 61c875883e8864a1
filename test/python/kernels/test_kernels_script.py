"""scripts/gpu_kernels.py: the bundle it prepares, and its GPU-side logic as a dry run on the CPU.

The dry run (``--cpu``) replaces the kernel by IREE's own llvm-cpu code,
torch's CUDA tensors by CPU tensors and Triton's JIT by its interpreter; what
it checks is the script's plumbing (manifest, inputs, checks, timing, tables,
JSON), not the GPU. Each mode runs in its own process, as it would there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu_kernels.py"


def _run(*args, out=None, timeout=300):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_bad_shape_is_one_line_error(tmp_path):
    r = _run(SCRIPT, "prepare", tmp_path / "b", "--shapes", "12x")
    assert r.returncode == 2 and "error: shape '12x': expected MxNxK" in r.stdout
    assert not (tmp_path / "b").exists()


def test_dry_run_bundle(tmp_path):
    pytest.importorskip("torch")
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    r = _run(SCRIPT, "prepare", bundle, "--cpu", "--dtypes", "f32", "--shapes", "64x48x80",
             "--configs", "table", "64x64x32,s2,w4,g8", "--tune-shapes", "64x48x80")
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    kinds = sorted(e["kind"] for e in manifest["entries"])
    assert kinds == ["check", "perf", "perf"] and not manifest["failures"]
    assert {"gpu_kernels.py", "gpu_kernels_run.py", "falcon_triton_gemm.py"} <= {p.name for p in bundle.iterdir()}

    r = _run(bundle / "gpu_kernels.py", "check", bundle)
    assert r.returncode == 0 and "3 modules" in r.stdout, r.stdout

    r = _run(bundle / "gpu_kernels.py", "run", bundle, "--cpu", "--repeat", "2", "--warmup", "1", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((out / "gpu_kernels_run.json").read_text())["rows"]
    ours = [x for x in rows if x["name"] != "torch.matmul"]
    assert len(ours) == 3 and all(x["ok"] for x in ours)
    assert all(x["rel_err_f64"] < 1e-5 and x["reps"] == 2 for x in ours)
    check = next(x for x in ours if x["kind"] == "check")
    assert check["rel_diff_iree_reference"] == 0.0  # @main and @reference are the same code here
    assert (out / "gpu_kernels_run.md").read_text().startswith("| dtype | shape (MxNxK) |")

    pytest.importorskip("triton")
    r = _run(bundle / "gpu_kernels.py", "tune", bundle, "--cpu", "--configs", "128x128x32,s3,w8,g8", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((out / "gpu_kernels_tune.json").read_text())["rows"]
    assert [x["config"] for x in rows] == ["cuBLAS", "128x128x32,s3,w8,g8"] and rows[1]["ok"]


def test_bad_config_is_one_line_error(tmp_path):
    r = _run(SCRIPT, "prepare", tmp_path / "b", "--configs", "128x128x64,s9,w8")
    assert r.returncode == 2 and r.stdout == "error: KernelConfig.num_stages must be an int in 1..8, got 9\n"
    assert not (tmp_path / "b").exists()


def test_prepare_real_bundle(tmp_path):
    pytest.importorskip("triton")
    bundle = tmp_path / "bundle"
    # The second configuration needs 262 KB of shared memory: listed as failed, the bundle goes on.
    r = _run(SCRIPT, "prepare", bundle, "--dtypes", "bf16", "--shapes", "256x256x128", "--no-checks",
             "--configs", "table", "128x256x64,s4,w8,g8")
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    (entry,) = manifest["entries"]
    assert entry["kernel"]["arch"] == "sm_90a" and entry["kernel"]["shared"] > 0
    assert (bundle / entry["file"]).stat().st_size == entry["vmfb_bytes"]
    (failure,) = manifest["failures"]
    assert "bytes of shared memory" in failure["error"]
    assert _run(bundle / "gpu_kernels.py", "check", bundle).returncode == 0
