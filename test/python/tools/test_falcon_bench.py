"""falcon-bench on tiny shapes: columns, errors, ratios vs classical and vs
auto, the CPU peers (numpy, torch), bad arguments, and the workloads file
behind --workloads (falcon_mlir.bench.shapes)."""

from __future__ import annotations

import csv
import importlib.util
import math

import statistics

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


HAVE_TORCH = importlib.util.find_spec("torch") is not None
PEERS = ["numpy"] + (["torch"] if HAVE_TORCH else [])


def test_bench_tiny(tmp_path, capsys):
    argv, rows, md = _run(tmp_path, "--numpy")
    assert list(rows[0].keys()) == report.COLUMNS
    assert [r["candidate"] for r in rows] == ["classical", "scheme=strassen levels=1", *PEERS]
    assert {r["interleave"] for r in rows} == {"0"}  # the run's --interleave, recorded
    assert {r["external_transients"] for r in rows} == {"0"}
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
    assert md.count("| 64x48x80 |") == 2 + len(PEERS)
    printed = capsys.readouterr().out
    assert header in printed
    # no auto candidate: no auto speed-up
    assert all(r["auto_speedup"] == "nan" for r in rows)
    # the environment paragraph names the peers' threads and the OpenBLAS variables
    assert "numpy peer: OpenBLAS" in md and "OPENBLAS_NUM_THREADS" in md
    if HAVE_TORCH:
        assert "torch peer: torch" in md and rows[-1]["plan"].startswith("torch.matmul (")


def test_bench_peers_vs_auto(tmp_path):
    """The default peers on the CPU (numpy, and torch where installed) as rows
    with positive times and errors at f32's scale, and every row's auto
    speed-up (its median / auto's) in the CSV and in the quality table."""
    argv, rows, md = _run(tmp_path, "--candidates", "classical,auto", "--quality")
    assert [r["candidate"] for r in rows] == ["classical", "auto", *PEERS]
    auto = float(rows[1]["median_s"])
    for r in rows:
        assert r["status"] == "ok", r
        med = float(r["median_s"])
        assert med > 0 and float(r["gflops"]) > 0
        assert float(r["rel_err_f64"]) < 1e-5
        assert math.isclose(float(r["auto_speedup"]), med / auto, rel_tol=1e-4)
    assert float(rows[1]["auto_speedup"]) == 1.0
    quality = md.split("| shape MxNxK | weights | auto's plan |")[1]
    assert all(f" {p} / auto |" in quality.splitlines()[0] for p in PEERS)
    assert all(f"geometric mean {p}/auto " in md for p in PEERS)


def test_bench_no_peers(tmp_path):
    _, rows, md = _run(tmp_path, "--no-peers")
    assert [r["candidate"] for r in rows] == ["classical", "scheme=strassen levels=1"]
    assert "numpy peer" not in md


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_bench_torch_bf16(tmp_path):
    """bf16 inputs and result: torch multiplies in bf16 (oneDNN), numpy the
    f32 upcast; both at bf16's error scale against float64."""
    _, rows, _ = _run(tmp_path, "--dtype", "bf16", "--candidates", "classical")
    by = {r["candidate"]: r for r in rows}
    assert set(by) == {"classical", "numpy", "torch"}
    assert by["torch"]["plan"].endswith(", bf16)") and "f32 upcast" in by["numpy"]["plan"]
    for r in rows:
        assert r["status"] == "ok" and float(r["median_s"]) > 0
        assert float(r["rel_err_f64"]) < 1e-2
    assert float(by["torch"]["rel_err_f64"]) > 1e-4  # rounded to bf16, as IREE's result


def test_bench_append_refuses_other_columns(tmp_path, capsys):
    old = tmp_path / "old.csv"
    old.write_text(",".join(c for c in report.COLUMNS if c != "auto_speedup") + "\n")
    argv = ["--shapes", "64x48x80", "--csv", str(old), "--append"]
    assert falcon_bench.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "auto_speedup" in err, err


