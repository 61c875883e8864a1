"""The C source of falcon's CPU GEMM kernel (see :mod:`falcon_mlir.kernels.cpu_gemm` for the design).

:func:`kernel_source` writes, for one blocking (:class:`~falcon_mlir.kernels.cpu_gemm.CpuGemmConfig`),
the eight entry points as one translation unit (in AVX-512 or AVX2, the config's ``isa``: the vector
operations go through :class:`_Isa`): the classical pair (pack B, GEMM), the classical GEMM
that packs B itself, the general pair (transposed operands, batches), the LCMA pair (an LCMA
plan's product with its terms summed in the packs and several destinations in the epilogue) and the
LCMA GEMM that sums and packs B itself (one dispatch per product), which
share one micro-kernel, one set of packs and the 16 x 16 transposing tile. :func:`compile_object`
compiles it (:mod:`falcon_mlir.kernels.cpu_object`). One module because the pieces are one C file:
each helper's text is used by the entry points written below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import cpu_object
from .cpu_gemm import (MAX_TERMS, CpuGemmConfig, entry_names, fused_entry_name, general_entry_names,
                       lcma_entry_names, lcma_fused_entry_name)

#: Bump when the generated source changes in a way the cache key would not see.
GENERATOR_VERSION = 7


_MEMREF = "const float *{n}_base, {q}float *{n}_ptr, size_t {n}_off, size_t {n}_size, size_t {n}_stride"


def _memref(name: str, const: bool) -> str:
    return _MEMREF.format(n=name, q="const " if const else "")


@dataclass(frozen=True)
class _Isa:
    """The vector instructions the generated C is written in: ``avx512`` (zmm, 16 floats, mask
    registers) or ``avx2`` (ymm, 8 floats, AVX2 + FMA; masks are vectors of all-ones lanes)."""

    name: str
    width: int
    vec: str
    prefix: str
    mask: str

    def zero(self) -> str:
        return f"{self.prefix}_setzero_ps()"

    def op(self, name: str, *args: str) -> str:
        """``{prefix}_{name}_ps(args)``: loadu, storeu, set1, fmadd, mul, add."""
        return f"{self.prefix}_{name}_ps({', '.join(args)})"

    def loadz(self, m: str, p: str) -> str:
        """Load the lanes of ``m`` from ``p``, the others 0 (nothing read there)."""
        return f"_mm512_maskz_loadu_ps({m}, {p})" if self.width == 16 else f"_mm256_maskload_ps({p}, {m})"

    def mstore(self, p: str, m: str, v: str) -> str:
        """Store the lanes of ``m`` of ``v`` at ``p``."""
        return f"_mm512_mask_storeu_ps({p}, {m}, {v})" if self.width == 16 else f"_mm256_maskstore_ps({p}, {m}, {v})"

    def lanes(self, n: str) -> str:
        """The mask of the first ``n`` lanes (``n`` a C expression of type long, any value)."""
        return f"lanes({n})"


_ISAS = {"avx512": _Isa("avx512", 16, "__m512", "_mm512", "__mmask16"),
         "avx2": _Isa("avx2", 8, "__m256", "_mm256", "__m256i")}


def _lanes_helper(isa: _Isa) -> str:
    if isa.width == 16:
        return ("static inline __mmask16 lanes(long n) {\n"
                "  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);\n}")
    return ("static inline __m256i lanes(long n) {\n"
            "  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n > 8 ? 8 : n)),\n"
            "                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));\n}")


def _microkernel(c: CpuGemmConfig) -> str:
    isa = _ISAS[c.isa]
    W, V = isa.width, isa.vec
    nv = c.nr // W
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(c.mr)]
    # The destinations' tiles into L2 first: their loads and stores at the end then miss no further
    # (C is M x N, it lives in L3 or memory at large sizes). Both are functions of their own (one
    # call per MR x NR tile and K block): inlined, gcc kept the callers' loop variables and the
    # rows' addresses live across the k loop and spilled the loop's own pointers to the stack (a
    # load and a store per k step).
    lines = ["static __attribute__((noinline)) void prefetch_dst(const Dst *d, size_t nd, size_t rows) {",
             "  for (size_t t = 0; t < nd; ++t)",
             "    for (size_t r = 0; r < rows; ++r) {",
             "      " + " ".join(f"_mm_prefetch((const char *)(d[t].c + r * d[t].ld + {16 * v}), _MM_HINT_T1);"
                                 for v in range(c.nr // 16)),
             "    }",
             "}",
             "",
             "static __attribute__((noinline)) void",
             "ukernel(size_t kc, const float *restrict a, const float *restrict b, const float *addp, size_t ldp,",
             "        const Dst *d, size_t nd, size_t rows, size_t cols, unsigned first, const float *pf) {",
             "  prefetch_dst(d, nd, rows);"]
    lines.append(f"  {V} " + ", ".join(f"{x} = {isa.zero()}" for row in acc for x in row) + ";")
    lines.append("  for (size_t k = 0; k < kc; ++k) {")
    lines.append("    " + " ".join(f"{V} b{v} = {isa.op('loadu', f'b + {W * v}')};" for v in range(nv)))
    # One line of the next B micro-panel into L2 per k step (the caller spreads them).
    lines.append("    _mm_prefetch((const char *)(pf + k * 16), _MM_HINT_T1);")
    for r in range(c.mr):
        fmas = " ".join(f"{acc[r][v]} = {isa.op('fmadd', f'a{r}', f'b{v}', acc[r][v])};" for v in range(nv))
        lines.append(f"    {{ {V} a{r} = {isa.op('set1', f'a[{r} * APS]')}; {fmas} }}")
    lines.append(f"    a += 1; b += {c.nr};")
    lines.append("  }")
    # The tile's columns per vector (all W but in an edge tile), for the loads and stores below.
    for v in range(nv):
        lines.append(f"  {isa.mask} m{v} = {isa.lanes(f'(long)cols - {W * v}')};")
    # Plus the partial sum of the earlier K blocks (a workgroup's private tile, `addp`), if any.
    lines.append("  if (addp) {")
    for r in range(c.mr):
        body = " ".join(f"{acc[r][v]} = {isa.op('add', acc[r][v], isa.loadz(f'm{v}', f'addp + {r} * ldp + {W * v}'))};"
                        for v in range(nv))
        lines.append(f"    if (rows > {r}) {{ {body} }}")
    lines.append("  }")
    # Each destination gets w * tile: stored where `first` has its bit, else added (one rounding:
    # w * acc + c fused, exact for w = +-1 as a plain add or subtract).
    lines.append("  for (size_t t = 0; t < nd; ++t) {")
    lines.append("    float *restrict c = d[t].c;")
    lines.append("    size_t ldc = d[t].ld;")
    lines.append(f"    {V} w = {isa.op('set1', 'd[t].w')};")
    lines.append("    int st = (first >> t) & 1u;")
    # Full tile: without masks.
    lines.append(f"    if (rows == {c.mr} && cols == {c.nr}) {{")
    lines.append("      if (st) {")
    for r in range(c.mr):
        lines.append("        " + " ".join(
            isa.op("storeu", f"c + {r} * ldc + {W * v}", isa.op("mul", "w", acc[r][v])) + ";" for v in range(nv)))
    lines.append("      } else {")
    for r in range(c.mr):
        lines.append("        " + " ".join(
            isa.op("storeu", f"c + {r} * ldc + {W * v}",
                   isa.op("fmadd", "w", acc[r][v], isa.op("loadu", f"c + {r} * ldc + {W * v}"))) + ";"
            for v in range(nv)))
    lines.append("      }")
    lines.append("      continue;")
    lines.append("    }")
    # Edge tile: masked columns, rows below `rows` only.
    for r in range(c.mr):
        body = " ".join(
            isa.mstore(f"c + {r} * ldc + {W * v}", f"m{v}",
                       f"st ? {isa.op('mul', 'w', acc[r][v])} : "
                       f"{isa.op('fmadd', 'w', acc[r][v], isa.loadz(f'm{v}', f'c + {r} * ldc + {W * v}'))}") + ";"
            for v in range(nv))
        lines.append(f"    if (rows > {r}) {{ {body} }}")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _tile16(isa: _Isa) -> str:
    """C of ``tile16``: a 16 x 16 block of ``sum_t w[t] src_t`` (rows ``ld`` apart) transposed into ``dst``
    (rows ``ldd`` apart) in zmm registers: unpack (pairs of floats), unpack (pairs of doubles), two
    128-bit lane shuffles, 64 shuffles per 256 elements. Source rows ``nrows`` and up read as 0, columns
    outside ``cm`` as 0; ``nout`` rows of ``dst`` are stored, each through mask ``om``."""
    head = ["static inline __attribute__((always_inline)) void",
            "tile16(const float *const *src, const float *w, size_t nt, size_t ld, size_t nrows, mask16 cm,",
            "       float *restrict dst, size_t ldd, size_t nout, mask16 om) {"]
    if isa.width != 16:
        return "\n".join(head) + "\n" + _TILE16_SCALAR
    r = [f"r{q}" for q in range(16)]
    t = [f"t{q}" for q in range(16)]
    lines = head + [
             "  __m512 " + ", ".join(f"{x} = _mm512_setzero_ps()" for x in r) + ";",
             "  __m512 " + ", ".join(t) + ";"]
    # Rows in term order, one rounding per term (as sum_row: the same sums as the row-major packs).
    for q in range(16):
        lines.append(f"  if (nrows > {q}) {{ {r[q]} = _mm512_mul_ps(_mm512_set1_ps(w[0]), "
                     f"_mm512_maskz_loadu_ps(cm, src[0] + {q} * ld)); for (size_t u = 1; u < nt; ++u) "
                     f"{r[q]} = _mm512_fmadd_ps(_mm512_set1_ps(w[u]), _mm512_maskz_loadu_ps(cm, src[u] + {q} * ld), "
                     f"{r[q]}); }}")
    # t[2i], t[2i+1]: floats of rows 2i and 2i+1 interleaved (per 128-bit lane L: columns 4L, 4L+1 and 4L+2, 4L+3).
    for i in range(8):
        lines.append(f"  {t[2 * i]} = _mm512_unpacklo_ps({r[2 * i]}, {r[2 * i + 1]}); "
                     f"{t[2 * i + 1]} = _mm512_unpackhi_ps({r[2 * i]}, {r[2 * i + 1]});")
    # r[4i + q]: column 4L + q of rows 4i..4i+3 in lane L.
    pd = lambda op, x, y: f"_mm512_castpd_ps(_mm512_{op}_pd(_mm512_castps_pd({x}), _mm512_castps_pd({y})))"  # noqa: E731
    for i in range(4):
        a, b, c, d = t[4 * i: 4 * i + 4]
        lines.append(f"  {r[4 * i]} = {pd('unpacklo', a, c)}; {r[4 * i + 1]} = {pd('unpackhi', a, c)};")
        lines.append(f"  {r[4 * i + 2]} = {pd('unpacklo', b, d)}; {r[4 * i + 3]} = {pd('unpackhi', b, d)};")
    # Lanes 0, 1 (0x44) and 2, 3 (0xEE) of rows 0-7 and of rows 8-15 ...
    for q in range(4):
        lines.append(f"  {t[q]} = _mm512_shuffle_f32x4({r[q]}, {r[4 + q]}, 0x44); "
                     f"{t[4 + q]} = _mm512_shuffle_f32x4({r[q]}, {r[4 + q]}, 0xEE);")
        lines.append(f"  {t[8 + q]} = _mm512_shuffle_f32x4({r[8 + q]}, {r[12 + q]}, 0x44); "
                     f"{t[12 + q]} = _mm512_shuffle_f32x4({r[8 + q]}, {r[12 + q]}, 0xEE);")
    # ... then output row 4L + q (input column 4L + q) from lane L of each group of four rows.
    for q in range(4):
        lines.append(f"  {r[q]} = _mm512_shuffle_f32x4({t[q]}, {t[8 + q]}, 0x88); "
                     f"{r[4 + q]} = _mm512_shuffle_f32x4({t[q]}, {t[8 + q]}, 0xDD);")
        lines.append(f"  {r[8 + q]} = _mm512_shuffle_f32x4({t[4 + q]}, {t[12 + q]}, 0x88); "
                     f"{r[12 + q]} = _mm512_shuffle_f32x4({t[4 + q]}, {t[12 + q]}, 0xDD);")
    for q in range(16):
        lines.append(f"  if (nout > {q}) _mm512_mask_storeu_ps(dst + {q} * ldd, om, {r[q]});")
    lines.append("}")
    return "\n".join(lines)


#: ``tile16``'s body without zmm registers (AVX2): element by element, each source row read along
#: its columns, the same sums in the same order (``w[0] x`` then one fused multiply-add per term).
#: Used by the transposed layouts' packs only; the plain layouts' packs and the micro-kernel are vector code.
_TILE16_SCALAR = """  for (size_t i = 0; i < 16; ++i)
    for (size_t q = 0; q < nout; ++q) {
      if (!((om >> i) & 1u)) continue;
      float s = 0.0f;
      if (i < nrows && ((cm >> q) & 1u)) {
        s = w[0] * src[0][i * ld + q];
        for (size_t u = 1; u < nt; ++u) s = __builtin_fmaf(w[u], src[u][i * ld + q], s);
      }
      dst[q * ldd + i] = s;
    }
}"""


def _sum_row(isa: _Isa) -> str:
    W, V = isa.width, isa.vec
    first = lambda m: isa.op("mul", isa.op("set1", "w[0]"), m("src[0] + k"))  # noqa: E731
    more = lambda m: isa.op("fmadd", isa.op("set1", "w[t]"), m("src[t] + k"), "s")  # noqa: E731
    full = lambda x: isa.op("loadu", x)  # noqa: E731
    part = lambda x: isa.loadz("m", x)  # noqa: E731
    return f"""/* dst[0, n) = sum_t w[t] * src[t][0, n) (one rounding per term, in term order). */
