"""``pick`` of scripts/gpu_kernels.py (here, with falcon-mlir): a ``tune`` result's winners into the
configuration table.

From a ``tune`` result, the fastest candidate per dtype and output-size class
(:data:`MN_CLASSES`; geometric mean of its speed against cuBLAS over the
class's shapes) is written into ``configs.json`` as ``tuned-*`` entries with a
``source`` note (date, GPU, Triton, numbers). The classes also sort
``prepare``'s 16-bit tuning jobs (``gpu_kernels.TUNE_16BIT``).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from gpu_kernels_common import log, write_atomic

#: Output-size classes (M*N, inclusive bounds) of 16-bit tuning and of the table's tuned entries.
#: At M = 8192: small = N <= 2048 (k,v; DeepSeek kv_a, q_a), mid = N <= 4096, large = the rest.
MN_CLASSES = (("mn-small", 1, 8192 * 2048), ("mn-mid", 8192 * 2048 + 1, 8192 * 4096),
              ("mn-large", 8192 * 4096 + 1, None))


def mn_class(M: int, N: int) -> str:
    """The output-size class (``MN_CLASSES``) of an M x N output."""
    for name, lo, hi in MN_CLASSES:
        if M * N >= lo and (hi is None or M * N <= hi):
            return name
    raise ValueError(f"no class for {M}x{N}")  # pragma: no cover - the classes cover every size


def _geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _speeds(result: dict) -> dict:
    """(dtype, f32 mode, class) -> config -> shape -> speed against cuBLAS, of the correct candidate rows."""
    groups = {}
    for r in result["rows"]:
        if r["name"] == "torch.matmul" or not r.get("ok") or "vs_torch" not in r:
            continue
        s = r["spec"]
        mode = r.get("f32_mode", "ieee")
        cls = "f32" if s["a_dtype"] == "f32" else mn_class(s["M"], s["N"])
        groups.setdefault((s["a_dtype"], mode, cls), {}).setdefault(r["config"], {})[
            f"{s['M']}x{s['N']}x{s['K']}"] = r["vs_torch"]
    return groups


def _winner(by_cfg: dict, head: str) -> tuple:
    """(config, note) of one class: the best geometric mean among the best-covered candidates; the note
    (``head`` first) gives its ratios, the runner-up, the shapes where another was more than 5% faster."""
    shapes = sorted({sh for ratios in by_cfg.values() for sh in ratios})
    most = max(len(r) for r in by_cfg.values())
    full = {c: r for c, r in by_cfg.items() if len(r) == most}
    ranked = sorted(full.items(), key=lambda kv: -_geomean(list(kv[1].values())))
    (best, ratios), runner = ranked[0], (ranked[1] if len(ranked) > 1 else None)
    each = ", ".join(f"{sh} {ratios[sh]:.3f}x" for sh in shapes if sh in ratios)
    note = (f"{head}: {best} "
            f"{_geomean(list(ratios.values())):.3f}x of cuBLAS, geometric mean over {len(ratios)} shape(s): {each}")
    if runner:
        note += f"; runner-up {runner[0]} {_geomean(list(runner[1].values())):.3f}x"
    better = []
    for sh in shapes:
        top_cfg, top = max(((c, r[sh]) for c, r in by_cfg.items() if sh in r), key=lambda cr: cr[1])
        if sh in ratios and top > 1.05 * ratios[sh]:
            better.append(f"{sh} {top_cfg} {top:.3f}x")
    if better:
        note += "; faster there: " + ", ".join(better)
    if most < len(shapes):
        note += f" (candidates measured on {most} of {len(shapes)} shapes)"
    return best, note


def _table_entry(dtype: str, mode: str, cls: str, best: str, note: str) -> dict:
    """The ``tuned-*`` table entry of one class: f32 per f32 mode (min_m 65), 16-bit per output-size class."""
    if dtype == "f32":
        name, inputs = f"tuned-{'f32' if mode == 'ieee' else mode}", ["f32" if mode == "ieee" else mode]
        if mode != "ieee":
            note += " [not IEEE FMA]"
        entry = {"name": name, "inputs": inputs, "out": ["f32"], "min_m": 65}
    else:
        lo, hi = next((lo, hi) for n, lo, hi in MN_CLASSES if n == cls)
        entry = {"name": f"tuned-{dtype}-{cls}", "inputs": [dtype], "out": [dtype], "min_m": 65, "min_mn": lo}
        if hi is not None:
            entry["max_mn"] = hi
    entry.update(config=best, source=note)
    return entry


def pick_entries(result: dict, date: str = None) -> list:
    """Table entries (``tuned-*``) from a ``tune`` result: per dtype (and f32 mode) and class, the
    candidate with the best geometric mean of its speed against cuBLAS over the class's shapes.

    Only correct (``ok``) rows count; a candidate must have been measured on every shape of its class
    that has any correct candidate (else the best-covered ones compete). f32 jobs form one class.
    The ``source`` note gives the date (the result's, else ``date``, else today), the GPU, Triton, every
    shape's ratio (cuBLAS time / kernel time, both by CUDA events) and the shapes where another
    candidate was more than 5% faster.
    """
    env = result.get("env", {})
    made = date or env.get("date") or time.strftime("%Y-%m-%d")
    gpu_name = env.get("gpu", "GPU")
    who = f"Triton {env.get('triton', '?')} JIT"
    order = {"bf16": 0, "f16": 1, "f32": 2}
    cls_order = {name: i for i, (name, _, _) in enumerate(MN_CLASSES)}
    entries = []
    for (dtype, mode, cls), by_cfg in sorted(_speeds(result).items(), key=lambda kv: (
            order[kv[0][0]], kv[0][1], cls_order.get(kv[0][2], 0))):
        best, note = _winner(by_cfg, f"{gpu_name} tune {made} ({who}; speed = cuBLAS time / kernel time, both by "
                                     "CUDA events: do_bench median, L2 flushed)")
        entries.append(_table_entry(dtype, mode, cls, best, note))
    return entries


def _narrow(entry: dict) -> bool:
    """A table entry for a narrow corner (``max_m`` or ``max_n`` set): kept ahead of the tuned classes."""
    return entry.get("max_m") is not None or entry.get("max_n") is not None


def pick(args) -> int:
    from falcon_mlir.kernels import GemmSpec
    from falcon_mlir.kernels.configs import TABLE_PATH, choose_config, load_table

    result = json.loads(Path(args.results).read_text())
    if result.get("mode") != "tune":
        log(f"error: {args.results} is not a tune result (mode {result.get('mode')!r})")
        return 2
    new = pick_entries(result, args.date)
    if not new:
        log("error: no correct candidate rows in the result")
        return 1
    table_path = Path(args.table) if args.table else TABLE_PATH
    table = json.loads(table_path.read_text())
    kept = [e for e in table["entries"] if not e["name"].startswith("tuned-")]
    # Narrow entries (a bound on M or N: small M, narrow N) stay first, the tuned ones (min_m 65) come
    # before every other entry.
    narrow = [e for e in kept if _narrow(e)]
    table["entries"] = narrow + new + [e for e in kept if not _narrow(e)]
    text = json.dumps(table, indent=2) + "\n"
    for e in new:
        log(f"{e['name']}: {e['config']}\n    {e['source']}")
    if args.dry_run:
        return 0
    write_atomic(table_path, text)
    load_table.cache_clear()
    load_table(str(table_path))  # still a valid table
    for r in result["rows"]:
        if r["name"] == "torch.matmul" or r.get("f32_mode", "ieee") != "ieee":
            continue
        s = r["spec"]
        spec = GemmSpec(s["M"], s["N"], s["K"], s["a_dtype"], s["a_dtype"], s["a_dtype"])
        r["table"] = choose_config(spec, str(table_path)).label
    chosen = sorted({(f"{r['spec']['a_dtype']} {r['spec']['M']}x{r['spec']['N']}x{r['spec']['K']}", r["table"])
                     for r in result["rows"] if "table" in r})
    for shape, label in chosen:
        log(f"  the table now gives {shape}: {label}")
    log(f"wrote {len(new)} tuned entries into {table_path}")
    return 0


