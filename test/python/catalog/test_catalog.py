"""Tests of falcon_mlir.catalog: loaders, exact verification, symmetries,
composition, metrics and the catalog data. (The falcon-catalog CLI:
tools/test_falcon_catalog.py; the catalog build: scripts/test_build_catalog.py.)"""

from __future__ import annotations

import itertools
import json
import os
import zlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from falcon_mlir.catalog import Scheme, UnknownSchemeError, get_scheme, load_catalog
from falcon_mlir.catalog import loaders as L
from falcon_mlir.catalog.scheme import to_fraction_array
from repo_paths import ROOT as REPO

SHARED = Path(os.environ.get("FALCON_SHARED", REPO.parent / "shared"))
SCHEMES = SHARED / "schemes"
needs_shared = pytest.mark.skipif(not SCHEMES.is_dir(), reason=f"source data not found at {SCHEMES}")

CATALOG = load_catalog()
NAMES = CATALOG.names()


# ----------------------------------------------------------------- helpers
def rand_ab(m, k, n, seed, p=1, q=1, s=1):
    """Seeded random float64 operands, entries of both signs in [0.25, 2.25)
    (never 0 or 1 patterns)."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(0.25, 2.25, (m * p, k * q)) * rng.choice([-1.0, 1.0], (m * p, k * q))
    B = rng.uniform(0.25, 2.25, (k * q, n * s)) * rng.choice([-1.0, 1.0], (k * q, n * s))
    return A, B


def assert_evaluates(s: Scheme, seed=0, p=1, q=1, r=1):
    A, B = rand_ab(s.m, s.k, s.n, seed, p, q, r)
    C = s.evaluate(A, B)
    ref = A @ B
    np.testing.assert_allclose(C, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max() * max(1, s.R))


def fmt_frac(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def rational_variant(s: Scheme) -> Scheme:
    """Same scheme with product r scaled: U_r * 2, W_r / 2 (valid, rational)."""
    U = s.U.copy()
    W = s.W.copy()
    U[0] = U[0] * 2
    W[0] = W[0] / 2
    return Scheme(s.m, s.k, s.n, U, s.V, W, name="rational")


# sample schemes the writers below serialise (square and rectangular)
STRASSEN = get_scheme("strassen")
RECT = get_scheme("2x3x4:20")


# --------------------------------------------------- writers (to test loaders)
def write_npz(path, schemes):
    arrays = {}
    for s in schemes:
        R = s.R
        Uf = np.array(s.U.reshape(R, -1).T.astype(np.int64))
        Vf = np.array(s.V.reshape(R, -1).T.astype(np.int64))
        Wf = np.array(s.W.transpose(0, 2, 1).reshape(R, -1).T.astype(np.int64))  # C^T layout
        if s.m == s.k == s.n:
            arrays[f"{s.m},{s.k},{s.n}"] = np.stack([Uf, Vf, Wf])
        else:
            obj = np.empty(3, dtype=object)
            obj[:] = [Uf, Vf, Wf]
            arrays[f"{s.m},{s.k},{s.n}"] = obj
    np.savez(path, **arrays)


def write_fmm_json(path, s):
    R = s.R
    d = {
        "n": [s.m, s.k, s.n], "m": R, "z2": False,
        "u": [[fmt_frac(x) for x in s.U[r].reshape(-1)] for r in range(R)],
        "v": [[fmt_frac(x) for x in s.V[r].reshape(-1)] for r in range(R)],
        "w": [[fmt_frac(x) for x in s.W[r].T.reshape(-1)] for r in range(R)],
    }
    Path(path).write_text(json.dumps(d))


def write_fmm_reduced_json(path, s):
    """Straight-line form: fresh variable t0 = (first two nonzeros of U_0),
    product 0 uses it; C entries through products and one fresh w."""
    R, m, k, n = s.R, s.m, s.k, s.n

    def sparse(vec):
        return [{"index": i, "value": int(x)} for i, x in enumerate(vec) if x != 0]

    u_rows = [sparse(s.U[r].reshape(-1)) for r in range(R)]
    head, tail = u_rows[0][:2], u_rows[0][2:]
    u_fresh = [head]
    u_rows[0] = [{"index": m * k, "value": 1}] + tail
    v_rows = [sparse(s.V[r].reshape(-1)) for r in range(R)]
    w_rows = [sparse([s.W[r, i, l] for r in range(R)]) for l in range(n) for i in range(m)]
    # fresh w variable: the first C entry's first two terms
    w_fresh = [w_rows[0][:2]]
    w_rows[0] = [{"index": R, "value": 1}] + w_rows[0][2:]
    d = {"n": [m, k, n], "m": R, "z2": False, "complexity": {"naive": s.naive_additions, "reduced": 99},
         "u_fresh": u_fresh, "u": u_rows, "v_fresh": [], "v": v_rows, "w_fresh": w_fresh, "w": w_rows}
    Path(path).write_text(json.dumps(d))


def write_fmm_m(path, s):
    def mat(X):
        return "{" + ", ".join("{" + ", ".join(fmt_frac(x) for x in row) + "}" for row in X) + "}"

    terms = [f"  {{{mat(s.U[r])}, {mat(s.V[r])}, {mat(s.W[r].T)}}}" for r in range(s.R)]
    Path(path).write_text("{\n" + ",\n".join(terms) + "\n}\n")


def write_fmm_exp(path, s):
    def lin(letter, X, transpose=False):
        terms = []
        M = X.T if transpose else X
        for (a, b), c in np.ndenumerate(M):
            if c != 0:
                coef = "" if abs(c) == 1 else f"{abs(c)}*"
                terms.append(("-" if c < 0 else "+") + f"{coef}{letter}{a+1}{b+1}")
        return "".join(terms)

    lines = []
    for r in range(s.R):
        a, b, c = lin("a", s.U[r]), lin("b", s.V[r]), lin("c", s.W[r], transpose=True)
        style = r % 3
        if style == 0:
            lines.append(f"({a})*({b})*({c})")
        elif style == 1:  # juxtaposition, spaces, leading sign pulled out when single
            lines.append(f"({a}) ({b}) ({c})")
        else:  # whole term negated twice
            neg = lambda t: "".join("+" if ch == "-" else "-" if ch == "+" else ch for ch in t)  # noqa: E731
            lines.append(f"-({neg(a)})*({b})*({c})")
    Path(path).write_text("\n".join(lines) + "\n")


def write_fmm_mpl(path, s):
    def mat(X, fancy):
        rows = []
        for row in X:
            ents = []
            for x in row:
                e = fmt_frac(x)
                ents.append(f"(1*1-1+{e})" if fancy and x != 0 else e)
            rows.append("[" + ",".join(ents) + "]")
        return f"Matrix({X.shape[0]}, {X.shape[1]}, [" + ",".join(rows) + "])"

    triads = [f"Triad([{mat(s.U[r], r % 2 == 0)}, {mat(s.V[r], False)}, {mat(s.W[r].T, r % 2 == 1)}])"
              for r in range(s.R)]
    text = ("A:=Matrix(2, 2, [[A_1_1,A_1_2],[A_2_1,A_2_2]]):\n"
            "Tensor:=TriadSet([" + ", ".join(triads) + "]):\n")
    Path(path).write_text(text)


def write_fast_matmul(path, s):
    R = s.R
    lines = ["# synthetic test scheme"]
    for X in (s.U, s.V, s.W):
        flat = X.reshape(R, -1)
        for e in range(flat.shape[1]):
            lines.append(" ".join(fmt_frac(x) for x in flat[:, e]))
        lines.append("#")
    Path(path).write_text("\n".join(lines[:-1]) + "\n")


def same_scheme(a: Scheme, b: Scheme) -> bool:
    return (a.m, a.k, a.n) == (b.m, b.k, b.n) and np.array_equal(a.U, b.U) \
        and np.array_equal(a.V, b.V) and np.array_equal(a.W, b.W)


# ------------------------------------------------------------ loader tests
@pytest.mark.parametrize("scheme", [STRASSEN, RECT], ids=["strassen", "2x3x4:20"])
def test_loader_alphatensor_npz_synthetic(tmp_path, scheme):
    p = tmp_path / "f.npz"
    write_npz(p, [scheme])
    key = f"{scheme.m},{scheme.k},{scheme.n}"
    s = L.load_alphatensor_npz(p, key)
    assert same_scheme(s, scheme) and s.verify()
    assert_evaluates(s, seed=1)


@pytest.mark.parametrize("scheme", [STRASSEN, RECT, rational_variant(RECT)],
                         ids=["strassen", "2x3x4:20", "rational"])
def test_loader_fmm_json_synthetic(tmp_path, scheme):
    p = tmp_path / "s.json"
    write_fmm_json(p, scheme)
    s = L.load_fmm_json(p)
    assert same_scheme(s, scheme) and s.verify()
    assert_evaluates(s, seed=2)


@pytest.mark.parametrize("scheme", [STRASSEN, RECT], ids=["strassen", "2x3x4:20"])
def test_loader_fmm_reduced_json_synthetic(tmp_path, scheme):
    p = tmp_path / "s_reduced.json"
    write_fmm_reduced_json(p, scheme)
    s = L.load_fmm_json(p)
    assert same_scheme(s, scheme) and s.verify()
    assert s.reduced_additions == 99
    assert_evaluates(s, seed=3)


@pytest.mark.parametrize("scheme", [STRASSEN, RECT, rational_variant(RECT)],
                         ids=["strassen", "2x3x4:20", "rational"])
def test_loader_fmm_m_synthetic(tmp_path, scheme):
    p = tmp_path / "s.m"
    write_fmm_m(p, scheme)
    s = L.load_fmm_m(p)
    assert same_scheme(s, scheme) and s.verify()
    assert_evaluates(s, seed=4)


@pytest.mark.parametrize("scheme", [STRASSEN, RECT], ids=["strassen", "2x3x4:20"])
def test_loader_fmm_exp_synthetic(tmp_path, scheme):
    p = tmp_path / "s.exp"
    write_fmm_exp(p, scheme)
    s = L.load_fmm_exp(p, fmt=(scheme.m, scheme.k, scheme.n))
    assert s.verify()
    assert_evaluates(s, seed=5)


def test_loader_fmm_exp_forms(tmp_path):
    # bare products, '*'-free juxtaposition, a signed middle factor, scalars
    p = tmp_path / "t.exp"
    p.write_text("(a11+a22) (b11+b22) (c11+c22)\n-a21*(-b11)*c12\n(a12 -b21 c12)\n2*a11*b11*c11/2\n")
    s = L.load_fmm_exp(p, fmt=(2, 2, 2))
    assert s.R == 4
    assert s.U[1, 1, 0] * s.V[1, 0, 0] * s.W[1, 1, 0] == 1   # -a21 * -b11 -> C[1,0]
    assert s.U[2, 0, 1] * s.V[2, 1, 0] * s.W[2, 1, 0] == -1  # a12 * (-b21) -> C[1,0]
    assert s.U[3, 0, 0] * s.V[3, 0, 0] * s.W[3, 0, 0] == 1
    with pytest.raises(L.SchemeLoadError):
        L.load_fmm_exp(_write(tmp_path / "bad.exp", "(a11+b11)*c11\n"), fmt=(1, 1, 1))
    with pytest.raises(L.SchemeLoadError):
        L.load_fmm_exp(_write(tmp_path / "bad2.exp", "(a11)*(b11)*(c11))\n"), fmt=(1, 1, 1))


def _write(p, text):
    p.write_text(text)
    return p


@pytest.mark.parametrize("scheme", [STRASSEN, RECT, rational_variant(RECT)],
                         ids=["strassen", "2x3x4:20", "rational"])
def test_loader_fmm_mpl_synthetic(tmp_path, scheme):
    p = tmp_path / "s_tensor.mpl"
    write_fmm_mpl(p, scheme)
    s = L.load_fmm_mpl(p)
    assert same_scheme(s, scheme) and s.verify()
    assert_evaluates(s, seed=6)


@pytest.mark.parametrize("scheme", [STRASSEN, RECT, rational_variant(RECT)],
                         ids=["strassen", "2x3x4:20", "rational"])
def test_loader_fast_matmul_synthetic(tmp_path, scheme):
    p = tmp_path / "alg"
    write_fast_matmul(p, scheme)
    s = L.load_fast_matmul(p)
    assert same_scheme(s, scheme) and s.verify()
    assert_evaluates(s, seed=7)


def test_parse_exact():
    assert L.parse_exact("-(1*1-0*1+1)") == -2
    assert L.parse_exact(" -1/8 ") == Fraction(-1, 8)
    assert L.parse_exact("(1-0+1)/4") == Fraction(1, 2)
    for bad in ("1.5", "x", "1/0", "(1", "import os"):
        with pytest.raises((L.SchemeLoadError, ZeroDivisionError)):
            L.parse_exact(bad)


# loaders against the real source files (skipped without the source data)
REAL_FILES = [
    ("fastmatrixmultiplication/schemes/known/classic/Strassen-222-7-18.m", (2, 2, 2, 7)),
    ("fastmatrixmultiplication/schemes/known/alpha_tensor/3x4x5_m47_Z.json", (3, 4, 5, 47)),
    ("fastmatrixmultiplication/schemes/results/addition_reduced_ZT/2x2x2_m7_cr15_cn24_ZT_reduced.json", (2, 2, 2, 7)),
    ("fastmatrixmultiplication/schemes/known/fmm_add_reduction/Moosbauer-234-20-mod0.exp", (2, 3, 4, 20)),
    ("fastmatrixmultiplication/schemes/known/jakobmoosbauer_symmetric_flips/666m153_lifted.exp", (6, 6, 6, 153)),
    ("fastmatrixmultiplication/schemes/known/tensor/4x4x4_tensor.mpl", (4, 4, 4, 48)),
    ("fastmatrixmultiplication/schemes/known/tensor/3x3x6_tensor.mpl", (3, 3, 6, 40)),
    ("fast-matmul/strassen", (2, 2, 2, 7)),
    ("fast-matmul/smirnov336-40-960", (3, 3, 6, 40)),
    ("fast-matmul/hk323-15-94", (3, 2, 3, 15)),
]


@needs_shared
@pytest.mark.parametrize("rel,expect", REAL_FILES, ids=[r for r, _ in REAL_FILES])
def test_loader_real_file(rel, expect):
    s = L.load_scheme_file(SCHEMES / rel)
    assert (s.m, s.k, s.n, s.R) == expect
    assert s.verify()
    assert_evaluates(s, seed=11)


@needs_shared
@pytest.mark.parametrize("key", ["2,2,2", "3,4,5", "4,4,4", "3,4,11"])
def test_loader_real_alphatensor_npz(key):
    s = L.load_alphatensor_npz(SCHEMES / "alphatensor" / "factorizations_r.npz", key)
    assert f"{s.m},{s.k},{s.n}" == key
    assert s.verify()  # 3,4,11 is stored as float64 (int() would truncate)
    if s.m * s.n <= 64:
        assert_evaluates(s, seed=12)


@needs_shared
def test_loader_rejects_eliminated_fast_matmul():
    with pytest.raises(L.SchemeLoadError, match="substitution"):
        L.load_fast_matmul(SCHEMES / "fast-matmul" / "grey323-15-89")


# ------------------------------------------------------- catalog content
@pytest.mark.parametrize("name", NAMES)
def test_catalog_scheme_verifies(name):
    s = get_scheme(name)
    assert s.verify(), f"{name}: {s.brent_residual()} Brent equations violated"
    assert s.name == name == s.canonical_name
    assert_evaluates(s, seed=zlib.crc32(name.encode()))


EXPECTED_RANKS = {
    "2x2x2": [7], "2x2x3": [11], "2x3x3": [15], "2x2x4": [14], "2x3x4": [20], "2x4x4": [26],
    "2x4x5": [32, 33], "3x3x3": [23], "3x3x6": [40, 42], "3x4x5": [47], "4x4x4": [48, 49],
    "4x4x5": [61], "4x5x5": [76], "5x5x5": [93], "6x6x6": [153],
}


@pytest.mark.parametrize("fmt,ranks", sorted(EXPECTED_RANKS.items()))
def test_catalog_ranks(fmt, ranks):
    m, k, n = (int(x) for x in fmt.split("x"))
    found = sorted({s.R for s in CATALOG.find(m, k, n)})
    assert found == ranks
    for r in ranks:
        assert get_scheme(f"{fmt}:{r}").R == r


def test_catalog_best_over_rings():
    assert get_scheme("2x4x5:32").coefficient_set == "Q"
    assert get_scheme("2x4x5:33").coefficient_set == "ZT"
    assert get_scheme("4x4x4:49").coefficient_set == "ZT"
    assert CATALOG.best(4, 4, 4).R == 48
    assert CATALOG.best(4, 4, 4, integral=True).R == 49
    # every format 2..6 is present (35 up to permutation)
    formats = {tuple(sorted((s.m, s.k, s.n))) for s in CATALOG}
    assert formats == {f for f in itertools.combinations_with_replacement(range(2, 7), 3)}


def test_metrics_classics():
    s = get_scheme("strassen")
    assert (s.format, s.R, s.stability_e, s.naive_additions) == ("2x2x2", 7, 12, 18)
    assert (s.nnz_u, s.nnz_v, s.nnz_w) == (12, 12, 12)
    w = get_scheme("winograd")
    assert w.name == "2x2x2:7-winograd" and w.tag == "winograd"
    assert (w.stability_e, w.naive_additions, w.reduced_additions) == (18, 24, 15)
    q = get_scheme("4x4x4:48")
    assert q.coefficient_set == "Q" and not q.is_integral and q.stability_e == 288
    assert get_scheme("4x4x4:49").is_integral
    assert get_scheme("3x3x3:23").coefficient_set == "ZT"
    assert get_scheme("2x2x2:7").reduced_additions is None


def test_laderman_alias_documented():
    s = get_scheme("LADERMAN")
    assert s.name == "3x3x3:23" and "laderman" in s.aliases
    assert "not in the source data" in s.notes


def test_verify_largest_scheme():
    # Exact verification of the largest stored scheme (46656 Brent equations).
    s = get_scheme("6x6x6:153")
    assert s.verify() and s.brent_residual() == 0


def test_names_case_insensitive_and_unknown():
    assert get_scheme("StRaSsEn").name == "2x2x2:7"
    assert get_scheme("2X2X2:7-WINOGRAD").name == "2x2x2:7-winograd"
    # (2x2x2:8 is classical blocking, generated: test_blocking.py; 2x2x2:9 is nothing)
    for bad in ("foo", "2x2x2:9", "7x7x7:1", "", "strassen^9", "2x2x2:7-nope", "2x2x2:8-x"):
        with pytest.raises(UnknownSchemeError) as ei:
            get_scheme(bad)
        assert "(run `falcon-catalog list` for the valid names)" in str(ei.value)
        assert isinstance(ei.value, ValueError)
    assert str(UnknownSchemeError("foo")) == \
        "unknown scheme 'foo' (run `falcon-catalog list` for the valid names)"
    assert "strassen" in CATALOG and "foo" not in CATALOG


def test_load_catalog_cached_and_iterable():
    assert load_catalog() is CATALOG
    assert len(list(CATALOG)) == len(CATALOG) == len(NAMES)
    assert {"strassen", "winograd", "laderman"} <= set(CATALOG.aliases())


# ------------------------------------------------------------ symmetries
@pytest.mark.parametrize("name", ["2x2x3:11", "2x3x4:20", "2x4x5:32", "3x4x5:47", "3x3x6:40"])
def test_all_permutations_via_get_scheme(name):
    fmt, r = name.split(":")
    dims = tuple(int(x) for x in fmt.split("x"))
    for perm in sorted(set(itertools.permutations(dims))):
        pname = f"{perm[0]}x{perm[1]}x{perm[2]}:{r}"
        s = get_scheme(pname)
        assert (s.m, s.k, s.n) == perm and s.name == pname and s.R == int(r)
        assert s.verify()
        assert_evaluates(s, seed=sum(perm))
        assert [t.name for t in CATALOG.find(*perm)] == sorted(
            [t.name for t in CATALOG.find(*perm)], key=lambda x: int(x.split(":")[1].split("-")[0]))
        assert all((t.m, t.k, t.n) == perm for t in CATALOG.find(*perm))


def test_permuted_rejects_other_format():
    with pytest.raises(ValueError):
        STRASSEN.permuted(2, 2, 3)


def test_permuted_invariants():
    s = get_scheme("2x3x4:20")
    for perm in itertools.permutations((2, 3, 4)):
        t = s.permuted(*perm)
        assert t.R == s.R and t.coefficient_set == s.coefficient_set
        assert t.nnz_u + t.nnz_v + t.nnz_w == s.nnz_u + s.nnz_v + s.nnz_w
        # transposition keeps the W role, so E and the additions are unchanged
    t = s.permuted(4, 3, 2)
    assert t.stability_e == s.stability_e and t.naive_additions == s.naive_additions
    assert t.reduced_additions == s.reduced_additions


# ----------------------------------------------------------- composition
def test_kron_strassen_squared():
    sq = STRASSEN.kron(STRASSEN)
    assert (sq.format, sq.R) == ("4x4x4", 49)
    assert sq.verify()
    assert sq.stability_e == 144
    assert_evaluates(sq, seed=21)
    for name in ("strassen*strassen", "strassen^2", "STRASSEN * strassen"):
        g = get_scheme(name)
        assert np.array_equal(g.U, sq.U) and np.array_equal(g.W, sq.W)


def test_kron_index_convention():
    # one application of S1 ⊗ S2 on contiguous blocks == S1 on blocks, S2 on each product
    s1, s2 = STRASSEN, get_scheme("2x3x4:20")
    comp = s1.kron(s2)
    A, B = rand_ab(comp.m, comp.k, comp.n, 31, 3, 2, 2)
    two_level = _two_level(s1, s2, A, B)
    np.testing.assert_allclose(comp.evaluate(A, B), two_level, rtol=1e-10)
    np.testing.assert_allclose(two_level, A @ B, rtol=1e-9, atol=1e-9)
    r1, r2 = 3, 5
    r = r1 * s2.R + r2
    assert comp.U[r, 1 * s2.m + 1, 0 * s2.k + 2] == s1.U[r1, 1, 0] * s2.U[r2, 1, 2]


def _two_level(s1, s2, A, B):
    m, k, n = s1.m, s1.k, s1.n
    p, q, s = A.shape[0] // m, A.shape[1] // k, B.shape[1] // n
    Ab = lambda i, j: A[i * p:(i + 1) * p, j * q:(j + 1) * q]  # noqa: E731
    Bb = lambda j, l: B[j * q:(j + 1) * q, l * s:(l + 1) * s]  # noqa: E731
    C = np.zeros((A.shape[0], B.shape[1]))
    for r in range(s1.R):
        L_ = sum(float(s1.U[r, i, j]) * Ab(i, j) for i in range(m) for j in range(k))
        R_ = sum(float(s1.V[r, j, l]) * Bb(j, l) for j in range(k) for l in range(n))
        P = s2.evaluate(L_, R_)
        for i in range(m):
            for l in range(n):
                if s1.W[r, i, l]:
                    C[i * p:(i + 1) * p, l * s:(l + 1) * s] += float(s1.W[r, i, l]) * P
    return C


def test_kron_different_schemes():
    c = STRASSEN.kron(get_scheme("3x3x3:23"))
    assert (c.format, c.R) == ("6x6x6", 161) and c.verify()
    d = get_scheme("2x3x4:20").kron(get_scheme("2x2x3:11"))
    assert (d.format, d.R) == ("4x6x12", 220) and d.verify()
    assert get_scheme("strassen*3x3x3:23").verify()


# -------------------------------------------------------- verify can fail
def test_corrupted_scheme_fails_verify():
    s = get_scheme("3x3x3:23")
    for arr_name in ("U", "V", "W"):
        arrs = {"U": s.U.copy(), "V": s.V.copy(), "W": s.W.copy()}
        arrs[arr_name][5, 1, 2] += 1
        bad = Scheme(s.m, s.k, s.n, arrs["U"], arrs["V"], arrs["W"], name="bad")
        assert not bad.verify()
        assert bad.brent_residual() > 0
    q = get_scheme("4x4x4:48")
    W = q.W.copy()
    W[0, 0, 2] += Fraction(1, 8)
    assert not Scheme(4, 4, 4, q.U, q.V, W).verify()


def test_scheme_validation():
    with pytest.raises(ValueError):
        Scheme(2, 2, 2, STRASSEN.U, STRASSEN.V, STRASSEN.W[:, :, :1])
    with pytest.raises(TypeError):
        Scheme(1, 1, 1, [[[1.0]]], [[[1]]], [[[1]]])
    one = Scheme(1, 1, 1, [[[1]]], [[[1]]], [[["1"]]])
    assert one.verify() and one.naive_additions == 0 and one.coefficient_set == "ZT"
    assert STRASSEN.U.flags.writeable is False


def test_dict_roundtrip():
    for name in ("4x4x4:48", "2x2x2:7-winograd"):
        s = get_scheme(name)
        t = Scheme.from_dict(json.loads(json.dumps(s.to_dict())))
        assert same_scheme(s, t) and t.reduced_additions == s.reduced_additions
        assert t.aliases == s.aliases


def test_data_file_is_compact():
    data_dir = REPO / "falcon_mlir" / "catalog" / "data"
    files = list(data_dir.glob("catalog.json*"))
    assert files and sum(f.stat().st_size for f in files) < 3_000_000
    assert (data_dir / "licenses" / "LICENSE-FastMatrixMultiplication").is_file()
    assert (data_dir / "licenses" / "LICENSE-fast-matmul").is_file()


# --------------------------------------------------------------- property
@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(NAMES), perm=st.permutations([0, 1, 2]), seed=st.integers(0, 2**16))
def test_property_evaluate_matches_matmul(name, perm, seed):
    s = get_scheme(name)
    dims = (s.m, s.k, s.n)
    t = get_scheme(f"{dims[perm[0]]}x{dims[perm[1]]}x{dims[perm[2]]}:{s.R}" + (f"-{s.tag}" if s.tag else ""))
    assert_evaluates(t, seed=seed)


def test_block_evaluate():
    s = get_scheme("2x3x4:20")
    assert_evaluates(s, seed=41, p=3, q=2, r=5)
    with pytest.raises(ValueError):
        s.evaluate(np.ones((3, 3)), np.ones((3, 4)))