static inline __attribute__((always_inline)) void
sum_row(float *restrict dst, const float *const *src, const float *w, size_t nt, size_t n) {{
  size_t k = 0;
  for (; k + {W} <= n; k += {W}) {{
    {V} s = {first(full)};
    for (size_t t = 1; t < nt; ++t)
      s = {more(full)};
    {isa.op("storeu", "dst + k", "s")};
  }}
  if (k < n) {{
    {isa.mask} m = lanes((long)(n - k));
    {V} s = {first(part)};
    for (size_t t = 1; t < nt; ++t)
      s = {more(part)};
    {isa.mstore("dst + k", "m", "s")};
  }}
}}"""


def kernel_source(config: CpuGemmConfig = CpuGemmConfig()) -> str:
    """The C source of the eight entry points for ``config`` (sizes are run-time arguments):
    the classical pair (:func:`entry_names`), the classical GEMM that packs B itself
    (:func:`fused_entry_name`), the general classical pair (:func:`general_entry_names`), the LCMA
    pair (:func:`lcma_entry_names`) and the LCMA GEMM that sums and packs B itself
    (:func:`lcma_fused_entry_name`)."""
    c = config
    isa = _ISAS[c.isa]
    pack_b_name, gemm_name = entry_names(c)
    fgemm_name = fused_entry_name(c)
    lpack_b_name, lgemm_name = lcma_entry_names(c)
    lfgemm_name = lcma_fused_entry_name(c)
    gpack_b_name, ggemm_name = general_entry_names(c)
    terms = lambda p: ", ".join(f"size_t {p}{i}" for i in range(MAX_TERMS))  # noqa: E731
    term_list = lambda p: ", ".join(f"{p}{i}" for i in range(MAX_TERMS))  # noqa: E731
    return f"""/* falcon's f32 GEMM for x86-64 {isa.name.upper()}, {c.label} (generator v{GENERATOR_VERSION}). */
