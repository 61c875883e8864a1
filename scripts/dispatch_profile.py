#!/usr/bin/env python3
"""Per-dispatch times of a compiled CPU module, measured inside the running module.

    python3 scripts/dispatch_profile.py MODULE.vmfb --input @x.npy [--input @w.npy ...]
                                        [--parameters model=weights.irpa] [--function main] [--calls 4]
                                        [--top 40] [--json FILE]

Runs ``iree-benchmark-module`` (from the iree-base-runtime wheel) on ``--device=local-task``
with IREE's HAL profiler on (``--device_profiling_mode=host-execution``: the span from a
dispatch's first to its last workgroup), one warm-up call and ``--calls`` timed calls of
``--function``, and reads the profile back with ``iree-profile dispatch --dispatch_events
--format=jsonl``; the warm-up call's dispatches are left out. Prints the measured calls
(ms), then one row per dispatch: executions per call, ms per call (the median over the calls
of the dispatch's time in each), its share of the sum, GFLOP/s for matmuls whose name gives M x N x K
(``matmul_MxNxK``, ``matmul_like_MxNxK``, ``batch_matmul_BxMxNxK``) and the workgroup count; then the sum of the
dispatches' medians next to the median call. The sum can exceed the call where independent
dispatches ran at the same time on different workers.

Why not ``--iree-hal-dump-executable-benchmarks-to``: those benchmarks run each dispatch on
buffers that are never written, so reads hit the kernel's zero page and no DRAM traffic happens
(a 1024x14336x4096 GEMM of the main job: 340 ms there, 600-660 ms in the module), and some
dispatches (softmax) do not compile alone. IREE 3.13 does not implement the
``dispatch-events`` mode for local devices; ``host-execution`` works.

``--input`` values are iree-benchmark-module's (``@file.npy``, ``2x3xf32=1``, ...), in argument
order. ``--parameters SCOPE=FILE`` (repeatable) serves a module's parameter-backed globals from an
IREE parameter archive, e.g. the ``weights.irpa`` that ``tools/run_model.py --save-dir`` writes. Exit status 0; 1 when the benchmark or the profile fails (one line); 2 for a bad command
line.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from typing import List, Sequence

from falcon_mlir.cli import ArgumentParser, ToolError, run_tool
from falcon_mlir.files import write_atomic

PROG = "dispatch-profile"
_CALL = re.compile(r"^BM_\S+/process_time/real_time\s+([\d.]+) (ms|us|ns|s)\b", re.M)
_SCALE = {"s": 1e3, "ms": 1.0, "us": 1e-3, "ns": 1e-6}
_MM = re.compile(r"(?:^|_)(batch_)?matmul_(?:like_)?((?:\d+x)*\d+)_")
_STATUS = re.compile(r"\b[A-Z][A-Z_]{3,}; ")  # an IREE status: 'file.c:103: INVALID_ARGUMENT; what'


def failure_line(output: str) -> str:
    """The line of a failed IREE tool's output that names the cause: the first IREE status
    (``...: INVALID_ARGUMENT; ...``), else the first line saying error, else the first line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for pick in (lambda ln: _STATUS.search(ln), lambda ln: "error" in ln.lower(), lambda ln: True):
        found = next((ln for ln in lines if pick(ln)), None)
        if found:
            m = _STATUS.search(found)
            if m and "ERROR OCCURRED: '" in found:  # google benchmark's wrapper around the status
                found = found.split("ERROR OCCURRED: '", 1)[1].rstrip("'")
            return found
    return "no output"


def runtime_tool(name: str) -> str:
    """Path of an IREE runtime binary (``iree-benchmark-module``, ``iree-profile``) in the
    iree-base-runtime wheel (``iree/_runtime_libs``).

    Raises:
        ToolError: the wheel or the binary is missing.
    """
    try:
        import iree._runtime_libs as libs
    except ImportError:
        raise ToolError(f"{PROG}: error: iree-base-runtime is not installed") from None
    path = os.path.join(os.path.dirname(libs.__file__), name)
    if not os.path.isfile(path):
        raise ToolError(f"{PROG}: error: {name} not found in {os.path.dirname(path)}")
    return path


def matmul_flops(name: str) -> float:
    """2·M·N·K (times the batch) of a dispatch named ``..._matmul_MxNxK_...`` or
    ``..._batch_matmul_BxMxNxK_...`` (``matmul_like_`` alike: IREE's name for a
    ``linalg.generic`` contraction); 0.0 for any other name."""
    m = _MM.search(name)
    if not m:
        return 0.0
    dims = [int(d) for d in m.group(2).split("x")]
    if len(dims) != (4 if m.group(1) else 3):
        return 0.0
    flops = 2.0
    for d in dims:
        flops *= d
    return flops


