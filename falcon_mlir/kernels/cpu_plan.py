"""LCMA plans on falcon's CPU kernel, with the combines inside the kernel (group-parallel on the CPU).

A plan runs one bilinear scheme ``<m,k,n;R>`` from falcon's catalog (several
levels are one composed scheme: ``strassen^2`` is ``<4,4,4;49>``, the
catalog's Kronecker product) on ``C = A @ B`` (f32, A ``M x K`` or stored
transposed ``K x M``, B ``K x N`` or stored ``N x K``, C ``M x N``, all row-major) as ``2 R`` dispatches of
:mod:`.cpu_gemm`'s LCMA entry points (or ``R``, below),
product by product, with no combine pass of its own:

* **combine B in the pack of B**: product r's ``lcma_pack_b`` writes the
  packed panels of ``B_r = sum_jl V[r,j,l] B_jl`` (each sum formed in AVX-512
  registers from the blocks' rows, rounded once per term), where the
  classical kernel copies B;
* **combine A in the pack of A**: ``lcma_gemm`` packs each ``MC x KC`` block
  of ``A_r = sum_ij U[r,i,j] A_ij`` into its L2 slot the same way, where the
  classical kernel copies A's rows;
* **combine C in the epilogue**: the micro-kernel writes its tile ``t`` of
  ``P_r = A_r @ B_r`` to every block ``C_il`` with ``W[r,i,l] != 0`` as
  ``C_il += W[r,i,l] t`` (stored, not added, where product r is the first
  to reach ``C_il``: no zero fill of C); the products run one after another
  (each ``lcma_gemm`` takes C and returns it), the workgroups of one product
  own disjoint tiles of every block.

* **or both in one dispatch**: where the products' blocks are at most 512 rows
  and B's block is large (:func:`.cpu_gemm.plan_b_inside`; plain layout, batch
  1, AVX-512), product r is one ``lcma_fgemm``: one workgroup per panel of
  columns over all rows of the block sums and packs ``B_r`` a ``KC x NC``
  panel at a time just before its micro-kernels use it, so the summed B never
  goes to memory (``R`` dispatches in all).

So each element of A and B is read from memory once per product that uses
it, the combined operands never exist outside L1/L2, and C is never
materialized per product: the FalconGEMM paper's group-parallel execution
(arXiv 2605.06057), for one CPU core's caches. Costs over the R products
themselves: the pack of B reads ``nnz(V[r])`` blocks instead of one; the
destinations' tiles are read and written once per K block per destination.

A transposed operand changes only where a term's block is: block ``(i, j)`` of A
is block ``(j, i)`` of the stored ``K x M`` matrix (likewise B); the packs read
it transposed (:mod:`.cpu_gemm`'s ``pack_a_t`` and ``pack_b_t``: 16 x 16
register transposes, the terms summed before the transpose), so the packed
operands and everything after them are those of the plain layout. A batch
(a leading dimension of A, B and C alike) runs through the same ``2 R``
dispatches: each entry's blocks are those of the plain plan, offset by the
entry.

Blocks: ``Mb = M / m``, ``Kb = K / k``, ``Nb = N / n`` exactly (the sizes must
be multiples of the format: nothing pads or peels a kernel-form plan on the CPU,
so falcon-kernels runs one on other sizes with the classical kernel, and the
x86-falcon profile's auto takes none there).
Coefficients must be ``num / 2^s`` with ``|num| <= 511``, ``s <= 15`` (every
scheme of the catalog's 2x2 family; :func:`encode_term` refuses others), and
a product may sum at most :data:`~.cpu_gemm.MAX_TERMS` blocks per operand and
write at most that many blocks of C.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Optional, Sequence

from . import cpu_gemm, cpu_source
from .cpu_gemm import MAX_TERMS, CpuGemmConfig
from .embed import module_text, reference_func, tensor_type
from .spec import GemmSpec

__all__ = ["CpuPlan", "Product", "encode_term", "plan_dispatch_lines", "plan_module"]


def encode_term(row: int, col: int, coef) -> int:
    """One term of a product for the kernel: block ``(row, col)`` of a grid of blocks and its coefficient,
    as ``row << 20 | col << 14 | (num + 512) << 4 | s`` where ``coef = num / 2^s`` (the C side:
    ``term_row``, ``term_col``, ``term_coef``). Below 2^26: an IREE push constant holds it.

    Raises:
        ValueError: the block is outside 0..63, or ``coef`` is zero or not ``num / 2^s`` with
            ``|num| <= 511``, ``s <= 15``.
    """
    if not (0 <= row < 64 and 0 <= col < 64):
        raise ValueError(f"block ({row}, {col}) outside the kernel's 64 x 64 grid")
    f = Fraction(coef)
    s = f.denominator.bit_length() - 1
    if f == 0 or f.denominator != 1 << s or s > 15 or abs(f.numerator) > 511:
        raise ValueError(f"coefficient {f} is not num / 2^s with |num| <= 511, s <= 15 (falcon's CPU kernel)")
    return row << 20 | col << 14 | (f.numerator + 512) << 4 | s


@dataclass(frozen=True)
class Product:
    """One product of a plan as the kernel runs it: encoded terms (:func:`encode_term`) of its A sum,
    its B sum and its C destinations, and ``first``: bit t set where destination t is written here
    for the first time (stored, not added)."""

    a_terms: tuple
    b_terms: tuple
    c_terms: tuple
    first: int


@dataclass(frozen=True)
class CpuPlan:
    """A plan for ``C = A @ B`` (f32, row-major) with scheme ``scheme`` on falcon's CPU kernel.

    Attributes:
        M, N, K: the GEMM's sizes, multiples of the scheme's ``m``, ``n``, ``k``.
        scheme: a catalog name (``strassen``, ``strassen^2``, ``winograd*strassen`` ...).
        config: the kernel's blocking (default :func:`cpu_gemm.choose_plan_config` of the product's blocks
            for ``isa``).
        trans_a: A is stored ``K x M`` (else ``M x K``); trans_b: B is stored ``N x K`` (else ``K x N``).
        batch: that many independent products, a leading dimension of A, B and C alike (each product's
            2 R dispatches run every entry: the pack's workgroup y is the entry, the GEMM's workgroup z a
            group of entries, :func:`cpu_gemm.batch_groups`).
        isa: the kernel's vector instructions (``avx512``, ``avx2``), the default config's; ``config.isa``
            where a config is given.
        b_inside: each product as one dispatch that sums and packs its B a panel at a time
            (``lcma_fgemm``), not two (``lcma_pack_b``, ``lcma_gemm``); default :func:`cpu_gemm.plan_b_inside`
            of the product's blocks (the plain layout at batch 1 only).

    Raises:
        ValueError: a size is not a positive multiple of the format, a flag not a bool; ``isa`` unknown
            or not ``config``'s; ``b_inside`` with a transposed operand or a batch; a product needs more than
            :data:`MAX_TERMS` terms; a coefficient :func:`encode_term` refuses.
        falcon_mlir.catalog.UnknownSchemeError: ``scheme`` is not in the catalog.
    """

    M: int
    N: int
    K: int
    scheme: str
    config: Optional[CpuGemmConfig] = None
    trans_a: bool = False
    trans_b: bool = False
    batch: int = 1
    isa: Optional[str] = None
    b_inside: Optional[bool] = None

    def __post_init__(self):
        for name in ("M", "N", "K", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"CpuPlan: {name} must be a positive int, got {v!r}")
        for name in ("trans_a", "trans_b"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"CpuPlan: {name} must be a bool, got {getattr(self, name)!r}")
        s = self.resolved
        if self.M % s.m or self.K % s.k or self.N % s.n:
            raise ValueError(f"CpuPlan: {self.M}x{self.N}x{self.K} (MxNxK) is not a multiple of "
                             f"{self.scheme}'s format <{s.m},{s.k},{s.n}>")
        plain = not (self.trans_a or self.trans_b) and self.batch == 1
        if self.b_inside is None:
            object.__setattr__(self, "b_inside", plain and cpu_gemm.plan_b_inside(
                self.Mb, self.Nb, self.Kb, (self.config.isa if self.config else self.isa) or "avx512"))
        elif not isinstance(self.b_inside, bool) or (self.b_inside and not plain):
            raise ValueError(f"CpuPlan: b_inside must be a bool, and True only in the plain layout at batch 1, "
                             f"got {self.b_inside!r}")
        if self.config is None:
            object.__setattr__(self, "config", cpu_gemm.choose_plan_config(self.Mb, self.Nb, self.Kb, self.batch,
                                                                           self.isa or "avx512", self.b_inside))
        elif self.isa not in (None, self.config.isa):
            raise ValueError(f"CpuPlan: isa={self.isa!r} but the config is for {self.config.isa}")
        object.__setattr__(self, "isa", self.config.isa)
        self.products  # noqa: B018 - checks the terms now

    @cached_property
    def resolved(self):
        """The catalog's :class:`~falcon_mlir.catalog.Scheme`."""
        from falcon_mlir.catalog import get_scheme

        return get_scheme(self.scheme)

    @property
    def Mb(self) -> int:
        return self.M // self.resolved.m

    @property
    def Kb(self) -> int:
        return self.K // self.resolved.k

    @property
    def Nb(self) -> int:
        return self.N // self.resolved.n

    @property
    def R(self) -> int:
        return self.resolved.R

    @cached_property
    def products(self) -> tuple:
        """The R :class:`Product` s in the order they run (the scheme's)."""
        s = self.resolved
        seen = set()
        out = []
        for r in range(s.R):
            terms = []
            for X in (s.U[r], s.V[r], s.W[r]):
                t = tuple(encode_term(i, j, X[i, j]) for i in range(X.shape[0]) for j in range(X.shape[1])
                          if X[i, j] != 0)
                if not t or len(t) > MAX_TERMS:
                    raise ValueError(f"CpuPlan {self.scheme}: product {r} has {len(t)} terms in one operand "
                                     f"(falcon's CPU kernel takes 1 to {MAX_TERMS})")
                terms.append(t)
            dests = [(i, j) for i in range(s.m) for j in range(s.n) if s.W[r][i, j] != 0]
            first = sum(1 << t for t, d in enumerate(dests) if d not in seen)
            seen.update(dests)
            out.append(Product(terms[0], terms[1], terms[2], first))
        if len(seen) != s.m * s.n:
            raise ValueError(f"CpuPlan {self.scheme}: W writes no product to some block of C")
        return tuple(out)

    @property
    def flops(self) -> int:
        """FLOP of the classical GEMM (2 batch M N K): effective throughput is this over the time."""
        return 2 * self.batch * self.M * self.N * self.K

    @property
    def spec(self) -> GemmSpec:
        """The f32 :class:`GemmSpec` of the whole product (its shapes are A's, B's and C's buffers)."""
        return GemmSpec(M=self.M, N=self.N, K=self.K, a_dtype="f32", b_dtype="f32", out_dtype="f32",
                        trans_a=self.trans_a, trans_b=self.trans_b, batch=self.batch)


