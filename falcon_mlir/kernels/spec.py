"""What one generated GEMM kernel computes: :class:`GemmSpec`, and which specs it serves.

``C[b] = op(A[b]) @ op(B[b])`` for ``b`` in ``range(batch)``, with

* A stored ``M x K`` row-major (``trans_a=False``) or ``K x M`` (``trans_a=True``,
  read in place: the kernel computes with its transpose, no copy);
* B stored ``K x N`` row-major (``trans_b=False``) or ``N x K`` (``trans_b=True``);
* C written ``M x N`` row-major in ``out_dtype``;
* every product accumulated in f32 (``acc`` is always ``"f32"``);
* with ``batch > 1`` each operand is a dense stack: A is ``batch x M x K``
  (or ``batch x K x M``), and so on, batch-major.

Element types use MLIR's spelling: ``"f32"``, ``"f16"``, ``"bf16"``. f32
inputs multiply as ``f32_mode`` says: ``"ieee"`` (the default: IEEE f32
fused multiply-adds, no tensor cores), ``"tf32"`` (tensor cores on inputs
rounded to tf32, 10 mantissa bits) or ``"tf32x3"`` (3xTF32: each input split
into a tf32 high part and a tf32 remainder, three tensor-core products
``hi*hi + hi*lo + lo*hi``; close to f32 accuracy, but not IEEE FMA).

The kernels load A and B through TMA (the Hopper tensor memory accelerator),
which needs every row stride of a stored operand to be a multiple of 16 bytes;
:func:`supports` says why a spec is not served so that the caller can leave
that contraction to IREE's own code generation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

#: Element types the kernels read and write (MLIR spelling).
DTYPES = ("f32", "f16", "bf16")
#: Bytes per element.
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
#: TMA: every stride but the innermost must be a multiple of this many bytes.
TMA_ALIGN_BYTES = 16
#: How f32 inputs are multiplied (``GemmSpec.f32_mode``).
F32_MODES = ("ieee", "tf32", "tf32x3")
#: TMA and the kernels' index arithmetic take each dimension as a signed i32.
MAX_DIM = 2**31 - 1


class DictFields:
    """``to_dict`` and ``from_dict`` of the frozen dataclasses of the kernels (specs and configurations)."""

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict (inverse of :meth:`from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        """Build from :meth:`to_dict`'s output.

        Raises:
            ValueError: unknown keys or invalid values.
        """
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(sorted(unknown))}")
        return cls(**d)


@dataclass(frozen=True)
class GemmSpec(DictFields):
    """One GEMM ``C = op(A) @ op(B)`` (optionally batched) with static sizes.

    Args:
        M, N, K: C is ``M x N``, the reduction is ``K`` long (ints >= 1).
        a_dtype, b_dtype: element types of the stored A and B (``DTYPES``).
        out_dtype: element type of C (``DTYPES``).
        batch: number of independent products (1 = none; int >= 1).
        trans_a: A is stored ``K x M`` (read in place as its transpose).
        trans_b: B is stored ``N x K`` (read in place as its transpose).
        f32_mode: how f32 inputs are multiplied (``F32_MODES``): ``"ieee"``
            (FMA), ``"tf32"`` or ``"tf32x3"`` (tensor cores). Ignored for
            16-bit inputs.
        acc: accumulator type; only ``"f32"``.

    Raises:
        ValueError: a size that is not a positive int (or too large for i32
            indexing), an unknown dtype or f32 mode, a non-bool flag, or ``acc != "f32"``.
    """

    M: int
    N: int
    K: int
    a_dtype: str = "bf16"
    b_dtype: str = "bf16"
    out_dtype: str = "bf16"
    batch: int = 1
    trans_a: bool = False
    trans_b: bool = False
    f32_mode: str = "ieee"
    acc: str = "f32"

    def __post_init__(self):
        for name in ("M", "N", "K", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"GemmSpec.{name} must be an int, got {v!r}")
            if v < 1:
                raise ValueError(f"GemmSpec.{name} must be >= 1, got {v}")
            if v > MAX_DIM:
                raise ValueError(f"GemmSpec.{name} = {v} exceeds {MAX_DIM} (sizes are i32 in the kernel)")
        for name in ("a_dtype", "b_dtype", "out_dtype"):
            v = getattr(self, name)
            if v not in DTYPES:
                raise ValueError(f"GemmSpec.{name} must be one of {', '.join(DTYPES)}, got {v!r}")
        if self.f32_mode not in F32_MODES:
            raise ValueError(f"GemmSpec.f32_mode must be one of {', '.join(F32_MODES)}, got {self.f32_mode!r}")
        for name in ("trans_a", "trans_b"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise ValueError(f"GemmSpec.{name} must be a bool, got {v!r}")
        if self.acc != "f32":
            raise ValueError(f"GemmSpec.acc must be 'f32' (the kernels accumulate in f32), got {self.acc!r}")

    # -- shapes as stored -------------------------------------------------
    @property
    def a_shape(self) -> tuple:
        """Shape of A as stored: ``(M, K)`` or ``(K, M)``, with a leading ``batch`` when batch > 1."""
        s = (self.K, self.M) if self.trans_a else (self.M, self.K)
        return ((self.batch,) + s) if self.batch > 1 else s

    @property
    def b_shape(self) -> tuple:
        """Shape of B as stored: ``(K, N)`` or ``(N, K)``, with a leading ``batch`` when batch > 1."""
        s = (self.N, self.K) if self.trans_b else (self.K, self.N)
        return ((self.batch,) + s) if self.batch > 1 else s

    @property
    def c_shape(self) -> tuple:
        """Shape of C: ``(M, N)``, with a leading ``batch`` when batch > 1."""
        return ((self.batch,) + (self.M, self.N)) if self.batch > 1 else (self.M, self.N)

    @property
    def flops(self) -> int:
        """Multiply-adds times two: ``2 * batch * M * N * K``."""
        return 2 * self.batch * self.M * self.N * self.K

    @property
    def input_class(self) -> str:
        """``"16bit"`` for f16/bf16 inputs; for f32 inputs ``"f32"`` (IEEE), ``"tf32"`` or ``"tf32x3"``
        (``f32_mode``); ``"mixed"`` for mixed inputs."""
        if self.a_dtype != self.b_dtype:
            return "mixed"
        if self.a_dtype == "f32":
            return "f32" if self.f32_mode == "ieee" else self.f32_mode
        return "16bit"

    @property
    def precision(self) -> str:
        """``tl.dot``'s ``input_precision``: ``f32_mode`` for f32 inputs, ``"ieee"`` otherwise (unused there)."""
        return self.f32_mode if self.a_dtype == "f32" else "ieee"

    @property
    def name(self) -> str:
        """A short file-name-safe label, e.g. ``bf16_8192x8192x8192_nn_obf16`` (``_b4`` for batch 4)."""
        layout = ("t" if self.trans_a else "n") + ("t" if self.trans_b else "n")
        ins = self.a_dtype if self.a_dtype == self.b_dtype else f"{self.a_dtype}-{self.b_dtype}"
        s = f"{ins}_{self.M}x{self.N}x{self.K}_{layout}_o{self.out_dtype}"
        if self.batch > 1:
            s += f"_b{self.batch}"
        if self.a_dtype == "f32" and self.f32_mode != "ieee":
            s += f"_{self.f32_mode}"
        return s

    def c_row_aligned(self) -> bool:
        """Whether C's row stride (``N * bytes(out_dtype)``) is a multiple of 16 bytes (TMA store possible)."""
        return (self.N * DTYPE_BYTES[self.out_dtype]) % TMA_ALIGN_BYTES == 0