#include <immintrin.h>
#include <stddef.h>

#define MR {c.mr}
#define NR {c.nr}
#define KC {c.kc}
#define MC {c.mc}
#define NC {c.nc}
#define PACK_ROWS {c.pack_rows}
#define MAX_TERMS {MAX_TERMS}
#define PF_PARTS (NR / 16)
#define APS (KC + 16) /* row stride of packed A: one line of padding spreads the rows over L1's sets */
#define MIN(x, y) ((x) < (y) ? (x) : (y))
#define PACKED(N, K) (((N) + NR - 1) / NR * (K) * NR) /* floats of packed B for a K x N B */
#define MASK16(n) ((n) >= 16 ? (mask16)0xFFFF : (mask16)((1u << (n)) - 1u))
typedef unsigned short mask16; /* a bit per column of a 16 x 16 tile (tile16) */

/* One destination of a micro-kernel's tile: C += w * tile (or C = w * tile), rows ld apart. */
typedef struct {{ float *c; size_t ld; float w; }} Dst;

/* A term (encode_term): block (row, column) of a matrix in a grid of blocks, and a coefficient
   num / 2^shift. */
static inline size_t term_row(size_t t) {{ return (t >> 20) & 63; }}
static inline size_t term_col(size_t t) {{ return (t >> 14) & 63; }}
static inline float term_coef(size_t t) {{
  return (float)((long)((t >> 4) & 1023) - 512) / (float)(1u << (t & 15));
}}