def test_quality_peer_columns():
    """decision_quality: peers are not candidates for "best measured"; their
    median / auto's per shape and geometric mean."""
    def row(M, cand, med, plan="classical"):
        return {"label": "w", "M": M, "N": 8, "K": 8, "candidate": cand, "plan": plan, "median_s": med}

    rows = [row(4, "classical", 2.0), row(4, "auto", 1.0, "strassen x1"), row(4, "numpy", 0.5),
            row(4, "torch", 4.0), row(8, "classical", 2.0), row(8, "auto", 1.0, "strassen x1"),
            row(8, "numpy", 2.0)]
    table, summary = report.decision_quality(rows)
    head, _, r4, r8 = table.splitlines()[:4]
    assert head.endswith("| numpy / auto | torch / auto |")
    # rows without per-round times (an older CSV): the paired columns are "-"
    assert r4.endswith("| yes | - | - | - | 0.500 | 4.000 |") and r8.endswith("| yes | - | - | - | 2.000 | - |")
    assert summary["paired_shapes"] == 0
    assert summary["geomean_vs_numpy"] == pytest.approx(1.0)
    assert summary["geomean_vs_torch"] == pytest.approx(4.0)



def test_quality_pairs_candidates_round_by_round():
    """The paired columns: per round, the two calls' ratio; the median over rounds. Shape 4: the medians
    tie (2.0 and 2.0: within 3%) while in every round but one classical ran faster (0.833, 1.5, 0.8:
    median 0.833, NO); pairing round i with round i+1 would read 1.2. Shape 8: auto faster than both
    rivals in the rounds (best / auto capped at 1; the range is the closest rival's). Shape 16: auto kept
    classical, the same module: nothing to pair against, 1."""
    def row(M, cand, times, plan="classical"):
        return {"label": "w", "M": M, "N": 8, "K": 8, "candidate": cand, "plan": plan,
                "median_s": statistics.median(times), "times_s": " ".join(str(t) for t in times)}

    rows = [row(4, "classical", [1.0, 3.0, 2.0]), row(4, "auto", [1.2, 2.0, 2.5], "strassen x1"),
            row(8, "classical", [1.0, 1.2, 1.1]), row(8, "auto", [0.9, 1.3, 1.0], "strassen x1"),
            row(8, "top", [0.8, 1.4, 1.05], "strassen x2"),
            row(16, "classical", [1.0, 1.1, 0.9]), row(16, "auto", [1.2, 0.8, 1.0])]
    table, summary = report.decision_quality(rows)
    r4, r8, r16 = table.splitlines()[2:5]
    assert "| 1.000 | 1.000 | yes | 0.833 (0.700) | 0.833 | NO |" in r4, r4
    assert "| 1.000 (0.188) | 1.100 | yes |" in r8, r8  # top/auto 0.889, 1.077, 1.05: median 1.05, capped
    assert "| 1.000 (0.000) | 1.000 | yes |" in r16, r16
    assert summary["paired_shapes"] == 3 and summary["within_paired"] == pytest.approx(2 / 3)
    assert summary["worst_vs_classical_paired"] == pytest.approx(1 / 1.2)
    assert summary["geomean_vs_classical_paired"] == pytest.approx((1 / 1.2 * 1.1) ** (1 / 3))
    assert "Paired round by round: auto within 3% of the best on 2 of 3 shapes (67%)" in table