def _tma_row_problem(operand: str, rows: str, cols: str, ncols: int, dtype: str) -> Optional[str]:
    """Reason an operand stored ``rows x cols`` row-major cannot be read through TMA, or None."""
    nbytes = DTYPE_BYTES[dtype]
    stride = ncols * nbytes
    if stride % TMA_ALIGN_BYTES == 0:
        return None
    multiple = TMA_ALIGN_BYTES // nbytes
    return (f"{operand} is stored {rows} x {cols}: its row stride {cols} * {nbytes} = {stride} bytes "
            f"is not a multiple of {TMA_ALIGN_BYTES} (TMA needs 16-byte aligned strides), "
            f"so {cols} = {ncols} must be a multiple of {multiple} for {dtype}")


def supports(spec: GemmSpec) -> Optional[str]:
    """Why the generated kernels do not serve ``spec``, or None when they do.

    Reasons: mixed input dtypes (``tl.dot`` multiplies equal types), and A or
    B row strides that TMA cannot address (16-byte multiples). C needs no
    alignment (a masked store is used where TMA cannot store it).
    """
    if spec.a_dtype != spec.b_dtype:
        return (f"mixed input dtypes (A {spec.a_dtype}, B {spec.b_dtype}) are not served: "
                "the kernel's tl.dot multiplies operands of one type")
    a = (_tma_row_problem("A", "K", "M", spec.M, spec.a_dtype) if spec.trans_a
         else _tma_row_problem("A", "M", "K", spec.K, spec.a_dtype))
    if a:
        return a
    b = (_tma_row_problem("B", "N", "K", spec.K, spec.b_dtype) if spec.trans_b
         else _tma_row_problem("B", "K", "N", spec.N, spec.b_dtype))
    return b


def require_supported(spec: GemmSpec) -> None:
    """Raise ``ValueError`` with :func:`supports`'s reason when ``spec`` is not served."""
    reason = supports(spec)
    if reason is not None:
        raise ValueError(f"GEMM {spec.name} not served: {reason}")
