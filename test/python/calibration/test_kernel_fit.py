"""falcon_mlir.calibration.fit.fit_kernel_products and ``falcon-calibrate --refit``: falcon-bench runs made
from a known products factor (and a machine of another speed) are fitted back to it; rows that cannot be
paired are counted, not used; bad input is one line and no file."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from falcon_mlir.calibration.fit import BENCH_COLUMNS, fit_kernel_products, read_bench_csv
from falcon_mlir.decision.cost import CostModel, Problem
from falcon_mlir.decision.profile import Profile, load_profile
from falcon_mlir.tools import falcon_calibrate as fc

#: Shapes Strassen tiles exactly whose products are at least 512 columns wide (no narrow factor).
SHAPES = [(2048, 4096, 4096), (1024, 5120, 13824), (2048, 14336, 4096), (512, 4096, 3584), (3000, 3072, 3072),
          (1024, 2560, 2560)]


def _rows(profile: Profile, shapes, factor: float, speed: float, rng, plan="strassen x1 (7 products, kernel)"):
    """One falcon-bench run's rows: classical and auto's Strassen at the times ``profile`` with
    ``kernel_products = factor`` predicts, all scaled by ``speed`` (another machine) and by a per-shape
    factor common to both (the machine's state, which the ratio cancels), plus a numpy row."""
    cm = CostModel(replace(profile, forms={**profile.forms, "kernel_products": factor}))
    out = []
    for M, N, K in shapes:
        pb = Problem(M, N, K, lhs="f32", rhs="f32", acc="f32")
        s = speed * rng.uniform(0.7, 1.4)
        base = dict(M=M, N=N, K=K, dtype="f32", const_weights="0", status="ok")
        out.append(dict(base, candidate="classical", plan="classical (falcon's kernel)",
                        median_s=f"{cm.classical(pb).seconds * s:.9g}"))
        out.append(dict(base, candidate="auto", plan=plan,
                        median_s=f"{cm.plan(pb, ('strassen',), 'peel', 'kernel').seconds * s:.9g}"))
        out.append(dict(base, candidate="numpy", plan="numpy.matmul (OpenBLAS)", median_s=f"{rng.uniform(0.1, 2):.6g}"))
    return out


def test_fit_recovers_a_known_factor_on_a_machine_of_another_speed():
    prof = load_profile("x86-falcon")
    rng = np.random.default_rng(7)
    tables = [_rows(prof, SHAPES[:3], 1.13, 0.43, rng), _rows(prof, SHAPES[3:], 1.13, 2.9, rng)]
    fitted, r = fit_kernel_products(prof, tables)
    assert (r.before, r.after, r.used, r.narrow, r.other) == (prof.product_factor("kernel"), 1.13, 6, 0, 0)
    assert fitted.product_factor("kernel") == 1.13 and fitted.forms["kernel_combine"] == prof.forms["kernel_combine"]
    assert math.isclose(r.resid_after, 1.0, abs_tol=1e-6) and r.spread < 1e-6
    # the profile's own factor predicted the plans faster than they ran: by its ratio to 1.13 on the
    # products, less on the whole plan (the combines are not scaled)
    assert r.before / 1.13 < r.resid_before < 1.0


def test_fit_pairs_each_shapes_rows_within_its_run():
    """The plan of one shape paired with the classical row of another would fit a different factor."""
    prof = load_profile("x86-falcon")
    rng = np.random.default_rng(11)
    rows = _rows(prof, SHAPES, 0.97, 1.0, rng)
    _, r = fit_kernel_products(prof, [rows])
    assert r.after == 0.97 and r.used == len(SHAPES)
    swapped = [dict(x) for x in rows]
    swapped[1]["median_s"], swapped[4]["median_s"] = rows[4]["median_s"], rows[1]["median_s"]
    _, r2 = fit_kernel_products(prof, [swapped])
    assert r2.after != 0.97 and r2.spread > 0.05


def test_rows_the_fit_cannot_use_are_counted_not_used():
    prof = load_profile("x86-falcon")
    rng = np.random.default_rng(3)
    good = _rows(prof, SHAPES[:2], 1.08, 1.0, rng)
    narrow = _rows(prof, [(2048, 576, 7168)], 9.0, 1.0, rng)  # products 288 wide: the narrow factor's
    two_level = _rows(prof, [(4096, 4096, 4096)], 9.0, 1.0, rng, plan="strassen x2 (49 products, kernel)")
    padded = _rows(prof, [(1001, 4096, 4096)], 9.0, 1.0, rng, plan="strassen x1 (7 products, kernel, M edge padded)")
    failed = _rows(prof, [(2048, 8192, 8192)], 9.0, 1.0, rng)
    failed[1]["status"] = "error"
    bf16 = [dict(x, dtype="bf16") for x in _rows(prof, [(2048, 2048, 8192)], 9.0, 1.0, rng)]
    _, r = fit_kernel_products(prof, [good + narrow + two_level + padded + failed + bf16])
    assert (r.after, r.used, r.narrow, r.other) == (1.08, 2, 1, 4)
    # a CSV with the same shape run twice (--append) is ambiguous: left out, not guessed
    _, r = fit_kernel_products(prof, [good + _rows(prof, SHAPES[:1], 9.0, 1.0, rng)])
    assert (r.after, r.used, r.other) == (1.08, 1, 1)


def test_fit_refuses_what_it_cannot_fit():
    prof = load_profile("x86-falcon")
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match="no shape has both a classical row"):
        fit_kernel_products(prof, [[r for r in _rows(prof, SHAPES, 1.0, 1.0, rng) if r["candidate"] != "auto"]])
    with pytest.raises(ValueError, match="has no kernel form on the CPU"):
        fit_kernel_products(load_profile("h200"), [_rows(prof, SHAPES, 1.0, 1.0, rng)])


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(BENCH_COLUMNS) + ["gflops"])
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return str(path)


