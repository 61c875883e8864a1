"""MLIR text that runs a compiled kernel inside an IREE 3.13 module (an external dispatch).

The pieces (forms checked against IREE 3.13 with ``iree-compile``):

* :func:`executable_source`: a ``hal.executable.source`` whose
  ``#hal.executable.objects`` map the device's executable target attribute to
  the cubin, embedded inline (``data = dense<"0x..."> : vector<Nxi8>``, so the
  .vmfb alone runs), and one ``hal.executable.export`` with the launch facts:
  bindings ``a, b`` (read-only), ``c``, global scratch, profile scratch (the
  kernel's pointer parameters, in order: IREE's CUDA HAL passes bindings as
  device pointers, then push constants, of which there are none); a ``count``
  region returning the persistent grid; ``<workgroup_size = [...],
  workgroup_local_memory = N>`` after it (``attributes {...}`` there is
  rejected by 3.13).
* :func:`dispatch_text`: the ``flow.dispatch`` (operands bind first, then
  results, in order), with the scratch buffers as extra results sized from
  the metadata (per-program size times programs).
* :func:`gemm_module`: a whole module ``@main(A, B) -> C`` through the kernel,
  optionally with ``@reference``, the same product as an ordinary
  ``linalg.generic`` that IREE compiles itself (its own sm_80 dispatch next to
  ours, which also proves the object key).

The object key must be the device's exact executable target attribute (with
its ``iree_codegen.target_info``) when the module also holds IREE's own CUDA
dispatches; :func:`cuda_target_attribute` reads it from IREE for the given
flags. Compile with :data:`KERNEL_MODULE_FLAGS`: IREE's default resource offset
alignment is 64 bytes, Triton declares 128 for its global scratch (TMA
descriptors), so those flags raise it to 128.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional, Sequence

from .aot import CompiledKernel, compile_kernel
from .configs import KernelConfig
from .spec import GemmSpec

#: The CUDA target falcon compiles for with IREE 3.13 (it has no sm_90 entry;
#: our kernels bring their own sm_90a cubin, IREE's own dispatches are sm_80 PTX).
DEFAULT_CUDA_FLAGS = ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80")
#: Flags for modules holding our kernels: the above plus 128-byte resource offsets.
KERNEL_MODULE_FLAGS = DEFAULT_CUDA_FLAGS + ("--iree-stream-resource-min-offset-alignment=128",)
#: Scratch results are at least this many bytes and a multiple of it.
SCRATCH_GRANULE = 128

_PROBE = """func.func @probe(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %e = tensor.empty() : tensor<16xf32>
  %0 = linalg.elementwise <add> ins(%a, %b : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  return %0 : tensor<16xf32>
}
"""


def _balanced_attribute(text: str, start: int) -> str:
    """The attribute starting at ``text[start]`` (``#name<...>``), up to its matching ``>``."""
    depth, i, in_str = 0, text.index("<", start), False
    while i < len(text):
        ch = text[i]
        if in_str:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "<":
            depth += 1
        elif ch == ">" and text[i - 1] != "-":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1
    raise ValueError("unbalanced attribute in IREE's output")


@lru_cache(maxsize=16)
def _target_attribute(flags: tuple, backend: str) -> str:
    from iree.compiler import compile_str

    out = compile_str(_PROBE, input_type="auto", extra_args=[*flags, "--compile-to=executable-sources"])
    text = out.decode() if isinstance(out, bytes) else out
    m = re.search(r'#hal\.executable\.target<"' + re.escape(backend) + '"', text)
    if m is None:
        raise ValueError(f"no {backend} executable target in IREE's output for flags {' '.join(flags)}")
    return _balanced_attribute(text, m.start())


def executable_target_attribute(flags: Sequence[str], backend: str) -> str:
    """The exact ``#hal.executable.target<"{backend}", ...>`` IREE uses for a device with ``flags``.

    Found by compiling a tiny module to ``executable-sources`` and reading the
    attribute back (cached per flag tuple and backend). ``backend`` is IREE's
    name: ``"cuda"``, ``"llvm-cpu"``.

    Raises:
        ValueError: the flags give no executable target of that backend.
        iree.compiler.CompilerToolError: IREE rejects the flags.
    """
    return _target_attribute(tuple(flags), backend)


def cuda_target_attribute(flags: Sequence[str] = DEFAULT_CUDA_FLAGS) -> str:
    """The exact ``#hal.executable.target<"cuda", ...>`` IREE uses for a CUDA device with ``flags``.

    Found by compiling a tiny module to ``executable-sources`` and reading the
    attribute back (cached per flag tuple). For the default flags it starts
    ``#hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info =
    #iree_gpu.target<arch = "sm_80", ...``.

    Raises:
        ValueError: the flags give no CUDA executable target.
        iree.compiler.CompilerToolError: IREE rejects the flags.
    """
    return executable_target_attribute(flags, "cuda")


def tensor_type(shape: Sequence[int], dtype: str) -> str:
    """``tensor<AxBx...xDTYPE>`` for a static shape."""
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{dtype}>"


def scratch_bytes(kernel: CompiledKernel) -> tuple:
    """(global, profile) scratch result sizes in bytes: the grid's need, rounded up to 128, at least 128."""
    def up(n):
        return max(SCRATCH_GRANULE, -(-n // SCRATCH_GRANULE) * SCRATCH_GRANULE)
    return up(kernel.global_scratch_bytes), up(kernel.profile_scratch_bytes)


def executable_name(kernel: CompiledKernel) -> str:
    """A symbol for the kernel's executable, unique per kernel (spec name plus key prefix)."""
    return "falcon_gemm_" + re.sub(r"[^A-Za-z0-9_]", "_", kernel.spec.name) + "_" + kernel.key[:8]


def external_executable(name: str, entry: str, cubin: bytes, target_attr: str, inputs: int, outputs: int,
                        num_programs: int, threads: int, shared: int, comment: str = "") -> str:
    """``hal.executable.source`` text for one precompiled kernel taking ``inputs`` read-only pointers,
    then ``outputs`` pointers, then Triton's global and profile scratch (all bindings, in order), on
    a 1-D grid of ``num_programs`` blocks of ``threads`` threads with ``shared`` bytes of dynamic
    shared memory; the cubin embedded inline for ``target_attr``.

    The object also names a ``path`` (``NAME.cubin``, never read: the inline
    ``data`` wins): IREE 3.13 prints an object without a path as ``{, data =
    ...}``, which does not parse back, so falcon-opt's output would not."""
    data = cubin.hex().upper()
    bindings = ["#hal.pipeline.binding<storage_buffer, ReadOnly>"] * inputs + \
        ["#hal.pipeline.binding<storage_buffer>"] * (outputs + 2)
    sep = ",\n        "
    note = f"  // {comment}\n" if comment else ""
    return f"""hal.executable.source private @{name} <objects = #hal.executable.objects<{{
    {target_attr} = [
      #hal.executable.object<{{path = "{name}.cubin", data = dense<"0x{data}"> : vector<{len(cubin)}xi8>}}>]}}>> {{
{note}  hal.executable.export public @{entry} ordinal(0)
      layout(#hal.pipeline.layout<bindings = [
        {sep.join(bindings)}]>)
      count(%device: !hal.device) -> (index, index, index) {{
    %x = arith.constant {num_programs} : index
    %c1 = arith.constant 1 : index
    hal.return %x, %c1, %c1 : index, index, index
  }} <workgroup_size = [{threads} : index, 1 : index, 1 : index], workgroup_local_memory = {shared}>
}}
"""


def executable_source(kernel: CompiledKernel, target_attr: str, name: Optional[str] = None) -> str:
    """``hal.executable.source`` text holding ``kernel``'s cubin for ``target_attr``.

    Args:
        kernel: the compiled kernel.
        target_attr: the device's executable target attribute (:func:`cuda_target_attribute`).
        name: the executable's symbol (default :func:`executable_name`).
    """
    return external_executable(
        name or executable_name(kernel), kernel.name, kernel.cubin, target_attr, 2, 1, kernel.num_programs,
        kernel.threads, kernel.shared,
        f"{kernel.spec.name} with {kernel.config.label}: {kernel.arch} cubin from {kernel.compiler}")


def external_dispatch(exe: str, entry: str, operands: Sequence[tuple], results: Sequence[str], scratch: tuple,
                      result: str = "%r") -> str:
    """A ``flow.dispatch`` of ``@exe::@entry``: ``operands`` as ``(ssa value, tensor type)``,
    ``results`` the result tensor types; the two scratch buffers (bytes) are extra results, so the
    first result is ``{result}#0``."""
    names = ", ".join(v for v, _ in operands)
    types = ", ".join(t for _, t in operands)
    outs = list(results) + [f"tensor<{scratch[0]}xi8>", f"tensor<{scratch[1]}xi8>"]
    return f"{result}:{len(outs)} = flow.dispatch @{exe}::@{entry}({names}) : ({types}) -> ({', '.join(outs)})"


def dispatch_text(kernel: CompiledKernel, exe: Optional[str] = None, a: str = "%a", b: str = "%b",
                  result: str = "%r", types: Optional[Sequence[str]] = None) -> str:
    """The ``flow.dispatch`` line computing C from ``a`` and ``b``; C is ``{result}#0``.

    Results: C, the global scratch and the profile scratch (``tensor<Nxi8>``).
    ``types``: the tensor types of A, B and C as the caller holds them (e.g.
    with a unit batch dimension the spec drops; the kernel sees only the
    buffers, so any shape of the same elements works); default the spec's
    (:attr:`GemmSpec.a_shape`, ...).
    """
    spec = kernel.spec
    a_t, b_t, c_t = types or (tensor_type(spec.a_shape, spec.a_dtype), tensor_type(spec.b_shape, spec.b_dtype),
                              tensor_type(spec.c_shape, spec.out_dtype))
    return external_dispatch(exe or executable_name(kernel), kernel.name, [(a, a_t), (b, b_t)], [c_t],
                             scratch_bytes(kernel), result)


def reference_func(spec: GemmSpec, name: str = "reference") -> str:
    """``func.func @{name}(A, B) -> C``: the same GEMM as one ``linalg.generic`` (f32 accumulation).

    IREE compiles it with its own code generation; inputs are widened with
    ``arith.extf`` inside the body, the f32 result rounded with ``arith.truncf``
    when C is narrower.
    """
    batched = spec.batch > 1
    dims = ["d0", "d1", "d2", "d3"] if batched else ["d0", "d1", "d2"]
    b0 = dims[:1] if batched else []
    m, n, k = dims[-3:]
    a_idx = b0 + ([k, m] if spec.trans_a else [m, k])
    b_idx = b0 + ([n, k] if spec.trans_b else [k, n])
    c_idx = b0 + [m, n]

    def amap(idx):
        return f"affine_map<({', '.join(dims)}) -> ({', '.join(idx)})>"
    iters = ", ".join(['"parallel"'] * (len(dims) - 1) + ['"reduction"'])
    a_t, b_t = tensor_type(spec.a_shape, spec.a_dtype), tensor_type(spec.b_shape, spec.b_dtype)
    acc_t, c_t = tensor_type(spec.c_shape, "f32"), tensor_type(spec.c_shape, spec.out_dtype)
    widen = []
    x, y = "%x", "%y"
    if spec.a_dtype != "f32":
        widen.append(f"      %xw = arith.extf %x : {spec.a_dtype} to f32")
        x = "%xw"
    if spec.b_dtype != "f32":
        widen.append(f"      %yw = arith.extf %y : {spec.b_dtype} to f32")
        y = "%yw"
    body = "\n".join(widen + [f"      %p = arith.mulf {x}, {y} : f32",
                              "      %s = arith.addf %acc, %p : f32",
                              "      linalg.yield %s : f32"])
    tail = "  return %sum : " + c_t if spec.out_dtype == "f32" else (
        f"  %out = arith.truncf %sum : {acc_t} to {c_t}\n  return %out : {c_t}")
    return f"""func.func @{name}(%a: {a_t}, %b: {b_t}) -> {c_t} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {acc_t}
  %init = linalg.fill ins(%zero : f32) outs(%empty : {acc_t}) -> {acc_t}
  %sum = linalg.generic {{indexing_maps = [{amap(a_idx)}, {amap(b_idx)}, {amap(c_idx)}],
                         iterator_types = [{iters}]}}
      ins(%a, %b : {a_t}, {b_t}) outs(%init : {acc_t}) {{
    ^bb0(%x: {spec.a_dtype}, %y: {spec.b_dtype}, %acc: f32):
{body}
  }} -> {acc_t}
{tail}
}}
"""


def gemm_module(spec: GemmSpec, config: Optional[KernelConfig] = None, *,
                kernel: Optional[CompiledKernel] = None, target_attr: Optional[str] = None,
                flags: Sequence[str] = DEFAULT_CUDA_FLAGS, reference: bool = False,
                func: str = "main") -> str:
    """A complete module: ``func.func @{func}(%a: A, %b: B) -> C`` through the generated kernel.

    Args:
        spec: the GEMM (A, B as stored, see :class:`GemmSpec`).
        config: kernel configuration (default: the table's choice).
        kernel: an already compiled kernel for ``spec`` (skips :func:`compile_kernel`).
        target_attr: the object key (default: :func:`cuda_target_attribute` of ``flags``).
        flags: the IREE target flags the module will be compiled with.
        reference: also emit ``@reference``, the same product compiled by IREE
            itself (:func:`reference_func`).
        func: name of the kernel-backed function.

    Returns:
        MLIR text that ``iree-compile`` with ``flags`` (plus
        ``--iree-stream-resource-min-offset-alignment=128``) turns into a .vmfb.

    Raises:
        ValueError: ``kernel`` belongs to another spec or configuration, or
            anything :func:`~falcon_mlir.kernels.aot.compile_kernel` raises.
    """
    if kernel is None:
        kernel = compile_kernel(spec, config)
    elif kernel.spec != spec:
        raise ValueError(f"kernel was compiled for {kernel.spec.name}, not {spec.name}")
    elif config is not None and kernel.config != config:
        raise ValueError(f"kernel was compiled with {kernel.config.label}, not {config.label}")
    target_attr = target_attr or cuda_target_attribute(flags)
    exe = executable_name(kernel)
    a_t, b_t = tensor_type(spec.a_shape, spec.a_dtype), tensor_type(spec.b_shape, spec.b_dtype)
    c_t = tensor_type(spec.c_shape, spec.out_dtype)
    parts = [executable_source(kernel, target_attr, exe),
             f"func.func @{func}(%a: {a_t}, %b: {b_t}) -> {c_t} {{\n"
             f"  {dispatch_text(kernel, exe)}\n"
             f"  return %r#0 : {c_t}\n}}\n"]
    if reference:
        parts.append(reference_func(spec))
    return module_text(parts)


def module_text(parts: Sequence[str]) -> str:
    """``module { ... }`` around top-level ops given as text (executables, functions), indented two spaces."""
    body = "\n".join(parts)
    return "module {\n" + "\n".join("  " + line if line else line for line in body.splitlines()) + "\n}\n"


def compile_module(text: str, flags: Sequence[str] = KERNEL_MODULE_FLAGS) -> bytes:
    """Compile module text to a .vmfb (bytes) with IREE's in-process compiler.

    Raises:
        iree.compiler.CompilerToolError: IREE rejects the module.
    """
    from iree.compiler import compile_str

    return compile_str(text, input_type="auto", extra_args=list(flags))