def test_quality_paired_unusable_rounds():
    """Were (break-it): a zero time in auto's rounds or a zero median (a hand-made or damaged CSV read back by --quality
    --append) raised ZeroDivisionError out of decision_quality, after the whole run; NaN rounds gave
    "(nan)" ranges and medians of NaN; a rival with another number of rounds was dropped silently, so
    auto read as the best (1.000 (0.000), classical / auto 1.000). Now a NaN or zero round is left out
    of the pairing, and a rival that cannot be paired makes the shape's paired columns "-"; a rival
    never timed (failed) is left out, as in the medians."""
    def row(M, cand, times, plan="classical", status="ok", median=None):
        t = [float(x) for x in times.split() if float(x) == float(x)]  # the medians are not at issue here
        median = median if median is not None else statistics.median(t) if t else float("nan")
        return {"label": "w", "M": M, "N": 8, "K": 8, "candidate": cand, "plan": plan, "status": status,
                "median_s": median, "times_s": times}

    rows = [row(4, "classical", "1.0 3.0 2.0"), row(4, "auto", "0 2.0 2.5", "strassen x1"),
            row(8, "classical", "1.0 nan 1.1"), row(8, "auto", "0.9 1.3 1.0", "strassen x1"),
            row(16, "classical", "1.0 1.1 0.9 1.0"), row(16, "auto", "0.5 0.5 0.5", "strassen x1"),
            row(32, "classical", "1.0 1.1 0.9"), row(32, "auto", "0.5 0.5 0.5", "strassen x1"),
            row(32, "scheme=winograd", "", "winograd x1", status="compile failed"),
            row(64, "classical", "0 nan 0", median=1.0), row(64, "auto", "0.5 0.5 0.5", "strassen x1"),
            row(128, "classical", "0 0 0"), row(128, "auto", "0.5 0.5 0.5", "strassen x1")]
    table, summary = report.decision_quality(rows)
    r4, r8, r16, r32, r64, blank = table.splitlines()[2:8]
    assert "| 1.000 (1.050) | 1.150 | yes |" in r4, r4  # rounds 2, 3 only: 1.5 and 0.8
    assert "| 1.000 (0.017) | 1.106 | yes |" in r8, r8  # rounds 1, 3 only: 1.111 and 1.1
    assert r16.endswith("| - | - | - |"), r16  # 4 rounds against 3: cannot be paired
    assert "| 1.000 (0.400) | 2.000 | yes |" in r32, r32  # the failed winograd left out
    assert r64.endswith("| - | - | - |"), r64  # no usable round
    assert blank == "" and summary["shapes"] == 5  # 128: classical's median 0 is no time (was: log(0) raised)
    assert summary["paired_shapes"] == 3
    assert summary["geomean_vs_classical_paired"] == pytest.approx((1.15 * (1.1 + 1 / 0.9) / 2 * 2.0) ** (1 / 3))


def test_quality_keeps_appended_runs_apart():
    """Were (break-it): ``falcon-bench --append --quality`` read the whole CSV and grouped it by shape
    alone, so a second run of a shape (or the same shape in f16, or with other flags) joined the first:
    its candidates' rounds were paired with the first run's auto, calls minutes apart, and the second
    run had no row of its own. Now each run of a shape is a row of its own."""
    def row(cand, times, plan="classical", dtype="f32"):
        t = [float(x) for x in times.split()]
        return {"label": "w", "M": 8, "N": 8, "K": 8, "dtype": dtype, "flags": "best", "const_weights": "0",
                "candidate": cand, "plan": plan, "median_s": str(statistics.median(t)), "times_s": times}

    run1 = [row("classical", "2.0 2.0 2.0"), row("auto", "1.0 1.0 1.0", "strassen x1")]
    run2 = [row("classical", "1.0 1.0 1.0"), row("auto", "2.0 2.0 2.0", "strassen x1")]
    f16 = [row("classical", "4.0 4.0 4.0", dtype="f16"), row("auto", "2.0 2.0 2.0", "strassen x1", dtype="f16")]
    table, summary = report.decision_quality(run1 + run2 + f16)
    r1, r2, r3 = table.splitlines()[2:5]
    assert "| 1.000 | 2.000 | yes | 1.000 (0.000) | 2.000 | yes |" in r1, r1
    assert "| 0.500 | 0.500 | NO | 0.500 (0.000) | 0.500 | NO |" in r2, r2
    assert "| 1.000 | 2.000 | yes | 1.000 (0.000) | 2.000 | yes |" in r3, r3
    assert summary["shapes"] == summary["paired_shapes"] == 3


def test_rows_carry_every_rounds_seconds():
    """rows_of writes each candidate's per-round seconds in round order (what the pairing reads back from
    the CSV)."""
    from falcon_mlir.bench import BenchConfig, Shape
    from falcon_mlir.bench.measure import Result
    from falcon_mlir.bench.candidates import parse_candidates

    cands = parse_candidates("classical", numpy_peer=False, torch_peer=False)
    r = Result(Shape(8, 8, 8), cands[0], plan="classical", times=[0.25, 0.125, 0.5])
    row = report.rows_of([r], BenchConfig())[0]
    assert row["times_s"] == "0.25 0.125 0.5" and row["median_s"] == 0.25
    assert report._round_times(row) == [0.25, 0.125, 0.5]