def test_refit_command_writes_the_fitted_profile(tmp_path, capsys):
    prof = load_profile("x86-falcon")
    rng = np.random.default_rng(13)
    a = _write(tmp_path / "run1.csv", _rows(prof, SHAPES[:4], 1.01, 0.5, rng))
    b = _write(tmp_path / "run2.csv", _rows(prof, SHAPES[4:], 1.01, 0.5, rng))
    out = tmp_path / "here.json"
    assert fc.main(["--refit", "x86-falcon", "--bench", a, b, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"kernel_products: {prof.product_factor('kernel')} -> 1.01 (fitted to 6 shapes from 2 CSVs" in text
    assert "after 1.000" not in text and "1.000 after" in text and f"wrote {out}" in text
    got = Profile.from_dict(json.loads(out.read_text()), where="here")
    assert got.name == "here" and got.product_factor("kernel") == 1.01
    assert got.gemm == prof.gemm and got.plan_forms == prof.plan_forms and got.min_gain == prof.min_gain
    assert "refitted" in got.provenance and "run1.csv, run2.csv" in got.provenance
    assert read_bench_csv(a)[0]["candidate"] == "classical"  # the inputs are read, not changed


@pytest.mark.parametrize("args, msg, status", [
    (["--refit", "x86-falcon", "-o", "OUT"], "--refit PROFILE and --bench CSV ... go together", 2),
    (["--refit", "x86-falcon", "--bench", "CSV"], "--refit needs -o PROFILE.json", 2),
    (["--refit", "x86-falcon", "--bench", "CSV", "--sizes", "64", "-o", "OUT"], "--sizes does not apply", 2),
    (["--refit", "x86-falcon", "--bench", "CSV", "CSV", "-o", "OUT"], ": given twice", 2),
    (["--refit", "nosuch", "--bench", "CSV", "-o", "OUT"], "unknown target profile 'nosuch'", 1),
    (["--refit", "x86-falcon", "--bench", "NOTCSV", "-o", "OUT"], "NOTCSV: not a falcon-bench CSV (no column M", 1),
    (["--refit", "x86-falcon", "--bench", "MISSING", "-o", "OUT"], "MISSING: No such file or directory", 1),
])
def test_refit_bad_input_is_one_line_and_no_file(tmp_path, capsys, args, msg, status):
    prof = load_profile("x86-falcon")
    paths = {"CSV": _write(tmp_path / "r.csv", _rows(prof, SHAPES, 1.0, 1.0, np.random.default_rng(1))),
             "NOTCSV": str(tmp_path / "notes.txt"), "MISSING": str(tmp_path / "missing.csv"),
             "OUT": str(tmp_path / "out.json")}
    (tmp_path / "notes.txt").write_text("a,b\n1,2\n")
    argv = [paths.get(a, a) for a in args]
    assert fc.main(argv) == status
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and msg.replace("NOTCSV", paths["NOTCSV"]).replace(
        "MISSING", paths["MISSING"]) in err, err
    assert not (tmp_path / "out.json").exists()


def test_refit_refuses_to_write_over_a_bench_csv(tmp_path, capsys):
    """``-o`` naming one of the --bench CSVs (a slip of the command line) would replace the measurements
    with the profile: refused before anything is read, the CSV as it was."""
    prof = load_profile("x86-falcon")
    csv_path = _write(tmp_path / "run.csv", _rows(prof, SHAPES, 1.0, 1.0, np.random.default_rng(2)))
    before = (tmp_path / "run.csv").read_bytes()
    for out in (csv_path, str(tmp_path / "." / "run.csv")):
        assert fc.main(["--refit", "x86-falcon", "--bench", csv_path, "-o", out]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "is the --bench CSV" in err, err
        assert (tmp_path / "run.csv").read_bytes() == before


@pytest.mark.parametrize("edit, msg", [
    (lambda r: r.update(M="x"), "line 2: column M is not a positive integer ('x')"),
    (lambda r: r.update(K="0"), "line 2: column K is not a positive integer ('0')"),
    (lambda r: r.update(N="1024.0"), "line 2: column N is not a positive integer ('1024.0')"),
    (lambda r: r.update(N="1" + "0" * 400), "line 2: column N is not a positive integer"),
    (lambda r: r.update(plan="nosuch x1 (7 products, kernel)"), "unknown scheme 'nosuch'"),
])
def test_refit_bad_rows_are_one_line_naming_the_file(tmp_path, capsys, edit, msg):
    """A row a falcon-bench run cannot have written (a size not a positive integer, an unknown scheme in
    a plan: a CSV edited or from another catalog) is one line naming the file, not an internal error."""
    prof = load_profile("x86-falcon")
    rows = _rows(prof, SHAPES, 1.0, 1.0, np.random.default_rng(4))
    edit(rows[0]) if "nosuch" not in msg else edit(rows[1])
    path = _write(tmp_path / "run.csv", rows)
    out = tmp_path / "out.json"
    assert fc.main(["--refit", "x86-falcon", "--bench", path, "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"falcon-calibrate: error: {path}") and msg in err, err
    assert "internal error" not in err and not out.exists()


def test_refit_short_or_long_line_is_one_line(tmp_path, capsys):
    """A line with fewer or more fields than the header (a file cut short, an edit) is malformed."""
    prof = load_profile("x86-falcon")
    path = _write(tmp_path / "run.csv", _rows(prof, SHAPES, 1.0, 1.0, np.random.default_rng(6)))
    good = (tmp_path / "run.csv").read_text()
    out = tmp_path / "out.json"
    lines = good.splitlines(keepends=True)
    long = "".join(lines[:1] + [lines[1].replace("\n", ",x,y\n")] + lines[2:])
    for text, line in ((good + "a,2048,4096\n", len(lines) + 1), (long, 2)):
        (tmp_path / "run.csv").write_text(text)
        assert fc.main(["--refit", "x86-falcon", "--bench", path, "-o", str(out)]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{path}: line {line}: not a falcon-bench CSV" in err, err
        assert not out.exists()


def test_refit_name_with_a_line_break_is_refused(tmp_path, capsys):
    """The profile's name is printed inside remarks and --lcma-explain lines: a line break would split
    them."""
    prof = load_profile("x86-falcon")
    path = _write(tmp_path / "run.csv", _rows(prof, SHAPES, 1.0, 1.0, np.random.default_rng(8)))
    out = tmp_path / "out.json"
    assert fc.main(["--refit", "x86-falcon", "--bench", path, "-o", str(out), "--name", "a\nb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--name" in err and "control character" in err, err
    assert not out.exists()