{_lanes_helper(isa)}

{_microkernel(c)}

{_tile16(isa)}

{_sum_row(isa)}

/* Bp[j][k][r] = sum_t w[t] * B_t[k][j*NR + r] (0 past N) for rows k of this workgroup; B_t's rows
   are ldb apart. */
static void pack_b(const float *const *b, const float *w, size_t nt, size_t N, size_t K, size_t ldb,
                   size_t wg, float *restrict bp) {{
  size_t k0 = wg * PACK_ROWS, k1 = MIN(K, k0 + PACK_ROWS);
  const float *src[MAX_TERMS];
  for (size_t j = 0; j * NR < N; ++j) {{
    size_t cols = MIN(NR, N - j * NR);
    for (size_t k = k0; k < k1; ++k) {{
      float *restrict dst = bp + (j * K + k) * NR;
      for (size_t t = 0; t < nt; ++t) src[t] = b[t] + k * ldb + j * NR;
      sum_row(dst, src, w, nt, cols);
      for (size_t r = cols; r < NR; ++r) dst[r] = 0.0f;
    }}
  }}
}}

/* Transposed: Bp[j][k][r] = sum_t w[t] * Bt_t[j*NR + r][k] (0 past N) for rows k of this workgroup;
   Bt_t (N x K) has rows ldb apart. Each 16 x 16 block of Bt (16 rows of a panel, 16 columns of this
   workgroup's) is read once, whole lines when PACK_ROWS is 16, and leaves as 16 packed half-rows. */
static void pack_b_t(const float *const *b, const float *w, size_t nt, size_t N, size_t K, size_t ldb,
                     size_t wg, float *restrict bp) {{
  size_t k0 = wg * PACK_ROWS, k1 = MIN(K, k0 + PACK_ROWS);
  const float *src[MAX_TERMS];
  for (size_t j = 0; j * NR < N; ++j) {{
    size_t cols = MIN(NR, N - j * NR);
    for (size_t k = k0; k < k1; k += 16) {{
      size_t kn = MIN(16, k1 - k);
      for (size_t v = 0; v < NR; v += 16) {{
        for (size_t t = 0; t < nt; ++t) src[t] = b[t] + (j * NR + v) * ldb + k;
        tile16(src, w, nt, ldb, cols > v ? MIN(16, cols - v) : 0, MASK16(kn), bp + (j * K + k) * NR + v, NR, kn,
               (mask16)0xFFFF);
      }}
    }}
  }}
}}

