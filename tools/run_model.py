"""Run a real transformer block through plain IREE and through falcon's rewrite.

    python tools/run_model.py [--tokens 1024] [--lcma auto] [--repeat 3]

Exports keras-hub's Llama decoder block at Llama-3-8B sizes (hidden 4096, MLP
14336, 32 heads, 8 kv heads, head dim 128; random weights made here) to
StableHLO (:mod:`falcon_mlir.models.llama_block`), compiles it once with plain
IREE (classical) and once with falcon (``falcon_mlir.api.compile_str`` with
``lcma``), runs both on the same random inputs on the CPU (llvm-cpu,
``local-task``), and prints one row per contraction (shape and plan from
falcon's report), the relative errors and both modules' times, then a
one-line summary.

Relative error is max-norm relative: ``max|y - y_ref| / max|y_ref|``, against
the classical module's output and (unless ``--no-reference``) against a
float64 numpy evaluation of the same block.  Times are medians of
``--repeat`` calls after one warm-up call each, inputs already on the device,
the two modules' calls interleaved.

Needs the ``models`` extra (jax, keras, keras-hub).  Exits 1 with one line on
failure (``--traceback`` shows the whole error).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from typing import List, Sequence, Tuple

import numpy as np

# Host CPU code with IREE's best CPU matmul flags (data tiling and ukernels,
# about 3.4x faster than IREE's defaults at 2048^3 on the 2-core machine) for
# both builds; --no-data-tiling compares at IREE's default options instead.
BASE_FLAGS = ("--iree-hal-target-device=local",
              "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host")
DATA_TILING_FLAGS = ("--iree-opt-data-tiling=true", "--iree-llvmcpu-enable-ukernels=all")


def _log(msg: str) -> None:
    print(f"[run_model] {msg}", file=sys.stderr, flush=True)


# -- compile --------------------------------------------------------------------
def compile_classical(mlir_text: str, flags: Sequence[str]) -> bytes:
    """Plain IREE (``iree.compiler.compile_str``), no falcon code involved."""
    from iree.compiler import compile_str

    return compile_str(mlir_text, input_type="stablehlo", extra_args=list(flags))


def analyze_only(module_op) -> List[dict]:
    """A stand-in rewrite for ``--lcma analyze``: reports every contraction
    and what the ``auto`` decision (cost model, host profile) would do, and
    changes nothing."""
    from falcon_mlir.ir.contraction import find_contractions, format_location
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, plan_for

    root = module_op.operation if hasattr(module_op, "operation") else module_op
    options = LcmaOptions.parse("")
    report = []
    for c in find_contractions(root):
        plan, why = plan_for(c, options)
        report.append({
            "location": format_location(c.op.location, "llama_block.mlir"),
            "op": c.op.name, "kind": c.describe_kind(), "M": c.M, "N": c.N, "K": c.K,
            "batch": list(c.batch), "plan": "classical",
            "reason": ("not applied (analyze): " + why) if plan else why,
        })
    return report


def compile_falcon(mlir_text: str, lcma, flags: Sequence[str]) -> Tuple[bytes, List[dict]]:
    """falcon's build: ``(vmfb, report)``; the report has one dict per
    contraction found (location, kind, M, N, K, batch, plan, reason).
    ``lcma``: an option string for ``falcon_mlir.api.compile_str``, None (no
    rewrite), or ``"analyze"`` (report only, see :func:`analyze_only`)."""
    from falcon_mlir.api import compile_str

    if lcma == "analyze":
        lcma = analyze_only

    vmfb, report = compile_str(mlir_text, target_backends=(), extra_args=list(flags),
                               input_type="stablehlo", lcma=lcma, return_report=True,
                               input_name="llama_block.mlir")
    return vmfb, list(report or [])


# -- run ------------------------------------------------------------------------
class Loaded:
    """A vmfb loaded on a fresh ``local-task`` device, with its inputs uploaded once."""

    def __init__(self, vmfb: bytes, args: Sequence[np.ndarray], driver: str = "local-task"):
        import iree.runtime as rt

        self.config = rt.Config(driver)
        self.ctx = rt.SystemContext(config=self.config)
        vm = rt.VmModule.copy_buffer(self.ctx.instance, vmfb)
        self.ctx.add_vm_module(vm)
        self.fn = self.ctx.modules[vm.name]["main"]
        self.args = [rt.asdevicearray(self.config.device, a) for a in args]

    def __call__(self) -> np.ndarray:
        out = self.fn(*self.args)
        if isinstance(out, (tuple, list)):
            out = out[0]
        return np.asarray(out.to_host())


def rel_err(y: np.ndarray, ref: np.ndarray) -> float:
    ref = np.asarray(ref, dtype=np.float64)
    scale = float(np.max(np.abs(ref)))
    return float(np.max(np.abs(np.asarray(y, dtype=np.float64) - ref))) / (scale or 1.0)


# -- report ---------------------------------------------------------------------
def plan_text(plan) -> str:
    if not plan or plan == "classical":
        return "classical"
    if isinstance(plan, dict):
        text = " + ".join(plan.get("schemes", [])) or "?"
        if plan.get("edge"):
            text += f" ({plan['edge']})"
        return text
    return str(plan)


_ARG = re.compile(r"%arg(\d+)\b")

#: keras-hub variable names -> the usual Llama projection names.
LAYER_NAMES = {
    "query": "q_proj", "key": "k_proj", "value": "v_proj", "attention_output": "o_proj",
    "feedforward_gate_dense": "gate_proj", "feedforward_intermediate_dense": "up_proj",
    "feedforward_output_dense": "down_proj",
}


def what_is(location: str, mlir_text: str, weight_names: Sequence[str]) -> str:
    """Names the layer a report location points at, from the exported text's
    line: the weight argument it reads (``q_proj`` ...), else ``attention
    scores`` / ``attention values`` for the batched products."""
    m = re.search(r":(\d+):\d+$", location or "")
    if not m:
        return ""
    lines = mlir_text.splitlines()
    line_no = int(m.group(1))
    if not 1 <= line_no <= len(lines):
        return ""
    line = lines[line_no - 1]
    for a in _ARG.findall(line):
        i = int(a)
        if 1 <= i <= len(weight_names):
            name = weight_names[i - 1]
            name = name.split("/")[-2] if "/" in name else name
            return LAYER_NAMES.get(name, name)
    if "batching_dims" in line:
        earlier = sum("batching_dims" in ln for ln in lines[:line_no - 1])
        return "attention scores" if earlier == 0 else "attention values"
    return ""


def fmt_s(t: float) -> str:
    return f"{t * 1e3:.1f} ms" if t < 1.0 else f"{t:.2f} s"


def print_table(rows: List[dict], mlir_text: str, weight_names: Sequence[str]) -> None:
    headers = ["#", "location", "layer", "kind", "M", "N", "K", "batch", "plan", "reason"]
    body = []
    for i, r in enumerate(rows, 1):
        batch = r.get("batch") or []
        body.append([str(i), str(r.get("location", "")),
                     what_is(str(r.get("location", "")), mlir_text, weight_names),
                     str(r.get("kind", "")), str(r.get("M", "")), str(r.get("N", "")),
                     str(r.get("K", "")), "x".join(str(b) for b in batch) or "-",
                     plan_text(r.get("plan")), str(r.get("reason", ""))])
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None
    if Console is not None:
        t = Table(title="contractions (falcon report)")
        for h in headers:
            t.add_column(h, justify="right" if h in ("#", "M", "N", "K") else "left",
                         overflow="fold")
        for row in body:
            t.add_row(*row)
        Console(width=max(120, _term_width())).print(t)
        return
    widths = [max(len(h), *(len(row[j]) for row in body)) if body else len(h)
              for j, h in enumerate(headers)]
    print("contractions (falcon report)")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for row in body:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 200


# -- main -----------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="run_model.py",
        description="Llama-3-8B decoder block (keras-hub, JAX -> StableHLO): plain IREE vs falcon on the CPU.")
    p.add_argument("--tokens", type=int, default=1024, help="sequence length M (default 1024)")
    p.add_argument("--lcma", default="auto",
                   help='falcon rewrite options: "auto" (default), "scheme=S levels=L", "none" (no '
                        'rewrite), or "analyze" (report what auto would do, rewrite nothing)')
    p.add_argument("--repeat", type=int, default=3, help="timed calls per module (median; default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of inputs (weights use seed+1)")
    p.add_argument("--small", action="store_true",
                   help="small test block (hidden 256, MLP 512, 4 heads, 2 kv heads)")
    p.add_argument("--no-data-tiling", dest="data_tiling", action="store_false",
                   help="leave out " + " ".join(DATA_TILING_FLAGS) + " (on by default, both builds)")
    p.add_argument("--iree-flag", action="append", default=[], metavar="FLAG",
                   help="extra iree-compile flag for both builds (repeatable)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the float64 numpy reference (about 15 s at full size)")
    p.add_argument("--save-dir", default=None,
                   help="write block.mlir, classical.vmfb, falcon.vmfb, report.json there")
    p.add_argument("--json", default=None, help="write the results as JSON to this file")
    p.add_argument("--traceback", action="store_true", help="show the full error on failure")
    args = p.parse_args(argv)
    if args.tokens < 1 or args.repeat < 1:
        p.error("--tokens and --repeat must be >= 1")
    return args


def run(args) -> dict:
    from falcon_mlir.models.llama_block import LLAMA3_8B, SMALL, LlamaBlock, library_versions

    lcma = args.lcma.strip()
    lcma = None if lcma.lower() in ("none", "off", "") else lcma
    flags = list(BASE_FLAGS) + (list(DATA_TILING_FLAGS) if args.data_tiling else [])
    flags += list(args.iree_flag)

    cfg = (SMALL if args.small else LLAMA3_8B).with_tokens(args.tokens)
    t0 = time.perf_counter()
    block = LlamaBlock(cfg)
    text = block.export_mlir()
    names = [n for n, _ in block.weight_specs()]
    _log(f"exported {cfg.name} block ({len(text.splitlines())} lines of StableHLO, "
         f"{sum(int(np.prod(s)) for _, s in block.weight_specs()) / 1e6:.0f} M weights as arguments) "
         f"in {time.perf_counter() - t0:.1f} s; {library_versions()}")

    t0 = time.perf_counter()
    x = block.random_inputs(args.seed)
    weights = block.random_weights(args.seed + 1)
    _log(f"random inputs and weights in {time.perf_counter() - t0:.1f} s")

    t0 = time.perf_counter()
    vm_classical = compile_classical(text, flags)
    t_cc = time.perf_counter() - t0
    _log(f"classical compile {t_cc:.1f} s")
    t0 = time.perf_counter()
    vm_falcon, report = compile_falcon(text, lcma, flags)
    t_cf = time.perf_counter() - t0
    _log(f"falcon compile {t_cf:.1f} s ({len(report)} contractions in the report)")

    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
        for name, data in (("block.mlir", text.encode()), ("classical.vmfb", vm_classical),
                           ("falcon.vmfb", vm_falcon),
                           ("report.json", json.dumps(report, indent=1).encode())):
            with open(os.path.join(args.save_dir, name), "wb") as f:
                f.write(data)

    inputs = [x, *weights]
    mod_c = Loaded(vm_classical, inputs)
    mod_f = Loaded(vm_falcon, inputs)
    y_c, y_f = mod_c(), mod_f()  # warm-up calls
    # Interleaved, so that drift of the machine's speed hits both alike.
    times_c, times_f = [], []
    for _ in range(args.repeat):
        for mod, times in ((mod_c, times_c), (mod_f, times_f)):
            t0 = time.perf_counter()
            mod()
            times.append(time.perf_counter() - t0)
    del mod_c, mod_f
    _log("classical: " + ", ".join(fmt_s(t) for t in times_c))
    _log("falcon:    " + ", ".join(fmt_s(t) for t in times_f))

    if not (np.all(np.isfinite(y_c)) and np.all(np.isfinite(y_f))):
        raise RuntimeError("non-finite values in the output")
    res = {
        "model": cfg.name, "config": {k: getattr(cfg, k) for k in (
            "hidden", "intermediate", "heads", "kv_heads", "head_dim", "tokens", "batch")},
        "lcma": args.lcma, "flags": flags,
        "compile_s": {"classical": t_cc, "falcon": t_cf},
        "time_s": {"classical": statistics.median(times_c), "falcon": statistics.median(times_f)},
        "times_s": {"classical": times_c, "falcon": times_f},
        "rel_err_vs_classical": rel_err(y_f, y_c),
        "report": report,
    }
    if not args.no_reference:
        t0 = time.perf_counter()
        y64 = block.reference_f64(x, weights)
        res["rel_err_vs_f64"] = {"classical": rel_err(y_c, y64), "falcon": rel_err(y_f, y64)}
        _log(f"float64 reference in {time.perf_counter() - t0:.1f} s")

    print_table(report, text, names)
    tc, tf = res["time_s"]["classical"], res["time_s"]["falcon"]
    lines = [f"relative error (max-norm) falcon vs classical: {res['rel_err_vs_classical']:.2e}"]
    if "rel_err_vs_f64" in res:
        e = res["rel_err_vs_f64"]
        lines.append(f"relative error vs float64 numpy: classical {e['classical']:.2e}, "
                     f"falcon {e['falcon']:.2e}")
    lines.append(f"time (median of {args.repeat}): classical {fmt_s(tc)}, falcon {fmt_s(tf)}, "
                 f"speed-up classical/falcon {tc / tf:.2f}x; compile classical {t_cc:.1f} s, "
                 f"falcon {t_cf:.1f} s")
    print("\n".join(lines))
    rewritten = sum(1 for r in report if r.get("plan") not in (None, "classical"))
    summary = (f"{cfg.name} block, {cfg.tokens} tokens: falcon {fmt_s(tf)} vs classical {fmt_s(tc)} "
               f"({tc / tf:.2f}x), rel. error {res['rel_err_vs_classical']:.1e}, "
               f"{rewritten} of {len(report)} contractions rewritten")
    print(summary)
    res["summary"] = summary
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return res


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except KeyboardInterrupt:
        print("run_model: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one line unless --traceback
        if args.traceback:
            raise
        msg = " ".join(str(e).split())
        if len(msg) > 400:
            msg = msg[:400] + " ..."
        print(f"run_model: error: {type(e).__name__}: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