def groups_from_events(events: Sequence[dict], runs: int, skip: int = 1) -> List[dict]:
    """Per-dispatch groups from iree-profile's ``host_dispatch_event`` records of ``runs``
    calls, leaving out the first ``skip`` calls (the warm-up: first-touched buffers, waking
    workers; a 1024^3 GEMM's first call took 13.7 ms against 11.0 after).

    A dispatch run ``n`` times in all runs ``n / runs`` times per call: its events, by start
    time, are cut into ``runs`` consecutive equal parts and the first ``skip`` dropped. Where
    ``n`` is not a multiple of ``runs`` (a dispatch not in every call) nothing is dropped and
    no per-call times are given.

    Returns:
        ``[{"key", "count", "total_ns", "per_call_ns" (one sum per kept call, or None),
        "last_workgroup_count"}]`` in first-seen order, over the kept calls.
    """
    by_key: dict = {}
    for e in sorted(events, key=lambda e: e["start_host_time_ns"]):
        by_key.setdefault(e["key"], []).append(e)
    out = []
    for key, evs in by_key.items():
        per_call = None
        if len(evs) % runs == 0 and runs > skip:
            r = len(evs) // runs
            evs = evs[skip * r:]
            per_call = [sum(e["duration_ns"] for e in evs[i:i + r]) for i in range(0, len(evs), r)]
        out.append({"key": key, "count": len(evs), "total_ns": sum(e["duration_ns"] for e in evs),
                    "per_call_ns": per_call, "last_workgroup_count": evs[-1].get("workgroup_count", [0])})
    return out


def summarize(groups: Sequence[dict], calls: int, walls_ms: Sequence[float]) -> dict:
    """The profile as rows: ``groups`` are :func:`groups_from_events`' records (or
    iree-profile's ``host_dispatch_group`` ones: key, count, total_ns,
    last_workgroup_count), ``calls`` the number of profiled calls they hold.

    A group's ms per call is the median of its ``per_call_ns`` where given (the shared
    machine's outliers do not move it), else its total over ``calls``.

    Returns:
        ``{"calls", "call_ms" (list), "median_call_ms", "sum_ms", "rows"}``; each row
        ``{"dispatch", "per_call", "ms", "share", "gflops", "workgroups"}``, ms per call,
        share in % of ``sum_ms``, rows by ms descending.

    Raises:
        ValueError: ``calls`` < 1.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    rows = []
    for g in groups:
        pc = g.get("per_call_ns")
        ms = (statistics.median(pc) if pc else g["total_ns"] / calls) / 1e6
        flops = matmul_flops(g["key"]) * g["count"] / calls
        rows.append({"dispatch": g["key"], "per_call": g["count"] / calls, "ms": ms,
                     "gflops": flops / ms / 1e6 if flops and ms > 0 else None,
                     "workgroups": int(g.get("last_workgroup_count", [0])[0])})
    total = sum(r["ms"] for r in rows)
    for r in rows:
        r["share"] = 100.0 * r["ms"] / total if total > 0 else 0.0
    rows.sort(key=lambda r: -r["ms"])
    return {"calls": calls, "call_ms": list(walls_ms),
            "median_call_ms": statistics.median(walls_ms) if walls_ms else None,
            "sum_ms": total, "rows": rows}


def profile(vmfb: str, inputs: Sequence[str], function: str = "main", calls: int = 4,
            parameters: Sequence[str] = ()) -> dict:
    """Run one warm-up and ``calls`` profiled calls of ``function`` of ``vmfb`` on
    local-task and return :func:`summarize`'s dict of the ``calls`` after the warm-up;
    ``parameters``: iree-benchmark-module's ``--parameters`` values (``scope=file.irpa``).

    Raises:
        ToolError: iree-benchmark-module or iree-profile failed, or the profile holds no
            dispatch (one line).
    """
    bench, prof = runtime_tool("iree-benchmark-module"), runtime_tool("iree-profile")
    with tempfile.TemporaryDirectory(prefix="dispatch_profile_") as tmp:
        out = os.path.join(tmp, "module.ireeprof")
        cmd = [bench, f"--module={vmfb}", f"--function={function}", "--device=local-task",
               *[f"--parameters={v}" for v in parameters],
               *[f"--input={i}" for i in inputs], f"--benchmark_repetitions={calls + 1}",
               "--benchmark_min_time=1x", "--device_profiling_mode=host-execution",
               f"--device_profiling_output={out}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            msg = failure_line(r.stderr + "\n" + r.stdout)
            raise ToolError(f"{PROG}: error: iree-benchmark-module failed: {msg[:300]}")
        walls = [float(v) * _SCALE[u] for v, u in _CALL.findall(r.stdout)][1:]  # after the warm-up
        p = subprocess.run([prof, "dispatch", "--dispatch_events", "--format=jsonl", out], capture_output=True,
                           text=True)
    if p.returncode:
        raise ToolError(f"{PROG}: error: iree-profile failed: {p.stderr.strip()[:300]}")
    events = [json.loads(ln) for ln in p.stdout.splitlines() if '"host_dispatch_event"' in ln]
    events = [e for e in events if e.get("valid", True)]
    if not events:
        raise ToolError(f"{PROG}: error: the profile of {vmfb} holds no dispatch")
    return summarize(groups_from_events(events, calls + 1), calls, walls)


def table_lines(res: dict, top: int = 40) -> List[str]:
    """The printed report of :func:`summarize`'s dict: the calls, the ``top`` rows, the sum."""
    lines = [f"calls (ms): {', '.join(f'{c:.1f}' for c in res['call_ms'])}; "
             f"{res['calls']} profiled",
             f"{'dispatch':72} {'per call':>8} {'ms':>9} {'share':>6} {'GFLOP/s':>8} {'wg':>7}"]
    for r in res["rows"][:top]:
        gf = f"{r['gflops']:.0f}" if r["gflops"] else "-"
        lines.append(f"{r['dispatch'][:72]:72} {r['per_call']:8.3g} {r['ms']:9.1f} {r['share']:5.1f}% "
                     f"{gf:>8} {r['workgroups']:7d}")
    if len(res["rows"]) > top:
        rest = res["rows"][top:]
        lines.append(f"({len(rest)} more dispatches: {sum(r['ms'] for r in rest):.1f} ms)")
    med = res["median_call_ms"]
    lines.append(f"sum of the dispatches {res['sum_ms']:.1f} ms per call; median call "
                 + (f"{med:.1f} ms" if med is not None else "not reported"))
    return lines


