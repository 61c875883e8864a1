"""scripts/gpu_check.py (the GPU bundle: prepare here, run on a GPU machine with
only numpy and iree-base-runtime): variant syntax, a bundle prepared and run
on the host (local-task), the workloads.md shapes, one-line errors."""

from __future__ import annotations

import pytest


def _gpu_check():
    import importlib.util

    from repo_paths import ROOT

    path = ROOT / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check_t", path)
    gc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gc)
    return gc


def test_gpu_check_variant_syntax():
    gc = _gpu_check()
    assert gc.split_variant(None) == (None, "target=none")
    assert gc.split_variant("scheme=strassen levels=1") == ("scheme=strassen levels=1", "target=none")
    assert gc.split_variant("classical tiles") == (None, "target=auto")
    assert gc.split_variant("scheme=strassen form=grouped tiles=cuda-sm80 prefer=simt64x64") == \
        ("scheme=strassen form=grouped", "target=cuda-sm80 prefer=simt64x64")


def test_gpu_check_rectangular_bundle_on_host(tmp_path):
    """prepare + run on local-task: a non-square shape and a square one, the
    latter also through a format-1 manifest entry (``n`` only)."""
    import json

    import numpy as np

    gc = _gpu_check()
    assert gc.parse_shapes(["64x96x32", "8x8x8,1X2x3"]) == [(64, 96, 32), (8, 8, 8), (1, 2, 3)]
    with pytest.raises(ValueError):
        gc.parse_shapes(["64x96"])
    a, b = gc.make_inputs(64, 96, 32, "f32", 5)
    assert a.shape == (64, 32) and b.shape == (32, 96) and a.dtype == np.float32
    a_old, _ = gc.make_inputs(16, "f16", 5)                      # square, old call form
    assert a_old.shape == (16, 16) and a_old.dtype == np.float16
    from falcon_mlir.ir.matmul_text import matmul_mlir  # the bundle's modules come from it
    assert "tensor<64x32xf32>, tensor<32x96xf32>" in matmul_mlir(64, 96, 32, "f32", func="matmul")

    variants = {"classical": None, "s": "scheme=strassen"}
    man = gc.prepare_gpu_bundle(tmp_path, sizes=[32], shapes=[(64, 96, 32)], dtypes=["f32"],
                                variants=variants, target="host", log=lambda *a: None)
    by_file = {e["file"]: e for e in man["entries"]}
    assert sorted(by_file) == ["f32_32_classical.vmfb", "f32_32_s.vmfb",
                               "f32_64x96x32_classical.vmfb", "f32_64x96x32_s.vmfb"]
    rect = by_file["f32_64x96x32_s.vmfb"]
    assert (rect["M"], rect["N"], rect["K"]) == (64, 96, 32) and "n" not in rect
    assert rect["rewritten"] and rect["products"] == 7
    sq = by_file["f32_32_classical.vmfb"]
    assert (sq["n"], sq["M"], sq["N"], sq["K"]) == (32, 32, 32, 32)
    # old bundles: entries with n only run as square
    on_disk = json.loads((tmp_path / gc.MANIFEST).read_text())
    assert on_disk["entries"] == man["entries"]
    for e in on_disk["entries"]:
        if e.get("n"):
            del e["M"], e["N"], e["K"]
    (tmp_path / gc.MANIFEST).write_text(json.dumps(on_disk))

    rows = gc.run_bundle(tmp_path, driver="local-task", repeat=2, warmup=1, log=lambda *a: None)
    assert len(rows) == 4 and all(r["ok"] and "error" not in r for r in rows), rows
    for r in rows:
        M, N, K = (r["M"], r["N"], r["K"])
        assert r["rel_err"] < 1e-4
        assert r["gflops"] == pytest.approx(2.0 * M * N * K / (r["median_ms"] * 1e-3) / 1e9)
        assert r["reps"] == 2 and r["min_ms"] <= r["median_ms"] and r["allocator"] == "none"
    rect_rows = [r for r in rows if (r["M"], r["N"], r["K"]) == (64, 96, 32)]
    assert [r["variant"] for r in rect_rows] == ["classical", "s"] and "n" not in rect_rows[0]
    assert rect_rows[1]["rel_diff_vs_classical"] < 1e-4 and rect_rows[1]["speedup_vs_classical"] > 0
    assert all(r["n"] == 32 for r in rows if r["M"] == 32)
    md = gc.markdown(rows)
    assert "| f32 | 64x96x32 | s |" in md and "| f32 | 32x32x32 | classical |" in md
    table = gc.summary_table(rows)
    assert "s vs classical" in table and "| f32 | 64x96x32 |" in table

    # --shapes filter, caching allocator
    rows = gc.run_bundle(tmp_path, driver="local-task", repeat=2, warmup=1, shapes=[(64, 96, 32)],
                         allocator="caching", log=lambda *a: None)
    assert [(r["M"], r["variant"], r["allocator"]) for r in rows] == \
        [(64, "classical", "caching"), (64, "s", "caching")]
    assert all(r["ok"] and r["rel_err"] < 1e-4 for r in rows)


def test_gpu_check_workload_shapes():
    import os
    from pathlib import Path

    from repo_paths import ROOT

    gc = _gpu_check()
    shared = os.environ.get("FALCON_SHARED") or ROOT.parent / "shared"
    path = Path(shared) / "workloads.md"
    if not path.exists():
        pytest.skip(f"{path} not found")
    shapes = gc.workload_shapes(path, [8192], ["Llama-3-8B"])
    assert shapes == [(8192, 4096, 4096, "Llama-3-8B q / o"), (8192, 1024, 4096, "Llama-3-8B k, v"),
                      (8192, 14336, 4096, "Llama-3-8B gate, up"), (8192, 4096, 14336, "Llama-3-8B down")]
    two = gc.workload_shapes(path, [512, 8192], ["Llama-3-8B", "Llama-3-70B"])
    assert len(two) == 2 * 8 and (512, 8192, 8192, "Llama-3-70B q / o") in two
    assert [s[0] for s in two[:2]] == [512, 8192]
    # the same (M, N, K) from two sources: one entry, labels joined by "; "
    assert gc._merge_shapes([(8, 4, 4, "a q"), (8, 4, 4, "b o"), (8, 4, 4), (8, 4, 4, "a q")]) == \
        [(8, 4, 4, "a q; b o")]
    every = gc.workload_shapes(path, [8192])
    assert (8192, 4096, 4096, "Llama-3-8B q / o") in every and len({s[:3] for s in every}) == len(every)


def test_gpu_check_bad_input_is_one_line(tmp_path, capsys):
    gc = _gpu_check()
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert gc.main(["table", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_check: error: JSONDecodeError"), err
    # a failed prepare leaves neither the bundle nor its temporary folder
    assert gc.main(["prepare", str(tmp_path / "b"), "--target", "nonsense", "--sizes", "64"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]