def test_bench_const_weights(tmp_path):
    _, rows, _ = _run(tmp_path, "--const-weights", "--flags", "default", "--no-peers")
    assert [r["const_weights"] for r in rows] == ["1", "1"]
    for r in rows:
        assert r["status"] == "ok"
        assert float(r["rel_err_f64"]) < 1e-5


def test_bench_parameter_weights(tmp_path):
    """--parameter-weights: B a module global read from an IREE parameter served from the same random
    array when the module loads (the functions take A alone, so a B not served, or served wrong, fails
    or misses float64), with and without IREE's external transients; recorded as a constant B."""
    from falcon_mlir.bench import BenchConfig

    for extra in ((), ("--external-transients",)):
        _, rows, md = _run(tmp_path, "--parameter-weights", "--no-peers", *extra)
        assert [r["candidate"] for r in rows] == ["classical", "scheme=strassen levels=1"]
        assert [(r["const_weights"], r["parameter_weights"]) for r in rows] == [("1", "1")] * 2
        for r in rows:
            assert r["status"] == "ok", r["status"]
            assert float(r["rel_err_f64"]) < 1e-5
        assert rows[1]["plan"].startswith("strassen x1")
        assert "B a module global read from an IREE parameter when the module loads" in md
    with pytest.raises(ValueError, match="parameter_weights needs const_weights"):
        BenchConfig(parameter_weights=True)


def test_bench_external_transients(tmp_path):
    """--external-transients: every IREE candidate (classical and a Strassen plan, B an argument or a
    module constant) through one transient buffer, right against float64; the environment says so."""
    for extra in ((), ("--const-weights",)):
        _, rows, md = _run(tmp_path, "--external-transients", "--no-peers", *extra)
        assert [r["candidate"] for r in rows] == ["classical", "scheme=strassen levels=1"]
        assert [r["external_transients"] for r in rows] == ["1", "1"]  # recorded, as --interleave is
        for r in rows:
            assert r["status"] == "ok", r["status"]
            assert float(r["rel_err_f64"]) < 1e-5
        assert rows[1]["plan"].startswith("strassen x1")
        assert "IREE's transients in one buffer per module, allocated once; repeat 2" in md


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