def main(argv=None) -> int:
    """Entry point; returns the exit status."""
    return run_tool(PROG, _main, argv)


def _main(argv: list) -> int:
    p = ArgumentParser(prog=PROG, usage_status=2,
                       description="Per-dispatch times of a CPU module inside the running module "
                                   "(IREE's HAL profiler, host-execution spans).")
    p.add_argument("vmfb", help="the compiled module (llvm-cpu)")
    p.add_argument("--input", action="append", default=[], metavar="VALUE",
                   help="an argument as iree-benchmark-module takes it (@file.npy, 4x4xf32=1), in order")
    p.add_argument("--parameters", action="append", default=[], metavar="SCOPE=FILE",
                   help="serve the module's parameters of SCOPE from an IREE parameter archive (.irpa)")
    p.add_argument("--function", default="main", help="function to call (default main)")
    p.add_argument("--calls", type=int, default=4, help="profiled calls (default 4)")
    p.add_argument("--top", type=int, default=40, help="rows printed (default 40)")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    args = p.parse_args(argv)
    if args.calls < 1 or args.top < 1:
        p.error("--calls and --top must be >= 1")
    if not os.path.isfile(args.vmfb):
        raise ToolError(f"{PROG}: error: {args.vmfb}: no such file", 2)
    for i in args.input:
        if i.startswith("@") and not os.path.isfile(i[1:]):
            raise ToolError(f"{PROG}: error: {i[1:]}: no such file", 2)
    for v in args.parameters:
        scope, eq, path = v.partition("=")  # as IREE's tools split it
        if not eq or not path or not scope:
            p.error(f"--parameters {v}: give SCOPE=FILE (e.g. model=weights.irpa)")
        if not os.path.isfile(path):
            raise ToolError(f"{PROG}: error: --parameters {v}: {path}: no such file", 2)
    folder = os.path.dirname(os.path.abspath(args.json)) if args.json else None
    if folder and not os.path.isdir(folder):
        raise ToolError(f"{PROG}: error: --json {args.json}: no such folder {folder}", 2)
    res = profile(args.vmfb, args.input, args.function, args.calls, args.parameters)
    print("\n".join(table_lines(res, args.top)))
    if args.json:
        try:
            write_atomic(args.json, json.dumps(res, indent=1).encode())
        except OSError as e:
            raise ToolError(f"{PROG}: error: --json {args.json}: {e.strerror or e}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
