#!/usr/bin/env python3
"""The main job on a GPU: the Llama-3-8B decoder block through plain IREE, through
falcon (its generated sm_90a kernels) and through JAX/XLA, on one CUDA device.

Two halves, like ``scripts/gpu_check.py``:

* ``prepare DIR [--tokens 4096] [--dtypes bfloat16 float16] [--kernels OPTIONS]`` runs HERE
  (falcon_mlir, IREE's compiler, jax, keras-hub): it exports keras-hub's block
  (:mod:`falcon_mlir.models.llama_block`) to StableHLO lowered for CUDA, and
  for each dtype compiles

    - ``iree_<dtype>.vmfb``: plain IREE (``iree.compiler.compile_str``,
      ``--iree-hal-target-device=cuda --iree-cuda-target=sm_80``). IREE 3.13
      cannot compile the bf16 block for CUDA ("failed to distribute" on a
      bf16 x bf16 -> bf16 matmul); the manifest keeps its error line;
    - ``falcon_<dtype>.vmfb``: falcon-compile's pipeline with the same flags
      (:func:`falcon_mlir.compile_str`: lcma-rewrite on the ``h200-falcon``
      profile, falcon-kernels, falcon-tiles), and its report;
    - ``jax_<dtype>.bin``: the block as a serialized ``jax.export`` for CUDA
      (the peer: XLA on the same GPU).

  With ``--train [--steps 10] [--lr 0.5] [--small] [--target cpu]`` (default
  dtypes: bfloat16 only) the bundle holds the training
  step instead (:class:`falcon_mlir.models.train_step.TrainStep`: loss,
  ``jax.value_and_grad``, SGD) in mixed precision: float32 master params,
  ``x`` and ``target``, the block computed in the dtype (bf16 x bf16
  projections accumulated in float32 by IREE and XLA), loss and update in
  float32 (float16 with a static loss scale, ``TrainStep``'s ``LOSS_SCALE``);
  ``iree_train_<dtype>.vmfb``, ``falcon_train_<dtype>.vmfb`` and
  ``jax_train_<dtype>.bin`` (``jax.export`` of the same step). IREE 3.13
  cannot compile the bf16 step for CUDA either (the same error, on the q
  projection); the f16 step compiles. ``--target cpu`` builds the same
  bundle for this machine (llvm-cpu, JAX's CPU; f16 does not lower there):
  a dry run of both halves, with ``--small`` in about two minutes.

  It writes ``manifest.json`` and copies ``gpu_model_run.py`` and the
  standalone library modules it imports (:mod:`falcon_mlir.bundles`).
* ``python3 DIR/gpu_model_run.py DIR`` runs ON the GPU machine (numpy,
  ml_dtypes, iree-base-runtime, jax): same random inputs for every variant,
  median of ``--repeat`` synchronous calls after warm-up, outputs on the
  device; each output compared with JAX's (max-norm relative error); a
  table with times, effective TFLOP/s and ratios.

The StableHLO is lowered for CUDA (``lowering_platforms=("cuda",)``): JAX's
CPU lowering rejects f16 x f16 -> f32 dots. keras' attention asks for f32
accumulation through ``dot_general``'s ``algorithm`` attribute, which IREE
3.13 rejects; the export drops it (the products keep their f32 result type).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
import time
from pathlib import Path

from falcon_mlir.bundles import copy_standalone
from falcon_mlir.cli import ArgumentParser, ToolError, run_tool
from falcon_mlir.files import write_atomic
from falcon_mlir.runner import CPU_FLAGS

PROG = "gpu_model.py"
IREE_FLAGS = ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80")
RUNNER = "gpu_model_run.py"
STANDALONE = ("falcon_mlir.cli", "falcon_mlir.compare", "falcon_mlir.files", "falcon_mlir.runner")


def _log(msg: str) -> None:
    print(f"[{PROG}] {msg}", file=sys.stderr, flush=True)


def export(block) -> str:
    """StableHLO text of the block lowered for CUDA, ``algorithm`` attributes dropped."""
    lowered = block.jit().trace(*block.arg_specs()).lower(lowering_platforms=("cuda",))
    return re.sub(r", algorithm = <[^>]*>", "", lowered.as_text())


def flops(cfg) -> float:
    """FLOP of one block call: the seven projections and the two attention products."""
    t, h, m, kv = cfg.batch * cfg.tokens, cfg.hidden, cfg.intermediate, cfg.kv_heads * cfg.head_dim
    proj = 2 * t * (2 * h * h + 2 * h * kv + 3 * h * m)
    attn = 2 * 2 * cfg.batch * cfg.heads * cfg.tokens * cfg.tokens * cfg.head_dim
    return float(proj + attn)


def _compile_variant(dir_: Path, name: str, text: str, dtype: str, entry: dict, kernels: str = "auto",
                     stem: str = "", flags=IREE_FLAGS) -> None:
    import falcon_mlir
    from iree.compiler import compile_str

    t0 = time.perf_counter()
    try:
        if name == "iree":
            vmfb = compile_str(text, input_type="stablehlo", extra_args=list(flags))
            report = None
        else:
            vmfb, report = falcon_mlir.compile_str(text, input_type="stablehlo",
                                                   extra_args=list(flags), return_report=True,
                                                   input_name=f"llama_{stem}{dtype}.mlir", kernels=kernels)
    except Exception as e:  # noqa: BLE001 - recorded, the other variants go on
        lines = [ln for ln in str(e).splitlines() if "error" in ln] or [str(e)]
        entry[name] = {"error": " ".join(lines[0].split())[:400]}
        _log(f"{name} {dtype}: does not compile: {entry[name]['error'][:160]}")
        return
    file = f"{name}_{stem}{dtype}.vmfb"
    write_atomic(str(dir_ / file), vmfb)
    entry[name] = {"file": file, "compile_s": round(time.perf_counter() - t0, 1)}
    if report is not None:
        entry[name]["report"] = report
    _log(f"{name} {dtype}: compiled in {entry[name]['compile_s']} s")


def prepare(dir_: Path, tokens: int, dtypes: list, kernels: str = "auto") -> None:
    from falcon_mlir.models.llama_block import LLAMA3_8B, LlamaBlock

    dir_.mkdir(parents=True, exist_ok=True)
    manifest = {"format": 1, "tokens": tokens, "iree_flags": list(IREE_FLAGS), "kernels": kernels, "variants": {}}
    for dtype in dtypes:
        cfg = dataclasses.replace(LLAMA3_8B.with_tokens(tokens), dtype=dtype)
        block = LlamaBlock(cfg)
        text = export(block)
        entry = {"input_shape": list(block.input_shape),
                 "weights": [[n, list(s)] for n, s in block.weight_specs()],
                 "flops": flops(cfg)}
        for name in ("iree", "falcon"):
            _compile_variant(dir_, name, text, dtype, entry, kernels)
        jax_file = f"jax_{dtype}.bin"
        write_atomic(str(dir_ / jax_file), block.export_serialized(("cuda",)))
        entry["jax"] = {"file": jax_file}
        manifest["variants"][dtype] = entry
    _finish(dir_, manifest)


def prepare_train(dir_: Path, tokens: int, dtypes: list, kernels: str = "auto", steps: int = 10,
                  lr: float = 0.5, small: bool = False, target: str = "cuda") -> None:
    """The training-step bundle (``--train``; see the module doc) in ``dir_``:
    for each of ``dtypes`` (the blocks' compute dtype; float32 master
    params) the step at ``tokens`` tokens (Llama-3-8B sizes, or
    :data:`~falcon_mlir.models.llama_block.SMALL`'s with ``small``),
    compiled by plain IREE and by falcon, and its ``jax.export``;
    ``manifest.json`` (``"train": true``, ``steps``, ``lr``, per dtype the
    param and batch shapes and the step's FLOP: 3x the forward pass's, a
    forward, a dX and a dW product per forward product) and the run side.
    ``target="cpu"``: a dry run of the same bundle for this machine (llvm-cpu
    for the host, JAX's CPU; the run side then uses IREE's local-task driver)."""
    from falcon_mlir.models.llama_block import LLAMA3_8B, SMALL
    from falcon_mlir.models.train_step import TrainStep

    dir_.mkdir(parents=True, exist_ok=True)
    base = SMALL if small else LLAMA3_8B
    flags, platform = (IREE_FLAGS, "cuda") if target == "cuda" else (CPU_FLAGS, "cpu")
    manifest = {"format": 1, "train": True, "tokens": tokens, "steps": steps, "lr": lr, "model": base.name,
                "driver": "cuda" if target == "cuda" else "local-task",
                "iree_flags": list(flags), "kernels": kernels, "variants": {}}
    for dtype in dtypes:
        cfg = dataclasses.replace(base.with_tokens(tokens), dtype=dtype)
        ts = TrainStep(cfg, layers=1, lr=lr)
        t0 = time.perf_counter()
        text = ts.export_mlir(platforms=(platform,))
        _log(f"train {dtype}: exported the step ({len(text.splitlines())} lines) in "
             f"{time.perf_counter() - t0:.1f} s")
        entry = {"input_shape": list(ts.block.input_shape),
                 "params": [[n, list(s)] for n, s in ts.param_specs()],
                 "flops": 3 * flops(cfg), "loss_scale": ts.loss_scale}
        for name in ("iree", "falcon"):
            _compile_variant(dir_, name, text, dtype, entry, kernels, stem="train_", flags=flags)
        jax_file = f"jax_train_{dtype}.bin"
        write_atomic(str(dir_ / jax_file), ts.export_serialized((platform,)))
        entry["jax"] = {"file": jax_file}
        manifest["variants"][dtype] = entry
    _finish(dir_, manifest)


def _finish(dir_: Path, manifest: dict) -> None:
    shutil.copyfile(Path(__file__).with_name(RUNNER), dir_ / RUNNER)
    copy_standalone(dir_, STANDALONE)
    write_atomic(str(dir_ / "manifest.json"), (json.dumps(manifest, indent=1) + "\n").encode())
    size = sum(p.stat().st_size for p in dir_.iterdir()) / 2 ** 20
    _log(f"prepared {dir_}: {size:.1f} MiB; run there: python3 {dir_}/{RUNNER} {dir_}")


def _body(argv) -> int:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("prepare", help="compile the bundle here")
    q.add_argument("dir")
    q.add_argument("--tokens", type=int, default=4096)
    q.add_argument("--dtypes", nargs="+", default=None, choices=["bfloat16", "float16", "float32"],
                   help="default: bfloat16 float16 (--train: bfloat16)")
    q.add_argument("--train", action="store_true",
                   help="the training step (float32 master params, the block in the dtype) instead of "
                        "the forward pass")
    q.add_argument("--steps", type=int, default=10, help="training steps the run side times (--train; "
                                                          "default 10)")
    q.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (--train; default 0.5)")
    q.add_argument("--target", default="cuda", choices=["cuda", "cpu"],
                   help="--train: cpu makes a dry-run bundle for this machine (default cuda)")
    q.add_argument("--small", action="store_true",
                   help="the small test block (hidden 256, MLP 512, 4 heads; --train only)")
    q.add_argument("--kernels", default="auto",
                   help="falcon-kernels options of the falcon variant, as falcon-compile's --falcon-kernels= "
                        "(default auto)")
    args = p.parse_args(argv)
    if args.tokens < 1:
        raise ToolError(f"{PROG}: error: --tokens must be >= 1")
    if args.train:
        if args.steps < 1 or not args.lr > 0:
            raise ToolError(f"{PROG}: error: --steps must be >= 1 and --lr > 0")
        prepare_train(Path(args.dir), args.tokens, args.dtypes or ["bfloat16"], args.kernels, args.steps,
                      args.lr, args.small, args.target)
    elif args.small or args.target != "cuda":
        raise ToolError(f"{PROG}: error: --small and --target go with --train only")
    else:
        prepare(Path(args.dir), args.tokens, args.dtypes or ["bfloat16", "float16"], args.kernels)
    return 0


def main(argv=None) -> int:
    return run_tool(PROG, _body, argv)


if __name__ == "__main__":
    sys.exit(main())