@pytest.mark.parametrize("opt", ["--csv", "--md", "--plot"])
def test_bench_dash_output_is_refused(opt, tmp_path, capsys, monkeypatch):
    """``-`` is not stdout here (the table goes there): one line, status 2, before measuring; it
    used to write a file named '-'."""
    monkeypatch.chdir(tmp_path)
    assert falcon_bench.main(["--shapes", "64x48x80", "--candidates", "classical", "--no-peers",
                              "--repeat", "1", opt, "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"falcon-bench: error: {opt} -: stdout is not an output file here (the "
                                "table goes there); give a file name"]
    assert list(tmp_path.iterdir()) == []


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


def test_blocked_candidate_is_the_decisions_best_classical_plan(monkeypatch):
    # x86-dev's table taken at its word for blocking: 4096^3 f32 is blocked 2x2x2
    # (IREE's GEMM slows there); 512^3 has no blocking plan
    from cases import ROOT
    from falcon_mlir.bench import Shape, expand_top, parse_candidates

    monkeypatch.setenv("FALCON_PROFILE",
                       str(ROOT / "test" / "lit" / "lcma-rewrite" / "Inputs" / "x86_table_profile.json"))
    cands = parse_candidates("auto,blocked")
    assert [c.name for c in cands] == ["classical", "auto", "blocked"]
    big = expand_top(Shape(4096, 4096, 4096), cands, dtype="f32", acc="f32", const_weights=False, top=2)
    assert [(c.name, c.lcma) for c in big][2] == ("blocked scheme=2x2x2:8", "scheme=2x2x2:8")
    small = expand_top(Shape(512, 512, 512), cands, dtype="f32", acc="f32", const_weights=False, top=2)
    assert [c.name for c in small] == ["classical", "auto"]


def test_candidates_keep_per_level_scheme_lists_whole():
    from falcon_mlir.bench import parse_candidates
    from falcon_mlir.bench.candidates import split_candidates

    assert split_candidates("auto, scheme=strassen,winograd levels=2 ,numpy,scheme=strassen") == [
        "auto", "scheme=strassen,winograd levels=2", "numpy", "scheme=strassen"]
    # a plain name after a finished option string (another key last) starts a new candidate
    assert split_candidates("scheme=strassen levels=1,top") == ["scheme=strassen levels=1", "top"]
    cands = parse_candidates("auto,scheme=strassen,2x2x2:8,numpy")
    assert [(c.name, c.kind, c.lcma) for c in cands] == [
        ("classical", "iree", None), ("auto", "iree", "auto"),
        ("scheme=strassen,2x2x2:8", "iree", "scheme=strassen,2x2x2:8"), ("numpy", "numpy", None)]


def test_plan_text_says_classical_for_a_kernel_form_plan_the_kernels_did_not_build():
    """Were: a forced kernel-form plan that falcon-kernels left classical (3x3x3:23 on 256x512x384,
    not a multiple of <3,3,3>: the CPU kernel ran it classically) was labelled "3x3x3:23 x1 (23
    products, kernel)", so the bench put the classical kernel's time under the plan's name. The
    entries are the report's as falcon-compile wrote them (the lcma-rewrite entry, falcon-kernels'
    joined under ``kernels``)."""
    from falcon_mlir.bench import plan_text

    def entry(schemes, kernel):
        return {"plan": {"schemes": schemes, "levels": len(schemes), "edge": "pad", "form": "kernel"},
                "products": 7 ** len(schemes) if schemes[0] == "strassen" else 23,
                "kernels": [{"kernel": kernel}] if kernel != "off" else []}

    assert plan_text([entry(["strassen"], "plan")]) == "strassen x1 (7 products, kernel)"
    assert plan_text([entry(["3x3x3:23"], "classical")]) == \
        "classical (falcon's kernel; kernel-form 3x3x3:23 x1 not built)"
    assert plan_text([entry(["strassen", "strassen"], None)]) == \
        "classical (kernel-form strassen x2 not built)"
    assert plan_text([entry(["strassen"], "off")]) == "classical (kernel-form strassen x1 not built)"
    assert plan_text([{"plan": "classical", "kernels": [{"kernel": "classical"}]}]) == \
        "classical (falcon's kernel)"


def test_plan_text_names_the_edge_policy_only_where_it_acts():
    """Were: ``strassen x1 (7 products, pad)`` on shapes the blocks divide (nothing padded): the
    label now says what the policy does, and only where a dimension is not a multiple of the blocks."""
    from falcon_mlir.bench import plan_text

    def entry(M, N, K, edge, schemes=("strassen",)):
        return {"M": M, "N": N, "K": K, "products": 7 ** len(schemes),
                "plan": {"schemes": list(schemes), "levels": len(schemes), "edge": edge, "form": "per-product"}}

    assert plan_text([entry(2048, 2304, 768, "pad")]) == "strassen x1 (7 products)"
    assert plan_text([entry(501, 300, 260, "pad")]) == "strassen x1 (7 products, M edge padded)"
    assert plan_text([entry(512, 301, 259, "peel")]) == "strassen x1 (7 products, N and K edges peeled)"
    assert plan_text([entry(516, 300, 260, "pad", ("strassen", "strassen"))]) == "strassen x2 (49 products)"
    assert plan_text([entry(514, 300, 260, "pad", ("strassen", "strassen"))]) == \
        "strassen x2 (49 products, M edge padded)"


def _cpu_kernel_host() -> bool:
    from falcon_mlir.kernels import cpu_object

    try:
        cpu_object.compiler()
    except RuntimeError:
        return False
    return cpu_object.host_has_avx512()


@pytest.mark.skipif(not _cpu_kernel_host(), reason="needs gcc and an AVX-512 F/BW/DQ/VL CPU")
def test_bench_kernel_form_candidate_on_the_cpu_kernel(tmp_path):
    """Were: --candidates "scheme=strassen form=kernel" was refused before any work ("form=kernel needs
    the falcon-kernels pass, which does not run here"): candidates were checked without the bench's
    target flags, so without falcon's CPU kernel, which the compile itself runs on an AVX-512 host."""
    from falcon_mlir.bench import BenchConfig, parse_candidates

    with pytest.raises(ValueError, match="form=kernel needs the falcon-kernels pass"):
        parse_candidates("scheme=strassen form=kernel")  # no target: no kernels
    assert [c.lcma for c in parse_candidates("scheme=strassen form=kernel", flags=BenchConfig().target_flags())] \
        == [None, "scheme=strassen form=kernel"]
    _, rows, _ = _run(tmp_path, "--candidates", "classical,scheme=strassen form=kernel", "--no-peers")
    plan = next(r for r in rows if r["candidate"] == "scheme=strassen form=kernel")
    assert plan["plan"] == "strassen x1 (7 products, kernel)" and float(plan["rel_err_f64"]) < 1e-5


def test_top_candidates_are_the_runners_up_on_autos_profile(monkeypatch):
    """Were: ``top`` took the host profile's plans (4096^3: winograd and 2x4x4:26 per-product) while
    ``auto`` decided on x86-falcon where falcon's CPU kernel runs (Strassen, kernel form): they were not
    auto's runners-up. Now the profile the compile gives auto (BenchConfig.auto_profile)."""
    from falcon_mlir.bench import BenchConfig, Shape, expand_top, parse_candidates

    monkeypatch.delenv("FALCON_PROFILE", raising=False)
    cands = parse_candidates("auto,top")
    top = expand_top(Shape(4096, 4096, 4096), cands, dtype="f32", acc="f32", const_weights=False, top=2,
                     profile="x86-falcon")
    # x86-falcon plans one scheme (strassen) at one level: auto's pick is its only plan, so no runner-up;
    # the host profile's would have added winograd and 2x4x4:26 per-product
    assert [c.lcma for c in top] == [None, "auto"]
    if _cpu_kernel_host():
        assert BenchConfig().auto_profile() == "x86-falcon"
    monkeypatch.setenv("FALCON_PROFILE", "x86-dev")
    assert BenchConfig().auto_profile() is None  # the user's profile: load_profile(None) reads it


def test_top_offers_the_plan_the_block_rules_keep_out(monkeypatch):
    """Where auto is classical only by the profile's block rules (x86-falcon: M blocks >= 384, >= 512 where
    K blocks >= N blocks, K blocks >= 1024), ``top`` is the plan those rules kept out, so that the quality table measures the rules.
    Were: no runner-up, and 512x20480x5120 (Strassen measured 1.047x of classical) counted as a hit."""
    from falcon_mlir.bench import Shape, expand_top, parse_candidates

    monkeypatch.delenv("FALCON_PROFILE", raising=False)
    cands = parse_candidates("auto,top")

    def top(m, n, k):
        return [c.lcma for c in expand_top(Shape(m, n, k), cands, dtype="f32", acc="f32",
                                           const_weights=False, top=2, profile="x86-falcon")]

    kept_out = "scheme=strassen levels=1 form=kernel edge=pad"
    assert top(512, 20480, 5120) == [None, "auto", kept_out]     # M blocks 256 < 384
    assert top(2048, 24576, 1536) == [None, "auto", kept_out]    # K blocks 768 < 1024
    assert top(768, 4544, 18176) == [None, "auto", kept_out]     # M blocks 384 < 512 with Kb >= Nb
    assert top(1536, 3584, 14336) == [None, "auto"]              # auto's Strassen is the only plan


def test_quality_counts_an_unbuilt_kernel_form_plan_as_the_module_it_ran():
    """A forced kernel-form plan the kernels left classical ran the classical module: the quality table's
    "same code" test takes it as that (not as another candidate that could be 'best' by noise)."""
    same = report._same_code
    assert same("classical (falcon's kernel; kernel-form 3x3x3:23 x1 not built)", "classical (falcon's kernel)",
                256, 512, 384)
    assert same("classical (kernel-form strassen x1 not built)", "classical", 4, 4, 4)
    assert not same("classical (kernel-form strassen x1 not built)", "classical (falcon's kernel)", 4, 4, 4)
    assert not same("strassen x1 (7 products, kernel)", "classical (falcon's kernel)", 4, 4, 4)


@pytest.mark.parametrize("interleave", [False, True])
def test_interleave_puts_the_peers_into_the_rounds(monkeypatch, interleave):
    """The timing order of bench_shape, with the compiles replaced by recording runners: by default
    the IREE candidates round-robin and each peer in a block of its own after them; with
    ``interleave`` every round calls every candidate once, each round starting one further along,
    and each peer call is followed by PEER_SETTLE_S of idle (a pause, not part of any time)."""
    from falcon_mlir.bench import BenchConfig, Shape, measure, parse_candidates

    calls = []

    def recorder(name):
        def run():
            calls.append(name)
            return a @ b
        return run

    a = b = None

    def fake_iree(source, a_, b_, c, config, r, log):
        nonlocal a, b
        a, b = a_, b_
        r.plan = "fake"
        return recorder(c.name)

    monkeypatch.setattr(measure, "_iree_runner", fake_iree)
    monkeypatch.setitem(measure._PEER_RUNNERS, "numpy", lambda a_, b_, config, r: recorder("numpy"))
    monkeypatch.setattr(measure.time, "sleep", lambda s: calls.append(f"sleep {s}"))
    cands = parse_candidates("classical,scheme=strassen levels=1", numpy_peer=True, torch_peer=False)
    config = BenchConfig(repeat=3, warmup=1, interleave=interleave)
    results = measure.bench_shape(Shape(32, 48, 40), cands, config)
    s, st, np_, z = "classical", "scheme=strassen levels=1", "numpy", f"sleep {measure.PEER_SETTLE_S}"
    checks = [s, st, np_]  # the first call of each checks its result, in candidate order, no pause
    if interleave:
        rounds = [s, st, np_, z, st, np_, z, s, np_, z, s, st]
    else:
        rounds = [s, st, s, st, s, st, np_, np_, np_]
    assert calls == checks + rounds
    assert [len(r.times) for r in results] == [3, 3, 3]
    assert all(t >= 0 for r in results for t in r.times)


@pytest.mark.parametrize("interleave", [False, True])
def test_a_shape_where_nothing_runs_is_rows_of_failures_not_a_crash(monkeypatch, interleave):
    """Were: with ``interleave`` and every candidate failed (all IREE compiles failed, no peers),
    the rounds' rotation took ``rnd % 0``: falcon-bench stopped with an internal error
    (ZeroDivisionError) and the other shapes of the run were never measured. Each candidate is a
    row with its status and no times, as without ``interleave``."""
    from falcon_mlir.bench import BenchConfig, Shape, measure, parse_candidates

    def failing_iree(source, a, b, c, config, r, log):
        r.status = "compile failed: no such flag"
        return None

    monkeypatch.setattr(measure, "_iree_runner", failing_iree)
    monkeypatch.setattr(measure.time, "sleep", lambda s: None)
    cands = parse_candidates("classical,scheme=strassen levels=1", numpy_peer=False, torch_peer=False)
    results = measure.bench_shape(Shape(32, 48, 40), cands, BenchConfig(repeat=3, warmup=2, interleave=interleave))
    assert [(r.status, r.times) for r in results] == [("compile failed: no such flag", [])] * 2


def test_main_job_table_names_edges_only_where_they_act():
    """Were: the main job's table wrote ``strassen (pad)`` on 1024x14336x4096, which Strassen's blocks
    divide; it shares falcon-bench's edge text now (falcon_mlir.decision.explain.edges_text)."""
    from falcon_mlir.models.main_job import plan_text

    plan = {"schemes": ["strassen"], "levels": 1, "edge": "pad", "form": "kernel"}
    assert plan_text({"M": 1024, "N": 14336, "K": 4096, "plan": plan}) == "strassen"
    assert plan_text({"M": 1023, "N": 14336, "K": 4096, "plan": plan}) == "strassen (M edge padded)"
    assert plan_text({"M": 64, "N": 64, "K": 64, "plan": "classical"}) == "classical"
