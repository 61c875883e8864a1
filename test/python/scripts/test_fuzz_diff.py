"""Fast CI profile of the differential fuzzer (scripts/fuzz_diff.py).

Original vs rewritten module, both compiled and run with IREE on the host
CPU, compared with a float64 / exact int64 reference, on hypothesis-drawn
contractions (sizes, element types, layouts, schemes, levels, edge, form,
data tiling on in DATA_TILING of the cases).
Sizes stay <= 48 and plans <= 64 products (per level product of R; more
levels are dropped) so compile time stays small; the full profile is
``python3 scripts/fuzz_diff.py --long``.

CASES is 40 (it was 150, ~210 s quiet on 2 cores, 437 s under load): SEED is one
whose 40 cases still draw every value of every axis of ``fuzz_diff.COVERAGE_AXES``
(each element type, with and without data tiling; each scheme; both op forms, edges,
rewrite forms, transposes; 1 and 2 levels; batched and not), and the test asserts it,
so a later change of the strategy cannot silently narrow the profile.
"""

from __future__ import annotations

import os

import fuzz_diff  # noqa: E402

CASES = 40
SEED = 1
#: Fraction of cases compiled with IREE's best CPU flags (data tiling + ukernels).
DATA_TILING = 0.4


def test_fuzz_diff_fast_profile(tmp_path):
    stats = fuzz_diff.fuzz(cases=CASES, seed=SEED, max_size=48, max_products=64,
                           save_dir=str(tmp_path), shrink_budget=0, log=lambda *a: None,
                           data_tiling=DATA_TILING)
    line = fuzz_diff.summary_line(stats)
    assert stats["cases"] == CASES, line
    failures = "\n".join(f"[{f['signature']}] {f['options']} {f['case']}: {f['detail'][-500:]}"
                         for f in stats["failed"])
    assert stats["failures"] == 0, f"{line}\n{failures}"
    # The fuzzer must really exercise the rewrite, not only the classical fallbacks.
    assert stats["rewritten"] >= 0.6 * CASES, line
    # ... and under both flag sets.
    assert 0.2 * CASES <= stats["data_tiled"] <= 0.6 * CASES, line
    # ... and draw every path: each axis value (e.g. every element type under data tiling).
    for axis, values in fuzz_diff.COVERAGE_AXES.items():
        missing = values - stats["covered"][axis]
        assert not missing, f"{line}: no case with {axis} in {sorted(missing, key=str)}"


def test_data_tiling_is_drawn_and_reproducible():
    """Data tiling is a drawn part of the case (same seed, same cases) and sets the flags."""
    import random

    from hypothesis import given, seed, settings

    def draw_all():
        got = []

        @seed(5)
        @settings(max_examples=40, database=None, deadline=None)
        @given(case=fuzz_diff.case_strategy(8, 64, random.Random(5), data_tiling=0.5))
        def one(case):
            got.append(case)

        one()
        return got

    first = draw_all()
    assert first == draw_all()
    tiled = [c for c in first if c.data_tiling]
    assert 0 < len(tiled) < len(first)
    assert "--iree-opt-data-tiling=true" in tiled[0].flags
    assert not any("data-tiling" in f for c in first if not c.data_tiling for f in c.flags)


def test_main_exit_status(tmp_path, monkeypatch):
    """The CLI's exit status: 0 without failures, 1 with (a planted wrong result)."""
    # Data tiling off: tiny forced plans under data tiling hit an IREE bug
    # (test_data_tiling.py::test_unit_lhs_block_under_data_tiling).
    assert fuzz_diff.main(["--cases", "2", "--seed", "3", "--max-size", "8", "--data-tiling", "0",
                           "--save-dir", str(tmp_path / "ok")]) == 0

    real = fuzz_diff.run_case

    def broken(case):
        out = real(case)
        out.status, out.signature, out.detail = "fail", "planted", "planted failure"
        return out

    monkeypatch.setattr(fuzz_diff, "run_case", broken)
    assert fuzz_diff.main(["--cases", "1", "--seed", "3", "--max-size", "8", "--shrink", "0",
                           "--save-dir", str(tmp_path / "bad")]) == 1
    saved = os.listdir(tmp_path / "bad")
    assert len(saved) == 1 and os.path.exists(tmp_path / "bad" / saved[0] / "case.json")