/* Rows [0, mc) x columns [0, kc) of sum_t w[t] * A_t (rows lda apart) into ap[i][k] (row stride
   APS), rows mc..MC zero; the micro-kernel broadcasts from MR rows at once. */
static void pack_a(const float *const *a, const float *w, size_t nt, size_t lda, size_t mc, size_t kc,
                   float *restrict ap) {{
  const float *src[MAX_TERMS];
  for (size_t i = 0; i < MC; ++i) {{
    float *restrict dst = ap + i * APS;
    if (i < mc) {{
      for (size_t t = 0; t < nt; ++t) src[t] = a[t] + i * lda;
      sum_row(dst, src, w, nt, kc);
    }} else {{
      for (size_t k = 0; k < kc; ++k) dst[k] = 0.0f;
    }}
  }}
}}

/* Transposed: ap[i][k] = sum_t w[t] * At_t[k][i] for i < mc, k < kc (At_t: rows lda apart), rows mc..MC
   zero. 16 x 16 blocks: 16 rows of At (k), read along i (whole lines), stored as 16 packed rows (i). */
static void pack_a_t(const float *const *a, const float *w, size_t nt, size_t lda, size_t mc, size_t kc,
                     float *restrict ap) {{
  const float *src[MAX_TERMS];
  for (size_t k = 0; k < kc; k += 16) {{
    size_t kn = MIN(16, kc - k);
    for (size_t i = 0; i < MC; i += 16) {{
      size_t in = i < mc ? MIN(16, mc - i) : 0;
      for (size_t t = 0; t < nt; ++t) src[t] = a[t] + k * lda + i;
      tile16(src, w, nt, lda, in ? kn : 0, MASK16(in), ap + i * APS + k, APS, MIN(16, MC - i), MASK16(kn));
    }}
  }}
}}

/* Block (wg_m, wg_n) of the destinations d[t].c += d[t].w * (sum_t w[t] A_t) @ B, MC x NC of an
   M x N product, K in blocks of KC; A_t M x K (rows lda apart), or stored K x M where trans_a (pack_a_t);
   B packed (pack_b or pack_b_t); a destination with a bit in `first` is stored
   into, not added to. With several destinations and several K blocks, the K blocks but the last
   accumulate in the workgroup's private MC x NC tile `pb` (L2), and the last adds it on its way
   to the destinations: each destination is read and written once, not once per K block. */
static void gemm_block(const float *const *a, const float *wa, size_t na, size_t lda, size_t trans_a,
                       const float *bp,
                       const Dst *dst, size_t nd, unsigned first, float *restrict ap, float *restrict pb,
                       size_t M, size_t N, size_t K, size_t wg_m, size_t wg_n) {{
  size_t i0 = wg_m * MC, j0 = wg_n * NC;
  size_t mc = MIN(MC, M - i0), nc = MIN(NC, N - j0);
  int private_tile = nd > 1 && K > KC;
  const float *as[MAX_TERMS];
  Dst d[MAX_TERMS];
  for (size_t p0 = 0; p0 < K; p0 += KC) {{
    size_t kc = MIN(KC, K - p0);
    int last = p0 + KC >= K;
    for (size_t t = 0; t < na; ++t) as[t] = a[t] + (trans_a ? p0 * lda + i0 : i0 * lda + p0);
    if (trans_a)
      pack_a_t(as, wa, na, lda, mc, kc, ap);
    else
      pack_a(as, wa, na, lda, mc, kc, ap);
    for (size_t j = 0; j < nc; j += NR) {{
      const float *bpan = bp + ((j0 + j) / NR) * K * NR + p0 * NR;
      size_t cols = MIN(NR, nc - j);
      /* Call t prefetches lines [t%PF_PARTS * kc, ...) of the next B micro-panel (kc * NR/16 lines). */
      const float *bnext = j + NR < nc ? bpan + K * NR : bpan;
      for (size_t i = 0, t = 0; i < mc; i += MR, ++t) {{
        size_t rows = MIN(MR, mc - i);
        const float *pf = bnext + (t % PF_PARTS) * kc * 16;
        if (private_tile && !last) {{
          Dst own = {{pb + i * NC + j, NC, 1.0f}};
          ukernel(kc, ap + i * APS, bpan, 0, 0, &own, 1, rows, cols, p0 == 0, pf);
          continue;
        }}
        for (size_t u = 0; u < nd; ++u) {{
          d[u].c = dst[u].c + (i0 + i) * dst[u].ld + j0 + j;
          d[u].ld = dst[u].ld;
          d[u].w = dst[u].w;
        }}
        ukernel(kc, ap + i * APS, bpan, private_tile ? pb + i * NC + j : 0, NC, d, nd, rows, cols,
                private_tile || p0 == 0 ? first : 0u, pf);
      }}
    }}
  }}
}}

/* Rows [p0, p0 + kc) x columns [j0, j0 + nc) of sum_t w[t] B_t (K x N blocks, rows ldb apart) packed as
   micro-panels [nc / NR][KC][NR] (0 past nc) into bp. */
