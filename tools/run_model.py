"""Run a real transformer block through plain IREE, through falcon's rewrite
and, as the peer, under ``jax.jit``.

    python tools/run_model.py [--tokens 1024] [--lcma auto] [--repeat 3] [--dtype bfloat16] [--no-jax]
                              [--matmul-tile-bytes 8388608] [--weights {parameters,arguments}]
    python tools/run_model.py --train [--steps 20] [--tokens 1024] [--layers 1] [--lr 0.5]

Exports keras-hub's Llama decoder block at Llama-3-8B sizes (hidden 4096, MLP
14336, 32 heads, 8 kv heads, head dim 128; random weights made here) to
StableHLO (:mod:`falcon_mlir.models.llama_block`), compiles it once with plain
IREE (classical) and once with falcon (``falcon_mlir.api.compile_str`` with
``lcma``; both with IREE's data tiling and ukernels and 8 MiB matmul tiles,
``--matmul-tile-bytes``), runs both on the same random inputs on the CPU (llvm-cpu,
``local-task``; the weights as IREE parameters, module globals loaded once, as IREE deploys a
model: IREE hoists what depends on them alone, its packs and falcon's combines of B, to module
load; ``--weights arguments`` passes them to every call instead), runs the same keras-hub block with the same weights and
input under ``jax.jit`` on JAX's CPU device (XLA's CPU backend: what a JAX
user gets without IREE; ``--no-jax`` leaves it out), and prints one row per
contraction (shape and plan from falcon's report), the relative errors, the
three runs' times side by side with falcon's speed-up over plain IREE and
over JAX/XLA, then a one-line summary.

Relative error is max-norm relative: ``max|y - y_ref| / max|y_ref|``, against
the classical module's output and (unless ``--no-reference``) against a
float64 numpy evaluation of the same block, and between the IREE outputs and
JAX's; a non-finite output is an error, the errors are printed (no
threshold).  Times are medians of ``--repeat`` calls after one warm-up call
each, inputs already on the device, the three runs' calls interleaved.

With ``--train`` it runs a training step of the block instead (loss,
``jax.value_and_grad``, SGD; :mod:`falcon_mlir.models.train_step`): both
modules run ``--steps`` steps from the same params and batches, each fed its
own returned params; it prints one row per contraction (forward ones, then
backward ones: ``dW`` weight gradients, ``dX via`` input gradients,
attention gradients), the loss of both after every step, the median time
per step of both and their ratio, and the max relative difference of the
loss curves and of the final weights (:mod:`falcon_mlir.models.train_job`).

Needs the ``models`` extra (jax, keras, keras-hub).  Exits 1 with one line on
failure (``--traceback`` shows the whole error), 2 for a bad command line,
130 when interrupted, 128 + N where IREE (or JAX's native code) crashed of
signal N: the work runs in a child process
(:func:`falcon_mlir.cli.run_tool_guarded`) and the line says so, e.g.
``run_model: error: IREE crashed (SIGSEGV) while running the Llama block;
nothing was written``. FALCON_NO_FORK=1 keeps it in one process.
The work is done by :mod:`falcon_mlir.models.main_job`; this file is the
command line.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from falcon_mlir.cli import ArgumentParser, ToolError, one_line, run_tool_guarded
from falcon_mlir.files import unwritable_reason, write_atomic
from falcon_mlir.models.main_job import (DATA_TILING_FLAGS, MATMUL_TILE_BYTES, MAX_MATMUL_TILE_BYTES, WEIGHTS,
                                         print_contractions, result_lines, run_main_job, saved_files)
from falcon_mlir.models.train_job import print_train_contractions, run_train_job, train_result_lines

PROG = "run_model"


def _log(msg: str) -> None:
    print(f"[{PROG}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None):
    """The command line (bad arguments: one line, exit status 2)."""
    p = ArgumentParser(
        prog="run_model.py", usage_status=2,
        description="Llama-3-8B decoder block (keras-hub, JAX -> StableHLO): plain IREE vs falcon on the CPU.")
    p.add_argument("--tokens", type=int, default=1024, help="sequence length M (default 1024)")
    p.add_argument("--lcma", default="auto",
                   help='falcon rewrite options: "auto" (default), "scheme=S levels=L", "none" (no '
                        'rewrite), or "analyze" (report what auto would do, rewrite nothing)')
    p.add_argument("--repeat", type=int, default=3, help="timed calls per module (median; default 3)")
    p.add_argument("--train", action="store_true",
                   help="run a training step (loss, value_and_grad, SGD) for --steps steps instead of "
                        "one forward pass")
    p.add_argument("--steps", type=int, default=20, help="training steps per module (--train; default 20)")
    p.add_argument("--layers", type=int, default=1, help="stacked blocks in the training step (--train; "
                                                         "default 1)")
    p.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (--train; default 0.5)")
    p.add_argument("--seed", type=int, default=0, help="seed of inputs (weights use seed+1)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="the layer's dtype (weights, activations, arguments; default float32); "
                        "bfloat16: JAX exports the projections as bf16 x bf16 -> bf16 (float16: "
                        "JAX cannot lower the block's f16 attention on the CPU; the GPU bundle, "
                        "scripts/gpu_model.py, runs it)")
    p.add_argument("--small", action="store_true",
                   help="small test block (hidden 256, MLP 512, 4 heads, 2 kv heads)")
    p.add_argument("--no-data-tiling", dest="data_tiling", action="store_false",
                   help="leave out " + " ".join(DATA_TILING_FLAGS) + " (on by default, both builds)")
    p.add_argument("--matmul-tile-bytes", type=int, default=None, metavar="BYTES",
                   help="bytes per operand tile of a workgroup of the data-tiled matmuls, both builds "
                        f"(--iree-llvmcpu-matmul-tile-bytes; default {MATMUL_TILE_BYTES}; 0: IREE's default; "
                        f"at most {MAX_MATMUL_TILE_BYTES}; not with --train or --no-data-tiling)")
    p.add_argument("--iree-flag", action="append", default=[], metavar="FLAG",
                   help="extra iree-compile flag for both builds (repeatable)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the float64 numpy reference (about 15 s at full size)")
    p.add_argument("--no-jax", dest="jax", action="store_false",
                   help="leave out the JAX/XLA peer (the block under jax.jit on the CPU)")
    p.add_argument("--external-transients", action="store_true",
                   help="both IREE builds with IREE's external transients: each call's transient memory one "
                        "buffer allocated once, not mapped fresh every call (JAX/XLA unchanged; the --save-dir "
                        "modules' main then takes that buffer last)")
    p.add_argument("--weights", choices=WEIGHTS, default=None,
                   help="how both IREE builds get the block's weights: parameters (default): module globals "
                        "loaded once, as IREE deploys a model, so that IREE hoists what depends on the weights "
                        "alone (its packs, falcon's combines of B) to module load; or arguments of every call "
                        "(JAX/XLA gets them as arguments either way; --train: arguments)")
    p.add_argument("--save-dir", default=None,
                   help="write block.mlir (--train: step.mlir), classical.vmfb, falcon.vmfb, report.json there")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write the results as JSON to this file (not -: the table goes to stdout)")
    p.add_argument("--traceback", action="store_true", help="show the full error on failure")
    args = p.parse_args(argv)
    if args.train and args.external_transients:
        p.error("--external-transients applies to the block's run, not to --train")
    if args.train and args.weights is not None:
        p.error("--weights applies to the block's run, not to --train (a step takes its weights as arguments)")
    args.weights = args.weights or "parameters"
    if args.save_dir and not args.train:  # before the compiles, not minutes into the run
        if os.path.exists(args.save_dir) and not os.path.isdir(args.save_dir):
            p.error(f"--save-dir {args.save_dir}: not a directory")
        for name in saved_files(args.weights) if os.path.isdir(args.save_dir) else ():
            why = unwritable_reason(os.path.join(args.save_dir, name))
            if why:
                p.error(f"--save-dir {args.save_dir}: {name}: {why}")
    if args.json == "-":  # was: a file named '-', after the whole run
        p.error("--json -: stdout is not an output file here (the table goes there); give a file name")
    if args.tokens < 1 or args.repeat < 1:
        p.error("--tokens and --repeat must be >= 1")
    if args.matmul_tile_bytes is not None:
        if args.matmul_tile_bytes < 0:
            p.error("--matmul-tile-bytes must be >= 0 (0: IREE's default)")
        if args.matmul_tile_bytes > MAX_MATMUL_TILE_BYTES:
            p.error(f"--matmul-tile-bytes must be <= {MAX_MATMUL_TILE_BYTES} (iree-compile's 32-bit option)")
        for given, name in ((args.train, "--train"), (not args.data_tiling, "--no-data-tiling")):
            if given:
                p.error(f"--matmul-tile-bytes is not used with {name} (it sizes the data-tiled matmuls of "
                        "the forward pass)")
    else:
        args.matmul_tile_bytes = MATMUL_TILE_BYTES
    for flag in args.iree_flag:  # a global LLVM option: falcon's in-process front half cannot take it
        if flag.startswith("--iree-llvmcpu-matmul-tile-bytes"):
            p.error(f"--iree-flag {flag}: use --matmul-tile-bytes (the builds pass it to their back halves)")
    if args.steps < 1 or args.layers < 1:
        p.error("--steps and --layers must be >= 1")
    if not args.lr > 0:
        p.error("--lr must be > 0")
    if args.train and args.dtype != "float32":
        p.error("--train runs in float32 only (--dtype float32)")
    return args


def run(args) -> dict:
    """Run the job for parsed ``args``, print the table and summary, write
    ``--json``; returns the results (dict)."""
    if args.train:
        job = run_train_job(tokens=args.tokens, steps=args.steps, layers=args.layers, lr=args.lr,
                            lcma=args.lcma, seed=args.seed, small=args.small, data_tiling=args.data_tiling,
                            iree_flags=args.iree_flag, save_dir=args.save_dir, log=_log)
        res = job.data
        print_train_contractions(res["report"], job.classes)
        print("\n".join(train_result_lines(res)))
        print(res["summary"])
        if args.json:
            write_atomic(args.json, json.dumps(res, indent=1, default=str).encode())
        return res
    job = run_main_job(tokens=args.tokens, lcma=args.lcma, repeat=args.repeat, seed=args.seed,
                       small=args.small, data_tiling=args.data_tiling, iree_flags=args.iree_flag,
                       reference=not args.no_reference, save_dir=args.save_dir, log=_log,
                       dtype=args.dtype, jax=args.jax, tile_bytes=args.matmul_tile_bytes,
                       external_transients=args.external_transients, weights=args.weights)
    res = job.data
    print_contractions(res["report"], job.layers)
    print("\n".join(result_lines(res)))
    print(res["summary"])
    if args.json:
        write_atomic(args.json, json.dumps(res, indent=1, default=str).encode())
    return res


#: What the job imports that loads native code and is always installed (IREE; jax and keras, the
#: models extra, are imported by the job, their absence one line of its own): imported first, with
#: Ctrl-C held (:func:`falcon_mlir.cli.run_tool`), so that an interrupt while they load is one line.
_NATIVE = ("falcon_mlir.api", "iree.runtime")


def _paths(argv: list) -> tuple:
    """``(what runs, [json])`` of a command line, for the line after a crash.

    Raises:
        ToolError: a command line that does not parse (the child said why).
    """
    args = parse_args(argv)
    return ("the training step" if args.train else "the Llama block"), [args.json]


def _left(argv: list, since: float):
    """After a crash: where ``--save-dir`` holds files written since the run started (``since``,
    seconds since the epoch: the block and its modules, saved after the compiles), else None."""
    folder = parse_args(argv).save_dir
    if folder and os.path.isdir(folder):
        with os.scandir(folder) as entries:
            if any(e.stat().st_mtime >= since for e in entries):
                return f"the modules saved before it are in {folder}"
    return None


def main(argv=None) -> int:
    """Entry point; returns the exit status (0; 1 failure; 2 bad command line; 130 interrupted;
    128 + N: a crash of signal N, in a child process when ``argv`` is None:
    :func:`falcon_mlir.cli.run_tool_guarded`)."""
    return run_tool_guarded(PROG, _main, argv, doing="running", paths=_paths, left=_left, preload=_NATIVE)


def _main(argv: list) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # one line, after the whole traceback with --traceback
        if args.traceback:
            traceback.print_exc()
        msg = one_line(e)
        if len(msg) > 400:
            msg = msg[:400] + " ..."
        raise ToolError(f"{PROG}: error: {type(e).__name__}: {msg}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
