"""The Triton GEMM kernel: persistent, TMA loads through device-side descriptors, f32 accumulation.

Self-contained on purpose (imports only ``triton``): the GPU bundle copies this
file as it is and runs it under the GPU machine's Triton (3.6), the same
version falcon-mlir compiles it with ahead of time (Triton 3.9 spills the IEEE
f32 kernel, see :mod:`falcon_mlir.kernels.aot`). It also compiles under 3.9.

What the kernel computes: ``C[b] = op(A[b]) @ op(B[b])`` (see
:mod:`falcon_mlir.kernels.spec` for the layouts). Design:

* **One kernel per shape.** Every size, stride and layout flag is a
  ``tl.constexpr``, so the only kernel parameters are the pointers ``a, b, c``
  (plus the two trailing scratch pointers Triton appends: global scratch, where
  the device-side TMA descriptors are written, and profile scratch). That is
  what IREE's launch ABI can pass (bindings as device pointers); host-side TMA
  descriptors would be 128-byte by-value parameters, which it cannot.
* **Persistent.** ``NUM_PROGRAMS`` programs (the number of SMs, 132 on an H200,
  or fewer when there are fewer tiles) walk the tiles round-robin. Tile ``t``
  of ``batch * TILES_M * TILES_N`` is batch-major; inside one batch entry tiles
  go in groups of ``GROUP_M`` tile rows (column-major within a group) so that
  programs running at the same time share A rows and B columns in L2.
* **TMA in, f32 accumulate.** A and B tiles come through
  ``tl.make_tensor_descriptor`` (2-D, or 3-D ``[batch, rows, cols]`` with a
  1-deep block when batched); TMA zero-fills out-of-bounds rows and columns,
  which makes the K tail and the M/N edges exact. A transposed operand is
  described as stored and its tile transposed (``.T``) before ``tl.dot``; the
  tensor cores read either major order from shared memory. ``tl.dot`` runs with
  ``input_precision=PRECISION``: ``"ieee"`` (FMA) for f32 unless the spec's
  ``f32_mode`` asks for ``"tf32"`` or ``"tf32x3"`` (tensor cores).
* **Epilogue.** C is written in its element type either by TMA store (needs
  C's row stride to be a multiple of 16 bytes; ``SUBTILE=2`` stores two
  ``BLOCK_M x BLOCK_N/2`` halves, halving the staging shared memory) or by a
  masked ``tl.store``.
* **Loop shape.** By default the tile loop is flattened with the K loop
  (``flatten=True``) so the software pipeline prefetches the next tile's
  operands during the epilogue. With ``WARP_SPECIALIZE`` the K loop instead
  carries ``warp_specialize=True`` and is not flattened: on sm_90 Triton's
  Hopper warp specialization only acts on such a loop with ``num_warps=4`` and
  then runs 3 warp groups (one TMA producer, two consumers), so the compiled
  kernel has 12 warps (read it from the metadata). In a flattened loop the
  flag is lost (checked with Triton 3.9 and 3.6).

Interpreter (``TRITON_INTERPRET=1``, Triton's CPU interpreter): the same source
runs there, descriptors, persistent loop and all (``tl.range``'s hints are
ignored). One difference is unavoidable: Triton's interpreter (3.6 and 3.9)
multiplies bf16 tiles as their raw 16-bit integer patterns, so ``UPCAST=True`` (set only
by interpreter callers, :func:`launch` does it) widens the tiles to f32 before
``tl.dot``. That is exact: a product of two bf16 values fits an f32 mantissa,
and the accumulation is f32 either way. The interpreter also ignores
``input_precision`` (it multiplies f32 tiles in f32 whatever the mode), and
Triton 3.6's cannot use a program id as a loop bound under NumPy 2.4 (here)
(``int()`` of a 1-element array); :func:`launch` patches that
(:func:`patch_interpreter`).
"""

import triton
import triton.language as tl

#: The kernel's symbol in the cubin (the Python function's name).
KERNEL_NAME = "falcon_gemm"
#: Triton signature types of the pointer parameters, per element type.
POINTER_TYPES = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16"}
#: Kernel parameters that are pointers, in order (Triton appends global and profile scratch).
POINTER_ARGS = ("a_ptr", "b_ptr", "c_ptr")


