"""falcon-bench on tiny shapes: columns, errors, ratios vs classical, bad arguments,
and the workloads file behind --workloads (falcon_mlir.bench.shapes)."""

from __future__ import annotations

import csv
import math

import pytest

from falcon_mlir.bench import report
from falcon_mlir.tools import falcon_bench


def _run(tmp_path, *extra):
    out_csv, out_md = tmp_path / "b.csv", tmp_path / "b.md"
    argv = ["--shapes", "64x48x80", "--candidates", "classical,scheme=strassen levels=1",
            "--repeat", "2", "--csv", str(out_csv), "--md", str(out_md), *extra]
    assert falcon_bench.main(argv) == 0
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    return argv, rows, out_md.read_text()


def test_bench_tiny(tmp_path, capsys):
    argv, rows, md = _run(tmp_path, "--numpy")
    assert list(rows[0].keys()) == report.COLUMNS
    assert [r["candidate"] for r in rows] == ["classical", "scheme=strassen levels=1", "numpy"]
    for r in rows:
        assert r["status"] == "ok"
        assert (r["M"], r["N"], r["K"]) == ("64", "48", "80")
        assert float(r["rel_err_f64"]) < 1e-5
        assert float(r["rel_err_vs_classical"]) < 1e-5
        med, mn = float(r["median_s"]), float(r["min_s"])
        assert 0 < mn <= med
        assert math.isclose(float(r["gflops"]), 2 * 64 * 48 * 80 / med / 1e9, rel_tol=1e-4)
    cls = float(rows[0]["median_s"])
    assert float(rows[0]["speedup_vs_classical"]) == 1.0
    assert float(rows[0]["rel_err_vs_classical"]) == 0.0
    for r in rows[1:]:
        assert math.isclose(float(r["speedup_vs_classical"]), cls / float(r["median_s"]), rel_tol=1e-4)
    assert rows[0]["plan"] == "classical"
    assert rows[1]["plan"].startswith("strassen x1")
    # markdown: the command line on top, the table with its header
    assert "falcon-bench --shapes 64x48x80" in md.split("```")[1]
    header = "| " + " | ".join(h for h, _ in report.MD_COLUMNS) + " |"
    assert header in md
    assert md.count("| 64x48x80 |") == 3
    printed = capsys.readouterr().out
    assert header in printed


def test_bench_const_weights(tmp_path):
    _, rows, _ = _run(tmp_path, "--const-weights", "--flags", "default")
    assert [r["const_weights"] for r in rows] == ["1", "1"]
    for r in rows:
        assert r["status"] == "ok"
        assert float(r["rel_err_f64"]) < 1e-5


@pytest.mark.parametrize("argv", [
    ["--shapes", "64x48"],
    ["--shapes", "64x48x80", "--candidates", "scheme=nosuchscheme levels=1"],
    ["--shapes", "64x48x80", "--repeat", "0"],
    ["--shapes", "64x48x80", "--dtype", "f64"],
    [],
])
def test_bench_bad_arguments(argv, capsys):
    assert falcon_bench.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("falcon-bench: error: ")


def test_fixed_bench_workloads_mismatched_lists(tmp_path):
    from falcon_mlir.bench.shapes import parse_workloads

    p = tmp_path / "w.md"
    p.write_text("| model | layer | K | N |\n|---|---|---|---|\n| tiny | q/k/v | 16/8 | 16/8/24 |\n")
    with pytest.raises(ValueError):
        parse_workloads(str(p), None)


@pytest.mark.parametrize("content", ["0 16\n",
                                     "| model | layer | K | N |\n|---|---|---|---|\n| t | q | 16 | 0 |\n"])
def test_fixed_bench_workloads_zero_sizes(tmp_path, content):
    from falcon_mlir.bench.shapes import parse_workloads

    p = tmp_path / "w.md"
    p.write_text(content)
    with pytest.raises(ValueError):
        parse_workloads(str(p), None)
