"""Fast profile of the falcon-opt mutation fuzzer (scripts/fuzz_opt.py).

About 100 mutated lit inputs through falcon-opt, two processes at a time;
none may crash, print a traceback or an internal error, hang, exit with a
status other than 0/1, leave an output file after an error, or
exit 0 with output that does not parse back.  Failures already pinned by a
strict xfail in tools/test_falcon_opt.py or passes/lcma_rewrite/test_unusual_ir.py
(fuzz_opt.KNOWN_BUGS) are tolerated here.
Longer campaigns: ``python3 scripts/fuzz_opt.py --cases 2000 --seed N``.
"""

from __future__ import annotations

import random

import pytest

import fuzz_opt  # noqa: E402


def test_mutators_are_deterministic_and_change_something():
    seeds = fuzz_opt.load_seeds()
    assert len(seeds) >= 12
    a = fuzz_opt.make_cases(50, 5, seeds)
    b = fuzz_opt.make_cases(50, 5, seeds)
    assert [(c.data, c.argv) for c in a] == [(c.data, c.argv) for c in b]
    originals = {s.encode() for s in seeds}
    assert sum(c.data not in originals for c in a) >= 35


def test_classifier_catches_each_kind_of_failure(tmp_path):
    """Each failure kind the fuzzer promises to catch is caught (and a clean error is not)."""
    out = tmp_path / "o.mlir"
    cl = fuzz_opt._classify
    assert cl(1, "x.mlir:1:2: error: expected type\n", str(out), False, False, False) is None
    assert cl(1, "Traceback (most recent call last):\n", str(out), False, False, False) == "traceback"
    assert cl(2, "falcon-opt: internal error: KeyError: 1\n", str(out), False, False, False)
    assert cl(1, "x: error: lcma-rewrite: IndexError: tuple\n", str(out), False, False, False)
    assert cl(1, "", str(out), False, False, False) == "exit 1 without a message"
    assert cl(1, "e: error: x\n", str(out), True, False, False) == "output file left after an error"
    assert cl(1, "e: error: x\n", str(out), False, True, False) == "input file changed"
    out.write_text("module {\n  func.func @f( {\n")
    assert cl(0, "", str(out), True, False, False).startswith("output does not parse back")
    out.write_text("module {\n}\n")
    assert cl(0, "", str(out), True, False, False) is None


def test_hang_and_crash_are_reported(monkeypatch):
    """A case that hangs is killed and reported; the campaign goes on."""
    case = fuzz_opt.Case(0, b"module {}\n", ["--lcma-rewrite=scheme=strassen"])
    ok = fuzz_opt.Case(1, b"module {}\n", [])
    monkeypatch.setenv("FALCON_FUZZ_TEST_HANG", "0")
    res = fuzz_opt.fuzz([case, ok], jobs=1, timeout=3.0)
    assert [r.problem for r in res] == ["hang (> 3 s)", None]


def test_fast_profile(tmp_path):
    seed = 20240601
    cases = fuzz_opt.make_cases(100, seed, fuzz_opt.load_seeds())
    results = fuzz_opt.fuzz(cases, jobs=2, timeout=20.0)
    assert len(results) == 100
    bad = [r for r in results if r.problem and not r.known]
    assert not bad, "\n".join(f"case {r.index} {r.argv}: {r.problem}\n{r.stderr[:500]}" for r in bad)
    # The profile exercises both outcomes, not only parse errors.
    assert sum(r.rc == 0 for r in results) >= 20 and sum(r.rc == 1 for r in results) >= 20
