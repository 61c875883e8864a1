"""Target coverage: AArch64 (run under qemu-user) and CUDA sm_80 (compile only).

AArch64 tests need the tools folder made by ``scripts/fetch_aarch64.sh``
(``$FALCON_AARCH64_ROOT``, default ``~/.cache/falcon-mlir/aarch64``); without
it they are skipped with the reason. CUDA tests need no GPU.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from cases import NP_TYPES, contraction_mlir, random_inputs, reference, rel_err
from falcon_mlir import targets

AARCH64 = ("aarch64-n1", "aarch64-v1")

# Problem sizes (M, K, N), odd so that the rewrite peels edges. aarch64-v1 uses
# an even N (56): IREE 3.13's SVE codegen aborts the compiling process ("LLVM
# ERROR: out of memory", ~16 GB, in eliminateVectorMasks) on some small
# odd-N matmuls, classical ones included (1x45 @ 45x53, 23x15 @ 15x18), and the
# peeled edges of 67x45x53 are such matmuls. See falcon_mlir/targets.py.
SIZES = {"aarch64-n1": (67, 45, 53), "aarch64-v1": (65, 47, 56)}

# (lhs/rhs type, lcma option, scheme name in the report). Accumulation is f32.
CASES = [
    ("f32", "scheme=strassen levels=1", "strassen"),
    ("f32", "scheme=3x3x3:23", "3x3x3:23"),
    ("bf16", "scheme=strassen levels=1", "strassen"),
]

# Max-norm relative error bound for f32 accumulation at K <= 47 (seen: ~2e-7).
F32_TOL = 1e-5


def _runner(target):
    r = targets.QemuAarch64Runner.for_target(target)
    if not r.available:
        pytest.skip(f"aarch64 tools not found under {r.root} (missing: {', '.join(r.missing())});"
                    " run scripts/fetch_aarch64.sh or set FALCON_AARCH64_ROOT")
    return r


@functools.lru_cache(maxsize=None)
def _problem(target, lhs):
    M, K, N = SIZES[target]
    text, shapes = contraction_mlir(M, N, K, lhs=lhs, acc="f32")
    seed = 1000 * AARCH64.index(target) + (7 if lhs == "bf16" else 3)
    a, b, c = random_inputs(shapes, [lhs, lhs, "f32"], seed=seed)
    return text, (a, b, c), reference(a, b, c)


@functools.lru_cache(maxsize=None)
def _run(target, lhs, lcma):
    """(output, report) of the module compiled for ``target`` and run under qemu."""
    text, args, _ = _problem(target, lhs)
    vmfb, report = targets.compile_for(target, text, lcma=lcma, return_report=True)
    out = targets.QemuAarch64Runner.for_target(target).run(vmfb, "f", *args)
    return out, report


@pytest.mark.parametrize("lhs,lcma,scheme", CASES, ids=lambda v: str(v).replace(" ", "_"))
@pytest.mark.parametrize("target", AARCH64)
def test_aarch64_rewrite_matches_classical_and_reference(target, lhs, lcma, scheme):
    _runner(target)
    M, K, N = SIZES[target]
    _, _, ref = _problem(target, lhs)

    classical, creport = _run(target, lhs, None)
    assert creport == []  # lcma=None: no rewrite pass at all
    falcon, report = _run(target, lhs, lcma)

    assert len(report) == 1, report
    (entry,) = report
    assert entry["plan"] != "classical", entry
    assert entry["plan"]["schemes"] == [scheme], entry
    assert (entry["M"], entry["K"], entry["N"]) == (M, K, N)
    assert entry["element_types"] == {"lhs": lhs, "rhs": lhs, "acc": "f32"}

    for out in (classical, falcon):
        assert out.shape == (M, N) and out.dtype == np.float32
        assert np.isfinite(out).all()
    e_classical = rel_err(classical, ref)
    e_falcon = rel_err(falcon, ref)
    e_between = rel_err(falcon, classical)
    assert e_classical < F32_TOL, e_classical
    assert e_falcon < F32_TOL, (e_falcon, e_classical)
    assert e_between < F32_TOL, e_between


def test_aarch64_runner_reports_missing_tools(tmp_path):
    r = targets.QemuAarch64Runner(tmp_path / "nowhere")
    assert not r.available and len(r.missing()) == 3
    with pytest.raises(FileNotFoundError, match="fetch_aarch64.sh"):
        r.run(b"", "f", np.zeros(1, np.float32))


def test_target_flags():
    assert targets.target_flags("aarch64-v1")[-2:] == [
        "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu",
        "--iree-llvmcpu-target-cpu=neoverse-v1"]
    assert targets.target_flags("cuda-sm80") == ["--iree-hal-target-device=cuda",
                                                 "--iree-cuda-target=sm_80"]
    with pytest.raises(KeyError, match="known"):
        targets.get_target("sm_90")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_cuda_sm80_compiles_rewritten(dtype):
    M, K, N = 256, 192, 320
    text, _ = contraction_mlir(M, N, K, lhs=dtype)
    vmfb, report = targets.compile_for("cuda-sm80", text, lcma="scheme=strassen levels=1",
                                       return_report=True)
    assert isinstance(vmfb, bytes) and len(vmfb) > 1000
    assert b"cuda" in vmfb  # the CUDA executable format of the HAL executables
    (entry,) = report
    assert entry["plan"]["schemes"] == ["strassen"], entry
    assert entry["products"] == 7 and entry["element_types"]["acc"] == dtype
    assert NP_TYPES[dtype]  # a type the numerics helpers know
