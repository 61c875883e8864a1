"""MLIR text that runs falcon's CPU GEMM (:mod:`.cpu_gemm`) inside an IREE 3.13 llvm-cpu module.

The pieces (forms checked with ``iree-compile`` 3.13):

* :func:`executable_text`: a ``stream.executable`` whose
  ``hal.executable.objects`` map a generic form of the device's executable
  target (:func:`objects_target`: backend, format, CPU features and target
  triple only; IREE takes the objects of a key whose configuration is a subset
  of the variant's)
  to the kernel's object file by its absolute path
  (IREE links it into the executable's embedded ELF at compile time, so the
  .vmfb is self-contained; the text needs the file). Inline ``data =
  dense<...>`` objects fail on llvm-cpu in 3.13: with a path too, the
  link misses the symbols; without one, iree-compile crashes;
  six exports, ``pack_b`` and ``gemm`` (the classical GEMM, row-major A and
  B), ``general_pack_b`` and ``general_gemm`` (the same with A stored
  ``K x M`` or B stored ``N x K``, and a leading batch) and ``lcma_pack_b``
  and ``lcma_gemm`` (one product of an LCMA plan, :mod:`.cpu_plan`), each a
  small function that takes the bindings as ``memref<?xf32>``
  (``stream.binding.subspan``) and calls the C entry point declared
  ``hal.import.static``, with the workgroup ids
  (``hal.interface.workgroup.id``; the batched ones also the count of batch
  groups, ``hal.interface.workgroup.count[2]``) as the last arguments.
* :func:`dispatch_lines`: the two ``flow.dispatch`` ops: B to packed B, then
  ``(A, packed B) -> (C, scratch)``; the scratch (one packed-A slot per
  workgroup) is a result the host never reads.
* :func:`gemm_module`: a whole module ``@main(A, B) -> C`` through the
  kernel, optionally with ``@reference``, the same product as one
  ``linalg.generic`` that IREE compiles itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from ..targets import TARGETS
from . import cpu_gemm, cpu_object, cpu_source
from .cpu_gemm import CpuGemmConfig
from . import embed
from .embed import executable_target_attribute, module_text, reference_func, tensor_type
from .spec import GemmSpec

#: IREE flags for this machine's CPU (falcon's ``host`` target).
DEFAULT_CPU_FLAGS = tuple(TARGETS["host"].flags)


def cpu_target_attribute(flags: Sequence[str] = DEFAULT_CPU_FLAGS) -> str:
    """The exact ``#hal.executable.target<"llvm-cpu", ...>`` IREE uses with ``flags``
    (for the default flags: ``embedded-elf-x86_64`` with ``cpu = "znver5"`` and its features on a Zen 5).

    Raises:
        ValueError: the flags give no llvm-cpu target.
        iree.compiler.CompilerToolError: IREE rejects the flags.
    """
    return executable_target_attribute(flags, "llvm-cpu")


def objects_target(target_attr: str) -> str:
    """The key of the kernel's ``hal.executable.objects`` for the llvm-cpu target ``target_attr``:
    the same backend and format with ``cpu_features`` (where ``target_attr`` has them) and
    ``target_triple`` as the only configuration, e.g. ``#hal.executable.target<"llvm-cpu",
    "embedded-elf-x86_64", {cpu_features = "+avx,...,+avx512f,...", target_triple = "x86_64-..."}>``.

    IREE 3.13 links an object into a variant only when the key's configuration is a subset of the
    variant's, values equal. Why not ``target_attr`` itself: a module compiled in two halves
    (``--compile-to`` / ``--compile-from``, as the training job does) whose second half sets a flag
    that enters the target (``--iree-llvmcpu-stack-allocation-limit`` gives another
    ``max_stack_allocation_size``) dropped the objects keyed by the exact target: "undefined symbol:
    falcon_cpu_pack_b_..." at link time. Why the CPU features all the same: the object is AVX-512
    (or AVX2) code, and the features the kernel needs are checked on the target of the half that chooses the
    kernel (``passes/falcon_kernels/cpu.py``); keyed by the triple alone, a second half (or an
    iree-compile of falcon-opt's output) for another CPU, ``--iree-llvmcpu-target-cpu=haswell`` or no
    CPU flag at all (LLVM's generic x86-64), linked the AVX-512 object into a module for a CPU
    without AVX-512, silently (illegal instructions when run there). With the features in the key
    such a compile fails to link instead (undefined ``falcon_cpu_...`` symbols): the front half must
    be run again for that CPU. Its cost: another AVX-512 CPU in the second half than in the first
    fails to link too.

    Raises:
        ValueError: ``target_attr`` is not an ``#hal.executable.target<"llvm-cpu", ...>`` with a
            ``target_triple``.
    """
    m = re.match(r'\s*#hal\.executable\.target<"llvm-cpu",\s*"([^"]+)"', target_attr)
    t = re.search(r'target_triple\s*=\s*"([^"]+)"', target_attr)
    if not m or not t:
        raise ValueError(f"not an llvm-cpu executable target with a target_triple: {target_attr[:120]!r}")
    f = re.search(r'cpu_features\s*=\s*"([^"]*)"', target_attr)
    features = f'cpu_features = "{f.group(1)}", ' if f else ""
    return f'#hal.executable.target<"llvm-cpu", "{m.group(1)}", {{{features}target_triple = "{t.group(1)}"}}>'


def _memref_args(names: Sequence[str]) -> str:
    return ", ".join(f"%{n}: !stream.binding" for n in names)


def _export(name: str, dims: int) -> str:
    """A ``stream.executable.export`` whose workgroup grid is its first ``dims`` (1 to 3) workload values."""
    args = ", ".join(f"%{v}: index" for v in "xyz"[:dims])
    grid = ", ".join(["%x", "%y", "%z"][:dims] + ["%one"] * (3 - dims))
    return (f"  stream.executable.export public @{name} workgroups({args}) -> (index, index, index) {{\n"
            f"    %one = arith.constant 1 : index\n"
            f"    stream.return {grid} : index, index, index\n  }}\n")


def _subspan(var: str, binding: str, size: str) -> str:
    """``%var``: binding ``%binding`` as a ``memref<?xf32>`` of ``%size`` elements."""
    return f"        %{var} = stream.binding.subspan %{binding}[%c0] : !stream.binding -> memref<?xf32>{{%{size}}}"


def executable_text(name: str, obj: Path, target_attr: str, config: CpuGemmConfig = CpuGemmConfig()) -> str:
    """``stream.executable`` text named ``name`` with exports ``@pack_b`` and ``@gemm`` (the classical
    GEMM), ``@general_pack_b`` and ``@general_gemm`` (transposed operands, batches) and ``@lcma_pack_b``
    and ``@lcma_gemm`` (one product of an LCMA plan, :mod:`.cpu_plan`) running the kernel object file
    ``obj`` (:func:`cpu_source.compile_object`) for ``target_attr``.

    ``@pack_b(B, M, N, K) -> Bp`` on workload ``[pack workgroups]``;
    ``@gemm(A, Bp, M, N, K) -> (C, S)`` on workload ``[workgroups along M, along N]``
    (:func:`cpu_gemm.grid`); ``@fgemm(A, B, M, N, K) -> (C, S)`` on ``[workgroups along N]``: both in
    one, B packed inside a panel at a time (:func:`cpu_gemm.fuse_b_inside`);
    ``@general_pack_b(B, N, K, trans_b) -> Bp`` on ``[pack workgroups, batch]`` and
    ``@general_gemm(A, Bp, M, N, K, trans_a, batch) -> (C, S)`` on ``[along M, along N, batch groups]``
    (:func:`cpu_gemm.batch_groups`), the same with A stored ``K x M`` or B stored ``N x K`` where the
    flag is 1, and a leading batch dimension (:func:`dispatch_lines`);
    ``@lcma_pack_b(B, K, N, ldb, trans_b, batch stride of B, nb, tb0.., size of B) -> Bp`` and
    ``@lcma_gemm(A, Bp, C, M, N, K, lda, ldc, trans_a, batch, batch strides of A and C, na, ta0.., nd,
    td0.., first, size of A, size of C) -> (C, S)`` (C read and written in place), the same workloads
    for a product's blocks of M x N x K; ``@lcma_fgemm(A, B, C, M, N, K, lda, ldb, ldc, na, ta0.., nb,
    tb0.., nd, td0.., first, sizes of A, B and C) -> (C, S)`` on ``[workgroups along N]``: both LCMA
    entries in one, B summed and packed inside a panel at a time (the plain layout, no batch,
    :func:`cpu_gemm.plan_b_inside`).

    Raises:
        ValueError: ``obj``'s absolute path has a character IREE's link step cannot take
            (:func:`cpu_object.linkable_path`: a space, a quote ...).
    """
    path = str(Path(obj).resolve())
    if not cpu_object.linkable_path(path):
        raise ValueError(f"falcon's CPU kernel object {path!r}: IREE hands the path to its linker through a "
                         "shell, unquoted; use a path of letters, digits and _.+-@%,:=/ only")
    c = config
    pack_b, gemm = cpu_gemm.entry_names(c)
    fgemm = cpu_gemm.fused_entry_name(c)
    mref = "memref<?xf32>"
    sizes = f"""        %c1 = arith.constant 1 : index
        %nr = arith.constant {c.nr} : index
        %mc = arith.constant {c.mc} : index
        %nc = arith.constant {c.nc} : index
        %slot = arith.constant {c.mc * (c.kc + 16)} : index
        %s_a = arith.muli %M, %K : index
        %s_b = arith.muli %K, %N : index
        %s_c = arith.muli %M, %N : index
        %np = arith.ceildivui %N, %nr : index
        %s_p0 = arith.muli %np, %K : index
        %s_bp = arith.muli %s_p0, %nr : index
        %gn = arith.ceildivui %N, %nc : index
        %gm = arith.ceildivui %M, %mc : index
        %s_s0 = arith.muli %gn, %gm : index
        %s_s = arith.muli %s_s0, %slot : index"""

    sub = _subspan
    idx = "%M: index, %N: index, %K: index"
    return f"""stream.executable private @{name} attributes {{
  hal.executable.objects = #hal.executable.objects<{{{objects_target(target_attr)} = [
    #hal.executable.object<{{path = "{path}"}}>]}}>
}} {{
  // falcon's f32 GEMM for x86-64 AVX-512, {c.label}
{"".join(_export(e, d) for e, d in (("pack_b", 1), ("gemm", 2), ("fgemm", 1), ("general_pack_b", 2),
                                      ("general_gemm", 3), ("lcma_pack_b", 2), ("lcma_gemm", 3),
                                      ("lcma_fgemm", 1)))}  builtin.module {{
    func.func private @{pack_b}({mref}, {mref}, index, index, index, index) attributes {{hal.import.static}}
    func.func private @{gemm}({mref}, {mref}, {mref}, {mref}, index, index, index, index, index) attributes {{hal.import.static}}
    func.func @pack_b({_memref_args(["b", "bp"])}, {idx}) {{
        %c0 = arith.constant 0 : index
{sizes}
{sub("mb", "b", "s_b")}
{sub("mbp", "bp", "s_bp")}
        %wg = hal.interface.workgroup.id[0] : index
        func.call @{pack_b}(%mb, %mbp, %M, %N, %K, %wg) : ({mref}, {mref}, index, index, index, index) -> ()
        return
    }}
    func.func @gemm({_memref_args(["a", "bp", "c", "s"])}, {idx}) {{
        %c0 = arith.constant 0 : index
{sizes}
{sub("ma", "a", "s_a")}
{sub("mbp", "bp", "s_bp")}
{sub("mc_", "c", "s_c")}
{sub("ms", "s", "s_s")}
        %wx = hal.interface.workgroup.id[0] : index
        %wy = hal.interface.workgroup.id[1] : index
        func.call @{gemm}(%ma, %mbp, %mc_, %ms, %M, %N, %K, %wx, %wy) : ({mref}, {mref}, {mref}, {mref}, index, index, index, index, index) -> ()
        return
    }}
    func.func private @{fgemm}({mref}, {mref}, {mref}, {mref}, index, index, index, index) attributes {{hal.import.static}}
    func.func @fgemm({_memref_args(["a", "b", "c", "s"])}, {idx}) {{
        %c0 = arith.constant 0 : index
{sizes}
        %fslot = arith.constant {cpu_gemm.fused_slot_floats(c)} : index
        %s_f = arith.muli %gn, %fslot : index
{sub("ma", "a", "s_a")}
{sub("mb", "b", "s_b")}
{sub("mc_", "c", "s_c")}
{sub("ms", "s", "s_f")}
        %wx = hal.interface.workgroup.id[0] : index
        func.call @{fgemm}(%ma, %mb, %mc_, %ms, %M, %N, %K, %wx) : ({mref}, {mref}, {mref}, {mref}, index, index, index, index) -> ()
        return
    }}
{_general_funcs(c, mref)}
{_lcma_funcs(c, mref)}
  }}
}}
"""


def _general_funcs(c: CpuGemmConfig, mref: str) -> str:
    """The two general classical export functions of :func:`executable_text`: the layout flags and the batch
    passed on; the pack's batch is its workgroup count along y, the GEMM's batch groups its count along z
    (:func:`cpu_gemm.batch_groups`), which size the bindings."""
    pack_b, gemm = cpu_gemm.general_entry_names(c)
    sub = _subspan
    ix = lambda n: ", ".join(["index"] * n)  # noqa: E731
    return f"""    func.func private @{pack_b}({mref}, {mref}, {ix(5)}) attributes {{hal.import.static}}
    func.func private @{gemm}({mref}, {mref}, {mref}, {mref}, {ix(9)}) attributes {{hal.import.static}}
    func.func @general_pack_b({_memref_args(["b", "bp"])}, %N: index, %K: index, %tb: index) {{
        %c0 = arith.constant 0 : index
        %batch = hal.interface.workgroup.count[1] : index
{_sizes(c, "b", "bp")}
{sub("mb", "b", "s_b")}
{sub("mbp", "bp", "s_bp")}
        %wg = hal.interface.workgroup.id[0] : index
        %wb = hal.interface.workgroup.id[1] : index
        func.call @{pack_b}(%mb, %mbp, %N, %K, %tb, %wg, %wb) : ({mref}, {mref}, {ix(5)}) -> ()
        return
    }}
    func.func @general_gemm({_memref_args(["a", "bp", "c", "s"])}, %M: index, %N: index, %K: index, %ta: index,
                            %batch: index) {{
        %c0 = arith.constant 0 : index
        %gz = hal.interface.workgroup.count[2] : index
{_sizes(c, "a", "bp", "c", "s")}
{sub("ma", "a", "s_a")}
{sub("mbp", "bp", "s_bp")}
{sub("mc_", "c", "s_c")}
{sub("ms", "s", "s_s")}
        %wx = hal.interface.workgroup.id[0] : index
        %wy = hal.interface.workgroup.id[1] : index
        %wz = hal.interface.workgroup.id[2] : index
        func.call @{gemm}(%ma, %mbp, %mc_, %ms, %M, %N, %K, %ta, %batch, %wx, %wy, %wz, %gz) : ({mref}, {mref}, {mref}, {mref}, {ix(9)}) -> ()
        return
    }}"""


def _sizes(c: CpuGemmConfig, *which: str, slot: int = 0) -> str:
    """Lines defining the elements of the named buffers of a batched call from ``%M``, ``%N``, ``%K``,
    ``%batch`` (and ``%gz``, the batch groups, for ``s``): ``%s_a`` (batch M K), ``%s_b`` (batch K N),
    ``%s_c`` (batch M N), ``%s_bp`` (batch packed Bs), ``%s_s`` (gz gm gn slots of ``slot`` floats,
    default one packed-A slot)."""
    out = []
    if "a" in which:
        out += ["%s_a0 = arith.muli %M, %K : index", "%s_a = arith.muli %s_a0, %batch : index"]
    if "b" in which:
        out += ["%s_b0 = arith.muli %K, %N : index", "%s_b = arith.muli %s_b0, %batch : index"]
    if "c" in which:
        out += ["%s_c0 = arith.muli %M, %N : index", "%s_c = arith.muli %s_c0, %batch : index"]
    if "bp" in which:
        out += [f"%nr = arith.constant {c.nr} : index", "%np = arith.ceildivui %N, %nr : index",
                "%s_p0 = arith.muli %np, %K : index", "%s_p1 = arith.muli %s_p0, %nr : index",
                "%s_bp = arith.muli %s_p1, %batch : index"]
    if "s" in which:
        out += [f"%mc = arith.constant {c.mc} : index", f"%nc = arith.constant {c.nc} : index",
                f"%slot = arith.constant {slot or c.mc * (c.kc + 16)} : index",
                "%gn = arith.ceildivui %N, %nc : index", "%gm = arith.ceildivui %M, %mc : index",
                "%s_s0 = arith.muli %gn, %gm : index", "%s_s1 = arith.muli %s_s0, %gz : index",
                "%s_s = arith.muli %s_s1, %slot : index"]
    return "\n".join("        " + ln for ln in out)


def _lcma_funcs(c: CpuGemmConfig, mref: str) -> str:
    """The three LCMA export functions of :func:`executable_text`: the terms are index operands, passed on;
    batch as in :func:`_general_funcs` (``@lcma_fgemm``: none, its scratch one slot per workgroup of
    :func:`cpu_gemm.lcma_fused_scratch_floats`)."""
    pack_b, gemm = cpu_gemm.lcma_entry_names(c)
    fgemm = cpu_gemm.lcma_fused_entry_name(c)
    nt = cpu_gemm.MAX_TERMS
    tb, ta, td = ([f"%{p}{i}" for i in range(nt)] for p in ("tb", "ta", "td"))
    decl = lambda names: ", ".join(f"{n}: index" for n in names)  # noqa: E731
    ix = lambda n: ", ".join(["index"] * n)  # noqa: E731
    sub = _subspan
    return f"""    func.func private @{pack_b}({mref}, {mref}, {ix(8 + nt)}) attributes {{hal.import.static}}
    func.func private @{gemm}({mref}, {mref}, {mref}, {mref}, {ix(16 + 2 * nt)}) attributes {{hal.import.static}}
    func.func @lcma_pack_b({_memref_args(["b", "bp"])}, %K: index, %N: index, %ldb: index, %tb: index, %sb: index,
                           %nb: index, {decl(tb)}, %z_b: index) {{
        %c0 = arith.constant 0 : index
        %batch = hal.interface.workgroup.count[1] : index
{_sizes(c, "bp")}
{sub("mb", "b", "z_b")}
{sub("mbp", "bp", "s_bp")}
        %wg = hal.interface.workgroup.id[0] : index
        %wb = hal.interface.workgroup.id[1] : index
        func.call @{pack_b}(%mb, %mbp, %K, %N, %ldb, %tb, %sb, %nb, {", ".join(tb)}, %wg, %wb) : ({mref}, {mref}, {ix(8 + nt)}) -> ()
        return
    }}
    func.func @lcma_gemm({_memref_args(["a", "bp", "c", "s"])}, %M: index, %N: index, %K: index, %lda: index,
                         %ldc: index, %ta: index, %batch: index, %sa: index, %sc: index, %na: index, {decl(ta)},
                         %nd: index, {decl(td)}, %first: index, %z_a: index, %z_c: index) {{
        %c0 = arith.constant 0 : index
        %gz = hal.interface.workgroup.count[2] : index
{_sizes(c, "bp", "s", slot=c.mc * (c.kc + 16 + c.nc))}
{sub("ma", "a", "z_a")}
{sub("mbp", "bp", "s_bp")}
{sub("mc_", "c", "z_c")}
{sub("ms", "s", "s_s")}
        %wx = hal.interface.workgroup.id[0] : index
        %wy = hal.interface.workgroup.id[1] : index
        %wz = hal.interface.workgroup.id[2] : index
        func.call @{gemm}(%ma, %mbp, %mc_, %ms, %M, %N, %K, %lda, %ldc, %ta, %batch, %sa, %sc, %na, {", ".join(ta)}, %nd, {", ".join(td)}, %first, %wx, %wy, %wz, %gz) : ({mref}, {mref}, {mref}, {mref}, {ix(16 + 2 * nt)}) -> ()
        return
    }}
    func.func private @{fgemm}({mref}, {mref}, {mref}, {mref}, {ix(11 + 3 * nt)}) attributes {{hal.import.static}}
    func.func @lcma_fgemm({_memref_args(["a", "b", "c", "s"])}, %M: index, %N: index, %K: index, %lda: index,
                          %ldb: index, %ldc: index, %na: index, {decl(ta)}, %nb: index, {decl(tb)}, %nd: index,
                          {decl(td)}, %first: index, %z_a: index, %z_b: index, %z_c: index) {{
        %c0 = arith.constant 0 : index
        %nc = arith.constant {c.nc} : index
        %fslot = arith.constant {cpu_gemm.fused_slot_floats(c)} : index
        %gn = arith.ceildivui %N, %nc : index
        %tile = arith.muli %M, %nc : index
        %slot = arith.addi %fslot, %tile : index
        %s_s = arith.muli %gn, %slot : index
{sub("ma", "a", "z_a")}
{sub("mb", "b", "z_b")}
{sub("mc_", "c", "z_c")}
{sub("ms", "s", "s_s")}
        %wx = hal.interface.workgroup.id[0] : index
        func.call @{fgemm}(%ma, %mb, %mc_, %ms, %M, %N, %K, %lda, %ldb, %ldc, %na, {", ".join(ta)}, %nb, {", ".join(tb)}, %nd, {", ".join(td)}, %first, %wx) : ({mref}, {mref}, {mref}, {mref}, {ix(11 + 3 * nt)}) -> ()
        return
    }}"""


def _check_sizes(where: str, M, N, K) -> None:
    for name, v in (("M", M), ("N", N), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{where}: {name} must be a positive int, got {v!r}")


def gemm_spec(M: int, N: int, K: int, trans_a: bool = False, trans_b: bool = False, batch: int = 1) -> GemmSpec:
    """The f32 :class:`GemmSpec` the kernel serves for these sizes, layouts and batch (its ``a_shape``,
    ``b_shape``, ``c_shape`` are the buffers' canonical shapes: a leading batch dimension above 1).

    Raises:
        ValueError: as :class:`GemmSpec` (a size or the batch not a positive int, a flag not a bool).
    """
    return GemmSpec(M=M, N=N, K=K, a_dtype="f32", b_dtype="f32", out_dtype="f32", trans_a=trans_a,
                    trans_b=trans_b, batch=batch)


def dispatch_lines(exe: str, M: int, N: int, K: int, config: CpuGemmConfig = CpuGemmConfig(), a: str = "%a",
                   b: str = "%b", result: str = "%r", types: Optional[Sequence[str]] = None,
                   trans_a: bool = False, trans_b: bool = False, batch: int = 1,
                   b_inside: Optional[bool] = None) -> list:
    """The host-side lines computing ``C = A @ B`` (f32, C ``M x N`` row-major) through executable
    ``@exe``; C is ``{result}#0``.

    ``trans_a``: A is stored ``K x M`` (else ``M x K``); ``trans_b``: B is stored ``N x K`` (else
    ``K x N``); both row-major. ``batch``: that many independent products, a leading dimension of A,
    B and C alike (C ``batch x M x N``). The plain layout at batch 1 runs the classical exports
    ``@pack_b`` and ``@gemm``, or ``@fgemm`` alone where B is packed inside
    (:func:`cpu_gemm.b_inside`, or ``b_inside`` where given: a benchmark's choice; then no
    ``{result}_bp``), any other ``@general_pack_b`` (workload ``[pack workgroups, batch]``)
    and ``@general_gemm`` (``[along M, along N, batch groups]``, :func:`cpu_gemm.batch_groups`), the
    flags and the batch as push constants. ``types``: the tensor types of A and B as the caller holds
    them (any shape of the same elements; default the stored shapes above). Values ``{result}_M`` etc.
    and ``{result}_bp`` (packed B) are defined too.

    Raises:
        ValueError: M, N, K or batch is not a positive int (at K = 0 the kernel would leave C unwritten);
            ``b_inside=True`` for a transposed or batched GEMM.
    """
    _check_sizes("dispatch_lines", M, N, K)
    spec = gemm_spec(M, N, K, trans_a, trans_b, batch)
    a_t, b_t = types or (tensor_type(spec.a_shape, "f32"), tensor_type(spec.b_shape, "f32"))
    c_t = tensor_type(spec.c_shape, "f32")
    bp_t = tensor_type((cpu_gemm.packed_b_floats(N, K, config, batch),), "f32")
    s_t = tensor_type((cpu_gemm.scratch_floats(M, N, K, config, batch=batch),), "f32")
    gp, gm, gn = cpu_gemm.grid(M, N, K, config)
    r = result
    lines = [f"{r}_M = arith.constant {M} : index",
             f"{r}_N = arith.constant {N} : index",
             f"{r}_K = arith.constant {K} : index",
             f"{r}_gp = arith.constant {gp} : index",
             f"{r}_gn = arith.constant {gn} : index",
             f"{r}_gm = arith.constant {gm} : index"]
    if b_inside is None:
        b_inside = cpu_gemm.b_inside(M, N, K, trans_a, trans_b, batch)
    elif b_inside and (trans_a or trans_b or batch > 1):
        raise ValueError("dispatch_lines: B is packed inside only in the plain layout at batch 1")
    if b_inside:
        sf_t = tensor_type((cpu_gemm.fused_scratch_floats(N, config),), "f32")
        return lines + [
            f"{r}:2 = flow.dispatch @{exe}::@fgemm[{r}_gn]({a}, {b}, {r}_M, {r}_N, {r}_K) : "
            f"({a_t}, {b_t}, index, index, index) -> ({c_t}, {sf_t})"]
    if not (trans_a or trans_b or batch > 1):
        return lines + [
            f"{r}_bp = flow.dispatch @{exe}::@pack_b[{r}_gp]({b}, {r}_M, {r}_N, {r}_K) : "
            f"({b_t}, index, index, index) -> {bp_t}",
            f"{r}:2 = flow.dispatch @{exe}::@gemm[{r}_gm, {r}_gn]({a}, {r}_bp, {r}_M, {r}_N, {r}_K) : "
            f"({a_t}, {bp_t}, index, index, index) -> ({c_t}, {s_t})"]
    return lines + [
        f"{r}_ta = arith.constant {int(trans_a)} : index",
        f"{r}_tb = arith.constant {int(trans_b)} : index",
        f"{r}_batch = arith.constant {batch} : index",
        f"{r}_gz = arith.constant {cpu_gemm.batch_groups(M, N, batch, config)} : index",
        f"{r}_bp = flow.dispatch @{exe}::@general_pack_b[{r}_gp, {r}_batch]({b}, {r}_N, {r}_K, {r}_tb) : "
        f"({b_t}, index, index, index) -> {bp_t}",
        f"{r}:2 = flow.dispatch @{exe}::@general_gemm[{r}_gm, {r}_gn, {r}_gz]({a}, {r}_bp, {r}_M, {r}_N, {r}_K, "
        f"{r}_ta, {r}_batch) : ({a_t}, {bp_t}, index, index, index, index, index) -> ({c_t}, {s_t})"]


def gemm_module(M: int, N: int, K: int, config: Optional[CpuGemmConfig] = None, *,
                flags: Sequence[str] = DEFAULT_CPU_FLAGS, target_attr: Optional[str] = None,
                reference: bool = False, func: str = "main", exe: str = "falcon_cpu_sgemm",
                obj: Optional[Path] = None, trans_a: bool = False, trans_b: bool = False, batch: int = 1,
                b_inside: Optional[bool] = None) -> str:
    """A complete module: ``func.func @{func}(%a: MxK f32, %b: KxN f32) -> MxN f32`` through falcon's kernel
    (A ``KxM`` where ``trans_a``, B ``NxK`` where ``trans_b``, all three with a leading ``batch`` above 1:
    :func:`dispatch_lines`).

    Args:
        M, N, K: the GEMM's sizes (positive); batch: the products (positive).
        config: the kernel's blocking (default :func:`cpu_gemm.classical_config`).
        flags: the IREE flags the module will be compiled with (they fix the object key).
        target_attr: the object key (default :func:`cpu_target_attribute` of ``flags``).
        reference: also emit ``@reference``, the same product compiled by IREE itself.
        func: name of the kernel-backed function; exe: the executable's symbol.
        b_inside: the one-dispatch form that packs B inside (default: :func:`cpu_gemm.b_inside`'s rule;
            a benchmark sets it to time both forms).
        obj: an object file built for ``config`` (default :func:`cpu_source.compile_object`);
            its entry points name the blocking (:func:`cpu_gemm.entry_names`).

    Raises:
        ValueError: a size is not a positive int; ``obj`` lacks ``config``'s entry points.
        RuntimeError: the kernel does not compile (:func:`cpu_source.compile_object`),
            ``flags`` target this machine (``--iree-llvmcpu-target-cpu=host``) and it lacks
            AVX-512 F/BW/DQ/VL, or the target's ``cpu_features`` lack them (a module for
            another CPU would carry the object to a machine that cannot run it).
    """
    isa = config.isa if config else "avx512"
    check_target(flags, None, isa)
    _check_sizes("gemm_module", M, N, K)
    spec = gemm_spec(M, N, K, trans_a, trans_b, batch)
    config = config or cpu_gemm.classical_config(M, N, K, batch, trans_a, trans_b)
    target_attr = target_attr or cpu_target_attribute(flags)
    check_target(flags, target_attr, isa)
    if obj is not None:
        defined = cpu_object.defined_symbols(obj) if Path(obj).is_file() else None
        need = cpu_gemm.entry_names(config)
        if defined is not None and need[0] not in defined:
            raise ValueError(f"gemm_module: {obj} has no {need[0]}: built for another blocking than "
                             f"{config.label} (p{config.pack_rows})")
    obj = obj or cpu_source.compile_object(config)
    a_t, b_t, c_t = (tensor_type(x, "f32") for x in (spec.a_shape, spec.b_shape, spec.c_shape))
    body = "\n".join("  " + ln for ln in dispatch_lines(exe, M, N, K, config, trans_a=trans_a, trans_b=trans_b,
                                                         batch=batch, b_inside=b_inside))
    parts = [executable_text(exe, obj, target_attr, config),
             f"func.func @{func}(%a: {a_t}, %b: {b_t}) -> {c_t} {{\n{body}\n  return %r#0 : {c_t}\n}}\n"]
    if reference:
        parts.append(reference_func(spec))
    return module_text(parts)


def check_target(flags: Sequence[str], target_attr: Optional[str], isa: str = "avx512") -> None:
    """Refuse a module for a CPU that cannot run the ``isa`` kernel's object.

    Raises:
        RuntimeError: ``flags`` target this machine (``--iree-llvmcpu-target-cpu=host``) and it lacks
            the ISA's features (:data:`~falcon_mlir.kernels.cpu_object.ISA_FEATURES`: AVX-512 F/BW/DQ/VL,
            or AVX2 and FMA), or ``target_attr``'s ``cpu_features`` lack them (a module for another
            CPU would carry the object to a machine that cannot run it).
    """
    need = cpu_object.ISA_NAMES[isa]
    if "--iree-llvmcpu-target-cpu=host" in flags and not cpu_object.host_has(isa):
        raise RuntimeError(f"falcon's CPU GEMM kernel needs {need}, which this machine's CPU lacks")
    missing = cpu_object.missing_target_features(target_attr, isa) if target_attr else []
    if missing:
        raise RuntimeError(f"falcon's CPU GEMM kernel needs {need}; the IREE target lacks "
                           f"{', '.join(missing)}")


def compile_module(text: str, flags: Sequence[str] = DEFAULT_CPU_FLAGS) -> bytes:
    """Compile module text to a .vmfb (bytes) with IREE's in-process compiler.

    Raises:
        iree.compiler.CompilerToolError: IREE rejects the module.
    """
    return embed.compile_module(text, flags)