static void pack_b_panel(const float *const *b, const float *w, size_t nt, size_t ldb, size_t p0, size_t kc,
                         size_t j0, size_t nc, float *restrict bp) {{
  const float *src[MAX_TERMS];
  for (size_t j = 0; j < nc; j += NR) {{
    size_t cols = MIN(NR, nc - j);
    float *pan = bp + (j / NR) * KC * NR;
    for (size_t k = 0; k < kc; ++k) {{
      float *restrict dst = pan + k * NR;
      for (size_t t = 0; t < nt; ++t) src[t] = b[t] + (p0 + k) * ldb + j0 + j;
      sum_row(dst, src, w, nt, cols);
      for (size_t r = cols; r < NR; ++r) dst[r] = 0.0f;
    }}
  }}
}}

/* Columns [wg_n NC, + NC) of the destinations d[t].c += d[t].w * (sum_t wa[t] A_t) @ (sum_t wb[t] B_t) over
   all M rows (A_t M x K, rows lda apart; B_t K x N, rows ldb apart; row-major), the sum of B packed here a
   KC x NC panel at a time into bp (the workgroup's, L2) just before use (BLIS order: K blocks outside,
   blocks of MC rows inside); a destination with a bit in `first` is stored into by the first K block,
   later ones add. With several destinations and several K blocks, the K blocks but the last accumulate
   in the workgroup's private M x NC tile `pt`, and the last adds it on its way to the destinations
   (as gemm_block). */
static void gemm_panels(const float *const *a, const float *wa, size_t na, size_t lda,
                        const float *const *b, const float *wb, size_t nb, size_t ldb,
                        const Dst *dst, size_t nd, unsigned first, float *restrict ap, float *restrict bp,
                        float *restrict pt, size_t M, size_t N, size_t K, size_t wg_n) {{
  size_t j0 = wg_n * NC, nc = MIN(NC, N - j0);
  int private_tile = nd > 1 && K > KC;
  const float *as[MAX_TERMS];
  Dst d[MAX_TERMS];
  for (size_t p0 = 0; p0 < K; p0 += KC) {{
    size_t kc = MIN(KC, K - p0);
    int last = p0 + KC >= K;
    pack_b_panel(b, wb, nb, ldb, p0, kc, j0, nc, bp);
    for (size_t i0 = 0; i0 < M; i0 += MC) {{
      size_t mc = MIN(MC, M - i0);
      for (size_t t = 0; t < na; ++t) as[t] = a[t] + i0 * lda + p0;
      pack_a(as, wa, na, lda, mc, kc, ap);
      for (size_t j = 0; j < nc; j += NR) {{
        const float *bpan = bp + (j / NR) * KC * NR;
        size_t cols = MIN(NR, nc - j);
        const float *bnext = j + NR < nc ? bpan + KC * NR : bpan;
        for (size_t i = 0, t = 0; i < mc; i += MR, ++t) {{
          size_t rows = MIN(MR, mc - i);
          const float *pf = bnext + (t % PF_PARTS) * kc * 16;
          float *own = private_tile ? pt + (i0 + i) * NC + j : 0;
          if (private_tile && !last) {{
            Dst o = {{own, NC, 1.0f}};
            ukernel(kc, ap + i * APS, bpan, 0, 0, &o, 1, rows, cols, p0 == 0, pf);
            continue;
          }}
          for (size_t u = 0; u < nd; ++u) {{
            d[u].c = dst[u].c + (i0 + i) * dst[u].ld + j0 + j;
            d[u].ld = dst[u].ld;
            d[u].w = dst[u].w;
          }}
          ukernel(kc, ap + i * APS, bpan, own, NC, d, nd, rows, cols, private_tile || p0 == 0 ? first : 0u, pf);
        }}
      }}
    }}
  }}
}}

/* Classical: Bp[j][k][r] = B[k][j*NR + r] (0 past N) for rows k of this workgroup. */
__attribute__((visibility("hidden"))) void {pack_b_name}({_memref("b", True)},
    {_memref("bp", False)}, size_t M, size_t N, size_t K, size_t wg) {{
  const float *b = b_ptr + b_off;
  const float one = 1.0f;
  (void)M;
  pack_b(&b, &one, 1, N, K, N, wg, bp_ptr + bp_off);
}}

/* Classical: block (wg_m, wg_n) of C = A @ B: MC x NC, K in blocks of KC. */
__attribute__((visibility("hidden"))) void {gemm_name}({_memref("a", True)},
    {_memref("bp", True)}, {_memref("c", False)}, {_memref("s", False)},
    size_t M, size_t N, size_t K, size_t wg_m, size_t wg_n) {{
  const float *a = a_ptr + a_off;
  const float one = 1.0f;
  Dst d = {{c_ptr + c_off, N, 1.0f}};
  size_t gn = (N + NC - 1) / NC;
  float *ap = s_ptr + s_off + (wg_m * gn + wg_n) * (size_t)(MC * APS);
  gemm_block(&a, &one, 1, K, 0, bp_ptr + bp_off, &d, 1, 1u, ap, 0, M, N, K, wg_m, wg_n);
}}