def cdiv(a: int, b: int) -> int:
    """Ceiling of ``a / b`` for positive ints."""
    return -(-a // b)


def num_programs(M: int, N: int, batch: int, block_m: int, block_n: int, num_sms: int) -> int:
    """Programs (CUDA blocks) of the persistent grid: ``min(num_sms, tiles)``."""
    return max(1, min(num_sms, batch * cdiv(M, block_m) * cdiv(N, block_n)))


def kernel_constexprs(*, M, N, K, batch, trans_a, trans_b, in_dtype, f32_mode, block_m, block_n,
                      block_k, group_m, warp_specialize, epilogue_subtile, tma_store, num_programs,
                      interpret=False) -> dict:
    """The kernel's ``tl.constexpr`` arguments for one problem and configuration.

    Plain values in (sizes as ints, dtypes as ``"f32"``/``"f16"``/``"bf16"``), a
    dict keyed by the kernel's parameter names out. ``interpret`` turns on the
    interpreter's bf16 workaround (``UPCAST``). ``epilogue_subtile`` only
    applies with ``tma_store``.
    """
    return dict(
        M=M, N=N, K=K, BATCH=batch, TRANS_A=bool(trans_a), TRANS_B=bool(trans_b),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        NUM_PROGRAMS=num_programs, WARP_SPECIALIZE=bool(warp_specialize),
        FLATTEN=not warp_specialize, TMA_STORE=bool(tma_store),
        SUBTILE=2 if (epilogue_subtile and tma_store) else 1,
        PRECISION=f32_mode if in_dtype == "f32" else "ieee",
        UPCAST=bool(interpret and in_dtype == "bf16"),
    )


@triton.jit
def _tile_origin(tile, TILES: tl.constexpr, TILES_M: tl.constexpr, TILES_N: tl.constexpr,
                 GROUP_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(batch index, first row, first column) of persistent tile number ``tile``."""
    bidx = tile // TILES
    t = tile % TILES
    per_group = GROUP_M * TILES_N
    first_m = (t // per_group) * GROUP_M
    group_rows = min(TILES_M - first_m, GROUP_M)
    pid_m = first_m + (t % per_group) % group_rows
    pid_n = (t % per_group) // group_rows
    return bidx, pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _load_tile(desc, bidx, r0, c0, BATCH: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr,
               TRANS: tl.constexpr):
    """A ``ROWS x COLS`` (or, with ``TRANS``, stored ``COLS x ROWS``) tile through ``desc``, as stored."""
    if BATCH == 1:
        if TRANS:
            x = desc.load([c0, r0])
        else:
            x = desc.load([r0, c0])
    else:
        if TRANS:
            x = desc.load([bidx, c0, r0]).reshape(COLS, ROWS)
        else:
            x = desc.load([bidx, r0, c0]).reshape(ROWS, COLS)
    return x


@triton.jit
def falcon_gemm(a_ptr, b_ptr, c_ptr,
                M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BATCH: tl.constexpr,
                TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr, TMA_STORE: tl.constexpr, SUBTILE: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``C = op(A) @ op(B)`` (batched), persistent; see the module docstring for the parameters. One function by
    nature: a Triton kernel is one body whose constexpr branches compile away; its stand-alone parts are the jitted
    helpers above, and cutting it further would only pass descriptors and accumulators between jitted functions."""
    TILES_M: tl.constexpr = (M + BLOCK_M - 1) // BLOCK_M
    TILES_N: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    TILES: tl.constexpr = TILES_M * TILES_N
    K_TILES: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    C_COLS: tl.constexpr = BLOCK_N // SUBTILE
    out_ty = c_ptr.dtype.element_ty

    # Descriptors as the operands are stored (row-major; transposed ones too).
    if BATCH == 1:
        if TRANS_A:
            a_desc = tl.make_tensor_descriptor(a_ptr, [K, M], [M, 1], [BLOCK_K, BLOCK_M])
        else:
            a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
        if TRANS_B:
            b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BLOCK_K, BLOCK_N])
        if TMA_STORE:
            c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BLOCK_M, C_COLS])
    else:
        if TRANS_A:
            a_desc = tl.make_tensor_descriptor(a_ptr, [BATCH, K, M], [K * M, M, 1], [1, BLOCK_K, BLOCK_M])
        else:
            a_desc = tl.make_tensor_descriptor(a_ptr, [BATCH, M, K], [M * K, K, 1], [1, BLOCK_M, BLOCK_K])
        if TRANS_B:
            b_desc = tl.make_tensor_descriptor(b_ptr, [BATCH, N, K], [N * K, K, 1], [1, BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b_ptr, [BATCH, K, N], [K * N, N, 1], [1, BLOCK_K, BLOCK_N])
        if TMA_STORE:
            c_desc = tl.make_tensor_descriptor(c_ptr, [BATCH, M, N], [M * N, N, 1], [1, BLOCK_M, C_COLS])

    pid = tl.program_id(0)
    # A second tile counter for the epilogue: keeps the flattened loop's
    # prologue and epilogue from sharing one value (Triton's persistent
    # matmul does the same).
    tile_c = pid - NUM_PROGRAMS
    for tile in tl.range(pid, BATCH * TILES, NUM_PROGRAMS, flatten=FLATTEN):
        bidx, om, on = _tile_origin(tile, TILES, TILES_M, TILES_N, GROUP_M, BLOCK_M, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in tl.range(0, K_TILES, warp_specialize=WARP_SPECIALIZE):
            ok = kk * BLOCK_K
            a = _load_tile(a_desc, bidx, om, ok, BATCH, BLOCK_M, BLOCK_K, TRANS_A)
            b = _load_tile(b_desc, bidx, ok, on, BATCH, BLOCK_K, BLOCK_N, TRANS_B)
            if TRANS_A:
                a = a.T
            if TRANS_B:
                b = b.T
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)

        tile_c += NUM_PROGRAMS
        bc, cm, cn = _tile_origin(tile_c, TILES, TILES_M, TILES_N, GROUP_M, BLOCK_M, BLOCK_N)
        if TMA_STORE:
            if SUBTILE == 2:
                halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, C_COLS)), (0, 2, 1))
                c0, c1 = tl.split(halves)
                if BATCH == 1:
                    c_desc.store([cm, cn], c0.to(out_ty))
                    c_desc.store([cm, cn + C_COLS], c1.to(out_ty))
                else:
                    c_desc.store([bc, cm, cn], c0.to(out_ty).reshape(1, BLOCK_M, C_COLS))
                    c_desc.store([bc, cm, cn + C_COLS], c1.to(out_ty).reshape(1, BLOCK_M, C_COLS))
            else:
                if BATCH == 1:
                    c_desc.store([cm, cn], acc.to(out_ty))
                else:
                    c_desc.store([bc, cm, cn], acc.to(out_ty).reshape(1, BLOCK_M, BLOCK_N))
        else:
            rows = cm + tl.arange(0, BLOCK_M)
            cols = cn + tl.arange(0, BLOCK_N)
            base = c_ptr + bc.to(tl.int64) * (M * N)
            ptrs = base + rows.to(tl.int64)[:, None] * N + cols[None, :]
            tl.store(ptrs, acc.to(out_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


_ALLOCATOR_SET = False
_INTERPRETER_PATCHED = False


def patch_interpreter() -> None:
    """Let Triton 3.6's interpreter take a scalar tensor (a program id) as a ``range`` bound.

    Its ``tensor.__index__`` is ``int(handle.data)`` on a 1-element array,
    which NumPy 2.4 refuses (deprecated since 1.25); Triton 3.9 squeezes the array first, and so
    does this patch (applied to the interpreter's language patches, so it
    lasts only while a kernel is interpreted). A no-op where not needed.
    """
    global _INTERPRETER_PATCHED
    if _INTERPRETER_PATCHED:
        return
    _INTERPRETER_PATCHED = True
    try:
        from triton.runtime import interpreter as ti
    except ImportError:  # pragma: no cover - depends on the Triton version
        return
    original = getattr(ti, "_patch_lang_tensor", None)
    if original is None:
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
    ti._patch_lang_tensor = patched


def _set_torch_allocator() -> None:
    """Give Triton an allocator for the global scratch of device-side descriptors (JIT launches).

    Triton asks it for ``programs x global_scratch_size`` bytes per launch;
    torch's caching allocator makes that cheap. Harmless under the
    interpreter, which allocates no scratch.
    """
    global _ALLOCATOR_SET
    if _ALLOCATOR_SET:
        return
    import torch

    def alloc(size, alignment, stream):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(alloc)
    _ALLOCATOR_SET = True


def launch(a, b, c, *, trans_a=False, trans_b=False, f32_mode="ieee", block_m=128, block_n=256,
           block_k=64, group_m=8, num_stages=3, num_warps=8, warp_specialize=False,
           epilogue_subtile=False, tma_store=True, num_sms=132, interpret=None):
    """Run the kernel on torch tensors (JIT on a GPU, or Triton's interpreter).

    Args:
        a: A as stored, ``[batch,] M x K`` (``[batch,] K x M`` with ``trans_a``), contiguous.
        b: B as stored, ``[batch,] K x N`` (``[batch,] N x K`` with ``trans_b``), contiguous.
        c: C, ``[batch,] M x N``, contiguous, written in its dtype.
        f32_mode: ``"ieee"``, ``"tf32"`` or ``"tf32x3"`` for f32 inputs (the
            interpreter multiplies in f32 whatever the mode).
        num_sms: programs of the persistent grid at most (132 on an H200).
        interpret: True under ``TRITON_INTERPRET=1`` (default: read from the
            environment); sets ``UPCAST`` for bf16.
        The rest: the kernel configuration (``KernelConfig``'s fields).

    Returns:
        ``c``.

    Raises:
        ValueError: tensors of the wrong rank, shape or dtype combination.
    """
    import os

    if interpret is None:
        interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    names = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}
    in_dtype = names.get(str(a.dtype))
    if in_dtype is None or str(b.dtype) != str(a.dtype) or str(c.dtype) not in names:
        raise ValueError(f"unsupported dtypes a {a.dtype}, b {b.dtype}, c {c.dtype}")
    if f32_mode not in ("ieee", "tf32", "tf32x3"):
        raise ValueError(f"f32_mode must be ieee, tf32 or tf32x3, got {f32_mode!r}")
    if not (a.dim() == b.dim() == c.dim() and a.dim() in (2, 3)):
        raise ValueError(f"a, b, c must all be 2-D or all 3-D, got {a.dim()}, {b.dim()}, {c.dim()}")
    batch = a.shape[0] if a.dim() == 3 else 1
    M, N = c.shape[-2], c.shape[-1]
    K = a.shape[-2] if trans_a else a.shape[-1]
    want_a = (K, M) if trans_a else (M, K)
    want_b = (N, K) if trans_b else (K, N)
    if tuple(a.shape[-2:]) != want_a or tuple(b.shape[-2:]) != want_b or (
            a.dim() == 3 and not (b.shape[0] == c.shape[0] == batch)):
        raise ValueError(f"shapes do not match: a {tuple(a.shape)}, b {tuple(b.shape)}, c {tuple(c.shape)}")
    if interpret:
        patch_interpreter()
    else:
        _set_torch_allocator()
    programs = num_programs(M, N, batch, block_m, block_n, num_sms)
    cx = kernel_constexprs(M=M, N=N, K=K, batch=batch, trans_a=trans_a, trans_b=trans_b,
                           in_dtype=in_dtype, f32_mode=f32_mode, block_m=block_m, block_n=block_n,
                           block_k=block_k, group_m=group_m, warp_specialize=warp_specialize,
                           epilogue_subtile=epilogue_subtile, tma_store=tma_store,
                           num_programs=programs, interpret=interpret)
    falcon_gemm[(programs,)](a, b, c, num_warps=num_warps, num_stages=num_stages, **cx)
    return c