def _pad(terms: tuple) -> list:
    return list(terms) + [0] * (MAX_TERMS - len(terms))


def plan_dispatch_lines(exe: str, plan: CpuPlan, a: str = "%a", b: str = "%b", result: str = "%p",
                        types: Optional[Sequence[str]] = None) -> tuple:
    """``(lines, C)``: the host-side lines computing ``C = A @ B`` by ``plan`` through executable ``@exe``
    (:func:`falcon_mlir.kernels.cpu_embed.executable_text`), and the SSA name of C.

    ``types``: the tensor types of A and B as the caller holds them (default the stored shapes:
    ``MxK`` or ``KxM``, ``KxN`` or ``NxK``).
    """
    p, c = plan, plan.config
    a_t, b_t = types or (tensor_type(p.spec.a_shape, "f32"), tensor_type(p.spec.b_shape, "f32"))
    c_t = tensor_type(p.spec.c_shape, "f32")
    bp_t = tensor_type((cpu_gemm.packed_b_floats(p.Nb, p.Kb, c, p.batch),), "f32")
    s_t = tensor_type((cpu_gemm.scratch_floats(p.Mb, p.Nb, p.Kb, c, lcma=True, batch=p.batch),), "f32")
    gp, gm, gn = cpu_gemm.grid(p.Mb, p.Nb, p.Kb, c)
    gz = cpu_gemm.batch_groups(p.Mb, p.Nb, p.batch, c)
    r = result
    # Rows of A and B as stored: M (A stored K x M) or K; K (B stored N x K) or N. Batch entries
    # sa, sb, sc floats apart; za, zb, zc: the whole buffers.
    consts = {"Mb": p.Mb, "Nb": p.Nb, "Kb": p.Kb, "lda": p.M if p.trans_a else p.K, "ldb": p.K if p.trans_b else p.N,
              "ldc": p.N, "ta": int(p.trans_a), "tb": int(p.trans_b), "batch": p.batch, "gp": gp, "gm": gm,
              "gn": gn, "gz": gz, "sa": p.M * p.K, "sb": p.K * p.N, "sc": p.M * p.N, "za": p.batch * p.M * p.K,
              "zb": p.batch * p.K * p.N, "zc": p.batch * p.M * p.N}
    values = sorted({v for pr in p.products for v in (*_pad(pr.a_terms), *_pad(pr.b_terms), *_pad(pr.c_terms),
                                                        len(pr.a_terms), len(pr.b_terms), len(pr.c_terms),
                                                        pr.first)})
    lines = [f"{r}_{k} = arith.constant {v} : index" for k, v in consts.items()]
    lines += [f"{r}_v{v} = arith.constant {v} : index" for v in values]
    lines.append(f"{r}_c0 = tensor.empty() : {c_t}")
    idx = lambda n: ", ".join(["index"] * n)  # noqa: E731
    v = lambda x: f"{r}_v{x}"  # noqa: E731
    c_in = f"{r}_c0"  # C as product i finds it: product i - 1's result
    if p.b_inside:
        sf_t = tensor_type((cpu_gemm.lcma_fused_scratch_floats(p.Mb, p.Nb, c),), "f32")
    for i, pr in enumerate(p.products):
        tb, ta, td = (", ".join(v(x) for x in _pad(t)) for t in (pr.b_terms, pr.a_terms, pr.c_terms))
        if p.b_inside:
            lines.append(f"{r}_g{i}:2 = flow.dispatch @{exe}::@lcma_fgemm[{r}_gn]({a}, {b}, {c_in}, {r}_Mb, {r}_Nb, "
                         f"{r}_Kb, {r}_lda, {r}_ldb, {r}_ldc, {v(len(pr.a_terms))}, {ta}, {v(len(pr.b_terms))}, {tb}, "
                         f"{v(len(pr.c_terms))}, {td}, {v(pr.first)}, {r}_za, {r}_zb, {r}_zc) : "
                         f"({a_t}, {b_t}, {c_t}, {idx(13 + 3 * MAX_TERMS)}) -> ({c_in}, {sf_t})")
            c_in = f"{r}_g{i}#0"
            continue
        lines.append(f"{r}_bp{i} = flow.dispatch @{exe}::@lcma_pack_b[{r}_gp, {r}_batch]({b}, {r}_Kb, {r}_Nb, "
                     f"{r}_ldb, {r}_tb, {r}_sb, {v(len(pr.b_terms))}, {tb}, {r}_zb) : ({b_t}, {idx(7 + MAX_TERMS)}) "
                     f"-> {bp_t}")
        lines.append(f"{r}_g{i}:2 = flow.dispatch @{exe}::@lcma_gemm[{r}_gm, {r}_gn, {r}_gz]({a}, {r}_bp{i}, {c_in}, "
                     f"{r}_Mb, {r}_Nb, {r}_Kb, {r}_lda, {r}_ldc, {r}_ta, {r}_batch, {r}_sa, {r}_sc, "
                     f"{v(len(pr.a_terms))}, {ta}, {v(len(pr.c_terms))}, {td}, {v(pr.first)}, {r}_za, {r}_zc) : "
                     f"({a_t}, {bp_t}, {c_t}, {idx(14 + 2 * MAX_TERMS)}) -> ({c_in}, {s_t})")
        c_in = f"{r}_g{i}#0"
    return lines, c_in