/* Classical, B packed inside (fuse_b_inside): columns [wg_n NC, + NC) of C = A @ B over all M; the
   workgroup's slot of S holds one KC x NC panel of packed B, then its packed-A slot. */
__attribute__((visibility("hidden"))) void {fgemm_name}({_memref("a", True)},
    {_memref("b", True)}, {_memref("c", False)}, {_memref("s", False)},
    size_t M, size_t N, size_t K, size_t wg_n) {{
  float *bp = s_ptr + s_off + wg_n * (size_t)(KC * NC + MC * APS);
  const float *a = a_ptr + a_off, *b = b_ptr + b_off;
  const float one = 1.0f;
  Dst d = {{c_ptr + c_off, N, 1.0f}};
  gemm_panels(&a, &one, 1, K, &b, &one, 1, N, &d, 1, 1u, bp + KC * NC, bp, 0, M, N, K, wg_n);
}}

/* General classical: packed B of batch entry wg_b of B (K x N, or stored N x K where trans_b; entries
   K N floats apart), into entry wg_b of Bp (PACKED(N, K) floats apart). */
__attribute__((visibility("hidden"))) void {gpack_b_name}({_memref("b", True)},
    {_memref("bp", False)}, size_t N, size_t K, size_t trans_b, size_t wg, size_t wg_b) {{
  const float *b = b_ptr + b_off + wg_b * K * N;
  float *bp = bp_ptr + bp_off + wg_b * PACKED(N, K);
  const float one = 1.0f;
  if (trans_b)
    pack_b_t(&b, &one, 1, N, K, K, wg, bp);
  else
    pack_b(&b, &one, 1, N, K, N, wg, bp);
}}

/* General classical: block (wg_m, wg_n) of C = A @ B for batch entries wg_b, wg_b + n_wg_b, ... below
   `batch` (A M x K, or stored K x M where trans_a; entries M K, K N packed, M N floats apart). The
   packed-A slot is the workgroup's own: ((wg_b * gm + wg_m) * gn + wg_n), n_wg_b * gm * gn in all. */
__attribute__((visibility("hidden"))) void {ggemm_name}({_memref("a", True)},
    {_memref("bp", True)}, {_memref("c", False)}, {_memref("s", False)},
    size_t M, size_t N, size_t K, size_t trans_a, size_t batch, size_t wg_m, size_t wg_n, size_t wg_b,
    size_t n_wg_b) {{
  const float one = 1.0f;
  size_t gm = (M + MC - 1) / MC, gn = (N + NC - 1) / NC;
  float *ap = s_ptr + s_off + ((wg_b * gm + wg_m) * gn + wg_n) * (size_t)(MC * APS);
  for (size_t bi = wg_b; bi < batch; bi += n_wg_b) {{
    const float *a = a_ptr + a_off + bi * M * K;
    Dst d = {{c_ptr + c_off + bi * M * N, N, 1.0f}};
    gemm_block(&a, &one, 1, trans_a ? M : K, trans_a, bp_ptr + bp_off + bi * PACKED(N, K), &d, 1, 1u, ap, 0,
               M, N, K, wg_m, wg_n);
  }}
}}

/* LCMA product, pack: Bp = sum_t coef(t) * B[block(t)] for the nb terms tb0.., blocks K x N of a
   B whose rows are ldb apart; where trans_b, B is stored transposed (its block (k, n) is block (n, k)
   of the stored N x K matrix, packed by pack_b_t). Batch entry wg_b: B's entries sb floats apart,
   Bp's PACKED(N, K). */
__attribute__((visibility("hidden"))) void {lpack_b_name}({_memref("b", True)},
    {_memref("bp", False)}, size_t K, size_t N, size_t ldb, size_t trans_b, size_t sb, size_t nb,
    {terms("tb")}, size_t wg, size_t wg_b) {{
  const size_t tb[MAX_TERMS] = {{{term_list("tb")}}};
  const float *b[MAX_TERMS];
  float w[MAX_TERMS];
  for (size_t t = 0; t < nb; ++t) {{
    b[t] = b_ptr + b_off + wg_b * sb + (trans_b ? term_col(tb[t]) * N * ldb + term_row(tb[t]) * K
                                                : term_row(tb[t]) * K * ldb + term_col(tb[t]) * N);
    w[t] = term_coef(tb[t]);
  }}
  float *bp = bp_ptr + bp_off + wg_b * PACKED(N, K);
  if (trans_b)
    pack_b_t(b, w, nb, N, K, ldb, wg, bp);
  else
    pack_b(b, w, nb, N, K, ldb, wg, bp);
}}

/* LCMA product, GEMM: block (wg_m, wg_n) of P = (sum coef(ta) A[block(ta)]) @ Bp, added with
   coef(td) into each C[block(td)] of the nd destinations (stored where `first` has the bit);
   blocks M x K of A (rows lda apart; where trans_a, A is stored transposed: its block (m, k) is
   block (k, m) of the stored K x M matrix), M x N of C (rows ldc apart). Batch entries wg_b, wg_b +
   n_wg_b, ... below `batch`: A's sa floats apart, C's sc, Bp's PACKED(N, K); the workgroup's slot
   of S as in the general GEMM. */
