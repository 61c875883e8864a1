#!/usr/bin/env python3
"""Check and time falcon's generated GEMM kernels on a GPU, from a bundle built here.

``prepare DIR`` (HERE, with falcon-mlir, Triton 3.6 and the IREE compiler):
for each shape x dtype x configuration, compile the kernel to an sm_90a cubin
and a module ``@main(A, B) -> C`` that runs it
(``falcon_mlir.kernels.gemm_module``), as ``DIR/modules/NAME.vmfb``; plus three
small correctness modules (transposed, batched, f32 output, odd sizes) that
also hold ``@reference``, the same product compiled by IREE itself (sm_80).
Copies this script, ``gpu_kernels_run.py`` (the GPU side) and the kernel
source (``falcon_triton_gemm.py``) into DIR and writes ``manifest.json`` last;
DIR gets a ``.gitignore`` of ``*`` (a bundle inside a checkout stays out of
git and travels to the GPU machine only when named in ``carry``).
Options: ``--shapes MxNxK ...`` (default: 8192^3, 16384^3 and the Llama-3-8B
/ 70B weight shapes of workloads.md at M = 8192), ``--dtypes`` (bf16 f16 f32;
inputs and output of one type), ``--configs LABEL ...`` (``KernelConfig``
labels such as ``128x256x64,s3,w8,g8``; ``table``, the default, is the
table's choice per shape), ``--tune-shapes`` (what ``tune`` times),
``--no-checks``, ``--cpu`` (a bundle for a dry run of the GPU side here).
A configuration that fails to compile is listed in the manifest and skipped.

``run DIR``, ``tune DIR``, ``check DIR``: the GPU side, see
``gpu_kernels_run.py`` (this script forwards to it; there it needs no
falcon-mlir).

Usage::

    python scripts/gpu_kernels.py prepare .kbundle                      # here
    python scripts/gpu_kernels.py check .kbundle                        # here
    python3 .kbundle/gpu_kernels.py run .kbundle --budget-s 300         # on the GPU machine
    python3 .kbundle/gpu_kernels.py tune .kbundle --budget-s 240        # on the GPU machine
    python scripts/gpu_kernels.py prepare /tmp/dry --cpu --shapes 256x192x128 \
        && python3 /tmp/dry/gpu_kernels.py run /tmp/dry --cpu          # dry run here
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_kernels_run as gpu  # noqa: E402  (the GPU side; copied into the bundle with this file)
from gpu_kernels_run import DTYPES, FORMAT, KERNEL_FILE, MANIFEST, log, parse_shape, write_atomic  # noqa: E402

#: workloads.md weight shapes (K, N) with M = 8192, as MxNxK, plus the squares.
LLAMA = {"Llama-3-8B q/o": (4096, 4096), "Llama-3-8B k,v": (4096, 1024),
         "Llama-3-8B gate,up": (4096, 14336), "Llama-3-8B down": (14336, 4096),
         "Llama-3-70B q/o": (8192, 8192), "Llama-3-70B k,v": (8192, 1024),
         "Llama-3-70B gate,up": (8192, 28672), "Llama-3-70B down": (28672, 8192)}
SQUARES = {"square 8192": (8192, 8192, 8192), "square 16384": (16384, 16384, 16384)}
#: Small correctness modules (with IREE's own @reference): dtype, M, N, K, batch, trans_a, trans_b, out.
CHECKS = [("bf16", 1000, 1000, 1000, 1, True, False, "f32"),
          ("f16", 1000, 1032, 776, 3, False, True, "f16"),
          ("f32", 1000, 1000, 1000, 1, False, False, "f32")]
#: IREE flags of ``--cpu`` (dry-run) bundles.
CPU_FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host")
#: Tuning configurations per input class (KernelConfig labels).
TUNE_CONFIGS = {
    "16bit": ["128x256x64,s3,w8,g8", "128x256x64,s4,w8,g8,sub", "128x256x64,s3,w4,g8,ws",
              "128x256x64,s3,w8,g16", "256x128x64,s3,w8,g8", "128x128x64,s4,w8,g8"],
    "f32": ["128x128x32,s3,w8,g8", "128x128x16,s4,w8,g8", "128x64x32,s3,w4,g8",
            "64x128x32,s3,w4,g8", "128x256x32,s2,w8,g8,sub"],
}


def default_shapes() -> dict:
    """label -> (M, N, K): the squares and the Llama weight shapes at M = 8192 (duplicates merged)."""
    labels = {}
    for label, mnk in list(SQUARES.items()) + [(k, (8192, n, kk)) for k, (kk, n) in LLAMA.items()]:
        labels.setdefault(mnk, []).append(label)
    return {"; ".join(names): mnk for mnk, names in labels.items()}


# --------------------------------------------------------------------------- prepare (here)

def prepare(args) -> int:
    from falcon_mlir.kernels import GemmSpec, compile_kernel, compile_module, gemm_module
    from falcon_mlir.kernels.aot import KERNEL_SOURCE
    from falcon_mlir.kernels.configs import KernelConfig, adapt, choose_config
    from falcon_mlir.kernels.embed import reference_func

    shapes = ({s: parse_shape(s) for s in args.shapes} if args.shapes else default_shapes())
    configs = [None if c == "table" else KernelConfig.parse(c) for c in args.configs]
    out = Path(args.dir)
    if (out / MANIFEST).is_file():  # an older bundle of ours: its modules go
        for old in (out / "modules").glob("*.vmfb"):
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / ".gitignore").write_text("# a build output (scripts/gpu_kernels.py prepare): never committed\n*\n")
    entries, failures, t_all = [], [], time.perf_counter()

    def build(label, spec, config, kind, reference):
        try:
            config = adapt(spec, config) if config is not None else choose_config(spec)
            if args.cpu:
                kernel = _dry_kernel(spec, config)
                t0 = time.perf_counter()
                text = reference_func(spec, "main") + (reference_func(spec) if reference else "")
                vmfb = compile_module(text, CPU_FLAGS)
            else:
                kernel = compile_kernel(spec, config)
                t0 = time.perf_counter()
                vmfb = compile_module(gemm_module(spec, kernel=kernel, reference=reference))
            name = f"{spec.name}__{config.label.replace(',', '_')}"
            write_atomic(out / "modules" / f"{name}.vmfb", vmfb)
            entries.append({"name": name, "label": label, "kind": kind, "file": f"modules/{name}.vmfb",
                            "spec": spec.to_dict(), "config": config.to_dict(), "config_label": config.label,
                            "kernel": kernel.metadata(), "reference": reference,
                            "vmfb_bytes": len(vmfb)})
            log(f"  {name}: triton {kernel.compile_seconds:.1f}s{' (cached)' if kernel.from_cache else ''}, "
                f"iree {time.perf_counter() - t0:.1f}s, cubin {len(kernel.cubin)} B, shared {kernel.shared} B, "
                f"{kernel.threads} threads, {kernel.num_programs} programs")
        except Exception as e:  # one failing configuration must not stop the bundle
            failures.append({"label": label, "spec": spec.name,
                             "config": getattr(config, "label", "table"), "error": f"{type(e).__name__}: {e}"})
            log(f"  FAILED {spec.name} {getattr(config, 'label', 'table')}: {type(e).__name__}: {e}")

    for dtype in args.dtypes:
        for label, (M, N, K) in shapes.items():
            for config in configs:
                build(label, GemmSpec(M, N, K, dtype, dtype, dtype), config, "perf", False)
    if not args.no_checks:
        for dtype, M, N, K, batch, ta, tb, o in CHECKS:
            if dtype in args.dtypes:
                build("check", GemmSpec(M, N, K, dtype, dtype, o, batch=batch, trans_a=ta, trans_b=tb),
                      None, "check", True)
    tune_shapes = [parse_shape(s) for s in args.tune_shapes]
    tune = {"dtypes": list(args.dtypes), "shapes": tune_shapes,
            "configs": {cls: [KernelConfig.parse(c).to_dict() for c in labels]
                        for cls, labels in TUNE_CONFIGS.items()}}
    shutil.copyfile(KERNEL_SOURCE, out / KERNEL_FILE)
    here = Path(__file__).resolve().parent
    for script in ("gpu_kernels.py", "gpu_kernels_run.py"):
        shutil.copyfile(here / script, out / script)
    manifest = {"format": FORMAT, "made": time.strftime("%Y-%m-%d %H:%M:%S"), "entries": entries,
                "failures": failures, "tune": tune,
                "kernel_sha256": hashlib.sha256((out / KERNEL_FILE).read_bytes()).hexdigest()}
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=1))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log(f"prepared {len(entries)} modules ({len(failures)} failed) in {time.perf_counter() - t_all:.0f}s: "
        f"{out} holds {size / 2**20:.1f} MiB")
    return 0 if entries else 1


def _dry_kernel(spec, config):
    """For ``--cpu`` bundles: @main is IREE's own linalg code, so no kernel; the metadata is empty."""
    from falcon_mlir.kernels.aot import CompiledKernel
    return CompiledKernel(spec=spec, config=config, arch="none", name="none", cubin=b"", num_warps=0,
                          shared=0, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
                          profile_scratch_align=1, num_programs=0, triton_version="none", key="dry-run")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "prepare":
        return gpu.main(argv)  # run, tune, check
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    pp = sub.add_parser("prepare", help="build the bundle here")
    pp.add_argument("dir")
    pp.add_argument("--shapes", nargs="+", help="MxNxK ... (default: squares and Llama weights at M=8192)")
    pp.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    pp.add_argument("--configs", nargs="+", default=["table"], help="KernelConfig labels or 'table'")
    pp.add_argument("--tune-shapes", nargs="+", default=["8192x8192x8192", "16384x16384x16384"])
    pp.add_argument("--no-checks", action="store_true", help="leave out the small correctness modules")
    pp.add_argument("--cpu", action="store_true",
                    help="dry-run bundle: @main is IREE's own llvm-cpu code (tests the run logic here)")
    args = p.parse_args(argv)
    try:
        for s in (args.shapes or []) + args.tune_shapes:
            parse_shape(s)
        return prepare(args)
    except ValueError as e:
        log(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
