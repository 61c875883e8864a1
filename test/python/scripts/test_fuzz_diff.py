"""Fast CI profile of the differential fuzzer (scripts/fuzz_diff.py).

Original vs rewritten module, both compiled and run with IREE on the host
CPU, compared with a float64 / exact int64 reference, on hypothesis-drawn
contractions (sizes, element types, layouts, schemes, levels, edge, form).
Sizes stay <= 48 and plans <= 64 products (per level product of R; more
levels are dropped) so compile time stays small; the full profile is
``python3 scripts/fuzz_diff.py --long``.
"""

from __future__ import annotations

import os

import fuzz_diff  # noqa: E402

CASES = 150
SEED = 20240611


def test_fuzz_diff_fast_profile(tmp_path):
    stats = fuzz_diff.fuzz(cases=CASES, seed=SEED, max_size=48, max_products=64,
                           save_dir=str(tmp_path), shrink_budget=0, log=lambda *a: None)
    line = fuzz_diff.summary_line(stats)
    assert stats["cases"] == CASES, line
    failures = "\n".join(f"[{f['signature']}] {f['options']} {f['case']}: {f['detail'][-500:]}"
                         for f in stats["failed"])
    assert stats["failures"] == 0, f"{line}\n{failures}"
    # The fuzzer must really exercise the rewrite, not only the classical fallbacks.
    assert stats["rewritten"] >= 0.6 * CASES, line


def test_main_exit_status(tmp_path, monkeypatch):
    """The CLI's exit status: 0 without failures, 1 with (a planted wrong result)."""
    assert fuzz_diff.main(["--cases", "2", "--seed", "3", "--max-size", "8",
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