__attribute__((visibility("hidden"))) void {lgemm_name}({_memref("a", True)},
    {_memref("bp", True)}, {_memref("c", False)}, {_memref("s", False)},
    size_t M, size_t N, size_t K, size_t lda, size_t ldc, size_t trans_a, size_t batch, size_t sa, size_t sc,
    size_t na, {terms("ta")}, size_t nd, {terms("td")}, size_t first, size_t wg_m, size_t wg_n, size_t wg_b,
    size_t n_wg_b) {{
  const size_t ta[MAX_TERMS] = {{{term_list("ta")}}};
  const size_t td[MAX_TERMS] = {{{term_list("td")}}};
  const float *a[MAX_TERMS];
  float wa[MAX_TERMS];
  Dst d[MAX_TERMS];
  size_t gm = (M + MC - 1) / MC, gn = (N + NC - 1) / NC;
  float *ap = s_ptr + s_off + ((wg_b * gm + wg_m) * gn + wg_n) * (size_t)(MC * APS + MC * NC);
  for (size_t bi = wg_b; bi < batch; bi += n_wg_b) {{
    for (size_t t = 0; t < na; ++t) {{
      a[t] = a_ptr + a_off + bi * sa + (trans_a ? term_col(ta[t]) * K * lda + term_row(ta[t]) * M
                                                : term_row(ta[t]) * M * lda + term_col(ta[t]) * K);
      wa[t] = term_coef(ta[t]);
    }}
    for (size_t t = 0; t < nd; ++t) {{
      d[t].c = c_ptr + c_off + bi * sc + term_row(td[t]) * M * ldc + term_col(td[t]) * N;
      d[t].ld = ldc;
      d[t].w = term_coef(td[t]);
    }}
    gemm_block(a, wa, na, lda, trans_a, bp_ptr + bp_off + bi * PACKED(N, K), d, nd, (unsigned)first, ap,
               ap + MC * APS, M, N, K, wg_m, wg_n);
  }}
}}

/* LCMA product, B summed and packed inside (cpu_gemm.plan_b_inside): columns [wg_n NC, + NC) of
   P = (sum coef(ta) A[block(ta)]) @ (sum coef(tb) B[block(tb)]) over all M rows, added with coef(td) into
   each C[block(td)] of the nd destinations (stored where `first` has the bit); blocks M x K of A (rows
   lda apart), K x N of B (rows ldb apart), M x N of C (rows ldc apart), all row-major, no batch. The
   workgroup's slot of S: a KC x NC panel of the summed B, the packed-A slot, an M x NC private tile. */
__attribute__((visibility("hidden"))) void {lfgemm_name}({_memref("a", True)},
    {_memref("b", True)}, {_memref("c", False)}, {_memref("s", False)},
    size_t M, size_t N, size_t K, size_t lda, size_t ldb, size_t ldc, size_t na, {terms("ta")}, size_t nb,
    {terms("tb")}, size_t nd, {terms("td")}, size_t first, size_t wg_n) {{
  const size_t ta[MAX_TERMS] = {{{term_list("ta")}}};
  const size_t tb[MAX_TERMS] = {{{term_list("tb")}}};
  const size_t td[MAX_TERMS] = {{{term_list("td")}}};
  const float *a[MAX_TERMS], *b[MAX_TERMS];
  float wa[MAX_TERMS], wb[MAX_TERMS];
  Dst d[MAX_TERMS];
  for (size_t t = 0; t < na; ++t) {{
    a[t] = a_ptr + a_off + term_row(ta[t]) * M * lda + term_col(ta[t]) * K;
    wa[t] = term_coef(ta[t]);
  }}
  for (size_t t = 0; t < nb; ++t) {{
    b[t] = b_ptr + b_off + term_row(tb[t]) * K * ldb + term_col(tb[t]) * N;
    wb[t] = term_coef(tb[t]);
  }}
  for (size_t t = 0; t < nd; ++t) {{
    d[t].c = c_ptr + c_off + term_row(td[t]) * M * ldc + term_col(td[t]) * N;
    d[t].ld = ldc;
    d[t].w = term_coef(td[t]);
  }}
  float *bp = s_ptr + s_off + wg_n * (size_t)(KC * NC + MC * APS + M * NC);
  gemm_panels(a, wa, na, lda, b, wb, nb, ldb, d, nd, (unsigned)first, bp + KC * NC, bp, bp + KC * NC + MC * APS,
              M, N, K, wg_n);
}}
"""


def compile_object(config: CpuGemmConfig = CpuGemmConfig(), cache: bool = True) -> Path:
    """Compile :func:`kernel_source` for ``config`` to a relocatable x86-64 object; its path.

    Raises:
        RuntimeError: as :func:`falcon_mlir.kernels.cpu_object.compile_source`.
    """
    return cpu_object.compile_source(kernel_source(config), config.label, cache, config.isa)
