"""Compile time of forced multi-level plans on a Llama-3-8B-like block (issue 13).

Builds the nine linear layers of one Llama-3-8B decoder block at T tokens
(q, k, v, o projections; gate, up, down; attention scores Q K^T and context P V as
``linalg.batch_matmul`` over the 32 heads, head dim 128) as linalg ops on
function arguments, then times ``falcon-compile`` with each scheme
forced at L levels::

    python scripts/compile_time.py --tokens 256 --levels 2 [--schemes a,b] [--timeout 300]

Prints one Markdown row per scheme: products per contraction (R^L), the
compile-cost estimate of the model (seconds, the nine contractions), wall
seconds, peak RSS, and how many contractions were rewritten (or why none).
Development script; not installed.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

#: (name, batch, K, N) of the nine contractions of a Llama-3-8B block at T tokens
#: (/work/shared/workloads.md); N = 0 stands for T (the attention scores).
LLAMA3_8B = [("q", 0, 4096, 4096), ("k", 0, 4096, 1024), ("v", 0, 4096, 1024),
             ("scores", 32, 128, 0), ("context", 32, 0, 128), ("o", 0, 4096, 4096),
             ("gate", 0, 4096, 14336), ("up", 0, 4096, 14336), ("down", 0, 14336, 4096)]


def block_mlir(tokens: int, layers=LLAMA3_8B, dtype: str = "f32") -> str:
    """A module with one function per linear layer of the block at ``tokens`` rows."""
    funcs = []
    for name, batch, K, N in layers:
        K, N = K or tokens, N or tokens
        pre, op = (f"{batch}x", "batch_matmul") if batch else ("", "matmul")
        ta, tb, tc = (f"tensor<{pre}{tokens}x{K}x{dtype}>", f"tensor<{pre}{K}x{N}x{dtype}>",
                      f"tensor<{pre}{tokens}x{N}x{dtype}>")
        funcs.append(
            f"  func.func @{name}(%x: {ta}, %w: {tb}) -> {tc} {{\n"
            f"    %z = arith.constant 0.0 : {dtype}\n"
            f"    %e = tensor.empty() : {tc}\n"
            f"    %c = linalg.fill ins(%z : {dtype}) outs(%e : {tc}) -> {tc}\n"
            f"    %y = linalg.{op} ins(%x, %w : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n"
            f"    return %y : {tc}\n  }}")
    return "module {\n" + "\n".join(funcs) + "\n}\n"


def _rewritten(report_path: str) -> str:
    """``"9/9 rewritten"``, or why the contractions stayed classical (the report's reason)."""
    import json

    with open(report_path) as f:
        entries = [e for e in json.load(f) if e.get("kind") not in ("not a contraction",)]
    done = [e for e in entries if e.get("plan") != "classical"]
    if done:
        return f"{len(done)}/{len(entries)} rewritten"
    return "classical: " + entries[0]["reason"].split(";")[0] if entries else "no contraction"


def main(argv=None) -> int:
    """Time falcon-compile per scheme; print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--levels", type=int, default=2)
    ap.add_argument("--schemes", default=None, help="comma list (default: the whole catalog)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--extra", default="", help="more lcma-rewrite options, e.g. form=grouped")
    ap.add_argument("--out", default="/tmp/compile_time")
    ap.add_argument("--flags", default="", help="extra iree flags, space separated")
    args = ap.parse_args(argv)
    from falcon_mlir.catalog import load_catalog
    from falcon_mlir.decision.compile_cost import compile_cost

    os.makedirs(args.out, exist_ok=True)
    src = os.path.join(args.out, f"llama3_8b_block_{args.tokens}.mlir")
    with open(src, "w") as f:
        f.write(block_mlir(args.tokens))
    names = args.schemes.split(",") if args.schemes else [s.name for s in load_catalog()]
    bindir = os.path.dirname(sys.executable)
    print("| scheme | R^L | est. units | seconds | peak RSS MB | status |")
    print("|---|---|---|---|---|---|")
    for nm in names:
        from falcon_mlir.catalog import get_scheme

        R = get_scheme(nm).R
        est = sum(compile_cost((nm,) * args.levels, "per-product") for _ in LLAMA3_8B)
        opts = f"scheme={nm} levels={args.levels} {args.extra}".strip()
        out = os.path.join(args.out, "out.vmfb")
        cmd = [os.path.join(bindir, "falcon-compile"), src, "-o", out,
               f"--lcma-rewrite={opts}", f"--lcma-report={args.out}/report.json"] + \
            [x for x in args.flags.split() if x]
        t0 = time.time()
        try:
            p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True,
                               text=True, timeout=args.timeout)
            dt = time.time() - t0
            rss = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "?"
            status = "ok" if p.returncode == 0 else f"rc={p.returncode}: " + \
                (p.stderr.strip().splitlines() or [""])[0][:80]
            rss = f"{int(rss) / 1024:.0f}" if rss.isdigit() else "?"
        except subprocess.TimeoutExpired:
            dt, rss, status = time.time() - t0, "?", f"timeout {args.timeout:.0f} s"
        if status == "ok":
            status = _rewritten(os.path.join(args.out, "report.json"))
        print(f"| {nm} | {R ** args.levels} | {est:.0f} | {dt:.1f} | {rss} | {status} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
