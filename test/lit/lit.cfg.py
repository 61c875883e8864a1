# lit configuration for falcon-mlir's IR tests: `lit test/lit`.
# One folder per pass: lcma-rewrite/, falcon-tiles/, and falcon-opt/ for the
# tool's own behaviour (errors, pipeline parsing, print flags). A folder's
# Inputs/ holds files its RUN lines name (`%S/Inputs/...`); the pytest helpers
# use lcma-rewrite/Inputs/flat_profile.json too.
import os
import shutil

import lit.formats

config.name = "falcon-mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.environment["PYTHONUNBUFFERED"] = "1"
for var in ("PATH", "HOME", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# `REQUIRES: triton`: tests that compile falcon's CUDA kernels (the cuda extra).
import importlib.util  # noqa: E402

if importlib.util.find_spec("triton") is not None:
    config.available_features.add("triton")

# `REQUIRES: cpu-kernel-cc`: tests that build falcon's CPU kernel (an x86-64 machine with gcc or
# $FALCON_CC; the kernel is not run, so AVX-512 is not needed).
import platform  # noqa: E402

if platform.machine().lower() in ("x86_64", "amd64") and shutil.which(os.environ.get("FALCON_CC") or "gcc"):
    config.available_features.add("cpu-kernel-cc")
# `REQUIRES: plan-b-inside`: tests whose LCMA plan's products (512 x 4096 x 2048 blocks) run with B
# inside on this host: falcon_mlir.kernels.cpu_gemm.plan_b_inside counts the host's cores (true on 1,
# 2, 4, 8 and 16 of them, not on 3 or 6).
try:
    from falcon_mlir.kernels.cpu_gemm import plan_b_inside  # noqa: E402

    if plan_b_inside(512, 4096, 2048):
        config.available_features.add("plan-b-inside")
except ImportError:
    pass
for var in ("FALCON_CC", "FALCON_KERNEL_CACHE"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# FileCheck comes from the `filecheck` package (a Python port of LLVM's FileCheck).
filecheck = shutil.which("filecheck") or "filecheck"
config.substitutions.append(("FileCheck", filecheck))