def plan_module(plan: CpuPlan, *, flags: Sequence[str] = (), target_attr: Optional[str] = None,
                reference: bool = False, func: str = "main", exe: str = "falcon_cpu_sgemm",
                obj: Optional[Path] = None) -> str:
    """A complete module: ``func.func @{func}(%a: MxK f32, %b: KxN f32) -> MxN f32`` running ``plan``
    (A ``KxM``, B ``NxK`` where the plan's ``trans_a``, ``trans_b``, all three with a leading ``batch``
    above 1; ``reference``: also
    ``@reference``, the same product compiled by IREE itself).

    ``flags``: the IREE flags the module will be compiled with (default
    :data:`~.cpu_embed.DEFAULT_CPU_FLAGS`); the rest as :func:`~.cpu_embed.gemm_module`.

    Raises:
        RuntimeError: as :func:`~.cpu_embed.gemm_module` (no AVX-512, the kernel does not compile).
    """
    from . import cpu_embed

    flags = tuple(flags) or cpu_embed.DEFAULT_CPU_FLAGS
    target_attr = target_attr or cpu_embed.cpu_target_attribute(flags)
    cpu_embed.check_target(flags, target_attr, plan.isa)
    obj = obj or cpu_source.compile_object(plan.config)
    a_t, b_t, c_t = (tensor_type(x, "f32") for x in (plan.spec.a_shape, plan.spec.b_shape, plan.spec.c_shape))
    lines, c = plan_dispatch_lines(exe, plan)
    body = "\n".join("  " + ln for ln in lines)
    parts = [cpu_embed.executable_text(exe, obj, target_attr, plan.config),
             f"func.func @{func}(%a: {a_t}, %b: {b_t}) -> {c_t} {{\n{body}\n  return {c} : {c_t}\n}}\n"]
    if reference:
        parts.append(reference_func(plan.spec))
    return module_text(parts)
