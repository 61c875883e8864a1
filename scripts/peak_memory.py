#!/usr/bin/env python3
"""Peak memory of a classical and a falcon module for one matmul, measured.

    python3 scripts/peak_memory.py [--shape 4096x4096x4096] [--lcma auto]
                                 [--candidates "auto,scheme=strassen levels=2"] [--md FILE]

For ``C = A @ B`` (f32, A: M x K, B: K x N, random normal inputs) it compiles
classical IREE (data tiling + ukernels, the benchmark's ``best`` flags) and
falcon's candidates with :func:`falcon_mlir.compile_str`, then runs each
module in a fresh child process: the child loads the module, makes the inputs
and puts them on the device, records its resident set size (RSS), calls the
function twice and records the peak RSS (``ru_maxrss``). The module's peak
memory is ``peak - before``: what the call itself allocates (IREE's transient
buffers: packed operands, combined operands, products, the result). Both
numbers are printed (MiB) with the ratio falcon / classical, next to the cost
model's predicted temporaries (``temp_bytes`` of the report).

Exit status 0; 2 for a bad command line (one line on stderr).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

from falcon_mlir.bench.shapes import parse_shapes
from falcon_mlir.cli import ArgumentParser, ToolError, run_tool
from falcon_mlir.files import write_atomic

CHILD = r"""
import json, resource, sys
import numpy as np
import iree.runtime as rt
path, M, N, K = sys.argv[1], *map(int, sys.argv[2:5])
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
cfg = rt.Config("local-task")
ctx = rt.SystemContext(config=cfg)
with open(path, "rb") as f:
    vm = rt.VmModule.copy_buffer(ctx.instance, f.read())
ctx.add_vm_module(vm)
fn = ctx.modules[vm.name]["mm"]
rng = np.random.default_rng(0)
a = rt.asdevicearray(cfg.device, rng.standard_normal((M, K), dtype=np.float32))
b = rt.asdevicearray(cfg.device, rng.standard_normal((K, N), dtype=np.float32))
before = rss()
base_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
for _ in range(2):
    out = fn(a, b)
    out.to_host()
    del out
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"before": before, "peak": peak, "base_peak": base_peak}))
"""



def measure(vmfb: bytes, M: int, N: int, K: int, tmp: str, name: str) -> dict:
    """Run the module's ``@mm`` twice in a fresh child process; its RSS
    before the calls and peak RSS (bytes)."""
    path = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", name.lower()) + ".vmfb")
    with open(path, "wb") as f:
        f.write(vmfb)
    r = subprocess.run([sys.executable, "-c", CHILD, path, str(M), str(N), str(K)],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    return run_tool("peak_memory", _main, argv)


def _main(argv: list) -> int:
    p = ArgumentParser(prog="peak_memory", description=__doc__.split("\n\n")[0], usage_status=2)
    p.add_argument("--shape", default="4096x4096x4096", help="MxNxK")
    p.add_argument("--candidates", default="auto", help="comma-separated lcma option strings")
    p.add_argument("--md", help="append the table to this markdown file")
    args = p.parse_args(argv)
    try:
        [shape] = parse_shapes(args.shape)
    except ValueError:
        raise ToolError(f"peak_memory: error: --shape {args.shape!r} is not MxNxK", 2) from None
    M, N, K = shape.mnk
    from falcon_mlir import compile_str
    from falcon_mlir.ir.matmul_text import matmul_mlir
    from falcon_mlir.runner import BEST_CPU_FLAGS

    text = matmul_mlir(M, N, K)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["classical"] + [c.strip() for c in args.candidates.split(",") if c.strip()]:
            lcma = None if name == "classical" else name
            vmfb, report = compile_str(text, target_backends=["llvm-cpu"], extra_args=list(BEST_CPU_FLAGS),
                                       lcma=lcma, return_report=True)
            r = measure(vmfb, M, N, K, tmp, name)
            e = report[0] if report else {}
            plan = e.get("plan")
            plan = "+".join(plan["schemes"]) + f" ({plan['form']})" if isinstance(plan, dict) \
                else "classical"
            pt = e.get("predicted_time") or {}
            rows.append((name, plan, r["peak"] - r["before"], r["peak"], pt.get("temp_bytes")))
            print(f"[peak_memory] {name}: {plan}: call {(r['peak'] - r['before']) / 2**20:.0f} MiB, "
                  f"process peak {r['peak'] / 2**20:.0f} MiB", file=sys.stderr, flush=True)
    cls = rows[0][2]
    mib = lambda x: f"{x / 2 ** 20:.0f}"
    lines = [f"Peak memory, C = A @ B f32 {M}x{N}x{K} (MiB; call = peak RSS during two calls "
             "minus RSS before them, inputs already on the device)", "",
             "| candidate | plan | call peak MiB | vs classical | process peak MiB | "
             "model's temporaries MiB |", "|---|---|---|---|---|---|"]
    for name, plan, call, peak, temp in rows:
        lines.append(f"| {name} | {plan} | {mib(call)} | {call / cls:.2f}x | {mib(peak)} | "
                     f"{mib(temp) if temp else '-'} |")
    out = "\n".join(lines)
    print(out)
    if args.md:
        old = open(args.md, "rb").read() if os.path.exists(args.md) else b""
        write_atomic(args.md, old + (out + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
