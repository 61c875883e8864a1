"""Pipeline assembly for falcon-compile and the Python API: what runs between IREE phases.

One function builds it for both (:func:`make_rewrite`, and
:func:`compile_source` around it): from the user's lcma spec, tiles spec and
iree-compile flags it makes the stage list (:mod:`falcon_mlir.pipeline.stages`,
the same machinery falcon-opt runs)::

    lcma-rewrite{...}      the user's options, plus the defaults below; it
                           replaces a contraction over an empty reduction
                           (K = 0) by its init, as IREE 3.13 crashes on one
    empty-reduction        in its place when the rewrite is off (--no-lcma,
                           lcma=None): that replacement alone
    canonicalize,cse       only when something was rewritten: folds the
                           rewrite's slices of fills and shares its constants
                           (without it llvm-cpu codegen of the products can
                           exceed the stack allocation limit, IREE 3.13, 2048^3)
    falcon-kernels{...}    when the target device is cuda and Triton is installed:
                           contractions and kernel-form plans become falcon's
                           own generated kernels; for an llvm-cpu target CPU
                           with AVX-512 and a C compiler: f32 GEMMs become
                           falcon's CPU kernel (arch=x86-avx512)
    falcon-tiles{...}      when the target device is cuda (or tiles are asked for)

Defaults. What falcon-compile and the API imply beyond the user's options
is written here, in the tables below, and never applied silently: each applies
only to an option the user left at ``auto``, and each report entry of the
pass it changed lists it under ``"defaults"`` (``--lcma-explain`` shows it).

* :data:`PIPELINE_DEFAULTS`: inside IREE's pipeline, whatever the target.
* :data:`CPU_DEFAULTS`: what an llvm-cpu target CPU implies (the CPUs without
  native bf16, :data:`NO_NATIVE_BF16_CPUS`: the ``x86-avx2`` profile); applied
  first, so it wins over the CPU kernel's profile (whose bf16 is native).
* :data:`KERNEL_DEFAULTS`: what falcon-kernels running implies (the profile of
  its kernels: ``h200-falcon`` on CUDA, ``x86-falcon`` on the CPU unless
  ``$FALCON_PROFILE`` is set), applied before the target's, so they win.
* :data:`TARGET_DEFAULTS`: what a compile target implies.

The compile target itself defaults to this machine's CPU
(:data:`DEFAULT_TARGET`) when the flags name no device.

(The defaults tables and the stage assembly that applies them, falcon-compile's and falcon-opt's,
are read together here; what they key on, the target read from the flags, is in
:mod:`.target_flags`, whose names this module also exports.)
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from falcon_mlir.options import OptionTypeError, option_specs, to_text
from falcon_mlir.passes.empty_reduction import EmptyReductionOptions
from falcon_mlir.passes.falcon_kernels import KernelsOptions, triton_available
from falcon_mlir.passes.falcon_kernels.options import CPU_PROFILES
from falcon_mlir.passes.falcon_tiles import TilesOptions
from falcon_mlir.passes.lcma_rewrite import LcmaOptions

from .session import DEFAULT_REWRITE_PHASE, CompileResult, compile_module
from .stages import Pipeline, Stage, merge_kernel_entries
from .target_flags import (CPU_TARGET_FLAG_PREFIXES, DEFAULT_CUDA_TARGET, DEFAULT_TARGET, check_cuda_target,
                           cpu_kernel_blocker, cpu_target_flags, cuda_target, target_cpu, target_devices,
                           target_kind, targets_cuda, targets_llvm_cpu, with_default_target)

__all__ = ["Default", "PIPELINE_DEFAULTS", "KERNEL_DEFAULTS", "TARGET_DEFAULTS", "CPU_DEFAULTS",
           "NO_NATIVE_BF16_CPUS",
           "DEFAULT_TARGET", "profile_mismatch",
           "target_devices", "targets_cuda", "with_default_target", "check_cuda_target",
           "DEFAULT_CUDA_TARGET", "lcma_options", "targets_llvm_cpu", "cpu_target_flags",
           "CPU_TARGET_FLAG_PREFIXES", "cpu_kernel_blocker", "kernels_kind",
           "tiles_options", "kernels_options", "rewrite_stages", "make_rewrite", "compile_source",
           "KERNEL_FLAGS"]


@dataclass(frozen=True)
class Default:
    """One implied option value.

    Attributes:
        option: the options field (``profile``, ``edge``, ...).
        value: the value it gets where the user left it at ``auto``.
        why: the reason, as the report shows it.
        when: an extra condition on the options (``None``: always).
    """

    option: str
    value: Any
    why: str
    when: Optional[Callable[[Any], bool]] = None


def _forced(options: LcmaOptions) -> bool:
    return options.forced_schemes() is not None


#: Defaults inside IREE's pipeline (falcon-compile, the API), whatever the target.
PIPELINE_DEFAULTS = {
    "lcma-rewrite": (
        Default("barriers", True, "inside IREE's pipeline: data tiling on llvm-cpu needs bare "
                                  "blocks and products behind a compute barrier"),
    ),
}

#: What a target device implies (device name as in ``--iree-hal-target-device``).
TARGET_DEFAULTS = {
    "cuda": {
        "lcma-rewrite": (
            Default("profile", "h200-iree", "cuda target: the profile measured under IREE's "
                                            "CUDA code"),
            Default("edge", "pad", "cuda target, forced scheme: peeled strips fail to "
                                   "bufferize on CUDA, IREE 3.13", when=_forced),
            Default("dispatch", False, "cuda target: the run-time dispatch's dynamic slices "
                                       "fail to bufferize on CUDA, IREE 3.13"),
        ),
        "falcon-kernels": (
            Default("arch", "sm_90a", "cuda target: IREE 3.13 has no Hopper code generation; "
                                      "falcon's kernels are built for sm_90a (H100/H200)",
                    when=lambda o: triton_available()),
            Default("arch", "none", "cuda target, but Triton is not installed "
                                    "(pip install 'falcon-mlir[cuda]')",
                    when=lambda o: not triton_available()),
        ),
        "falcon-tiles": (
            Default("table", "cuda-sm80", "cuda target: IREE's own CUDA tile choices are "
                                          "slow on large matmuls"),
        ),
    },
    # llvm-cpu (IREE's local device, or the older --iree-hal-target-backends=llvm-cpu): falcon's
    # CPU kernel where the target CPU can run it (the `when`s read the compile's flags, which
    # _kernels puts into the options' cpu_flags first).
    **{device: {
        "falcon-kernels": (
            Default("arch", "x86-avx512", "llvm-cpu target CPU with AVX-512 F/BW/DQ/VL and a C "
                                          "compiler: classical f32 GEMMs run on falcon's CPU kernel",
                    when=lambda o: cpu_kernel_blocker(o.cpu_flags) is None),
            Default("arch", "x86-avx2", "llvm-cpu target CPU with AVX2 and FMA but not AVX-512, and a C "
                                        "compiler: classical f32 GEMMs run on falcon's AVX2 kernel",
                    when=lambda o: cpu_kernel_blocker(o.cpu_flags) == "avx512"
                    and cpu_kernel_blocker(o.cpu_flags, "avx2") is None),
            Default("arch", "none", "llvm-cpu target, an x86-64 CPU without AVX2 and FMA: "
                                    "falcon's CPU kernel needs them (or AVX-512)",
                    when=lambda o: cpu_kernel_blocker(o.cpu_flags, "avx2") == "avx2"),
            Default("arch", "none", "llvm-cpu target, but no C compiler for falcon's CPU kernel "
                                    "(install gcc or set FALCON_CC)",
                    when=lambda o: "compiler" in (cpu_kernel_blocker(o.cpu_flags),
                                                  cpu_kernel_blocker(o.cpu_flags, "avx2"))),
        ),
    } for device in ("local", "llvm-cpu")},
}

#: llvm-cpu target CPUs (``--iree-llvmcpu-target-cpu=NAME``, LLVM's x86
#: names) without AVX512-BF16: IREE emulates bf16 arithmetic there. On
#: ``x86-64-v3`` its bf16 GEMM measured 1/50-1/63 of its f32 rate on this host
#: (docs/benchmarks.md). CPUs with AVX512-BF16 (``cooperlake``,
#: ``sapphirerapids`` and later Xeons, ``znver4``, ``znver5``), ``host`` and
#: names not listed imply nothing. ``generic`` is LLVM's baseline x86-64 CPU,
#: what IREE compiles for when the flags select a CPU device and name no
#: target CPU (:func:`target_cpu`): IREE's bf16 GEMM under data tiling ran
#: 7.7 s there against 0.28 s for a plan with f32 products (1024x3072x768).
#: These are x86 names: a ``--iree-llvmcpu-target-triple`` for another
#: architecture implies nothing.
NO_NATIVE_BF16_CPUS = (
    "generic", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4",
    "k8", "amdfam10", "core2", "penryn", "bonnell", "atom", "silvermont", "slm",
    "goldmont", "goldmont-plus", "tremont", "gracemont", "knl", "knm",
    "nehalem", "corei7", "westmere", "sandybridge", "corei7-avx", "ivybridge", "core-avx-i",
    "haswell", "core-avx2", "broadwell",
    "skylake", "skylake-avx512", "skx", "cascadelake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "alderlake", "raptorlake", "meteorlake",
    "arrowlake", "arrowlake-s", "lunarlake", "pantherlake",
    "sierraforest", "grandridge", "clearwaterforest",
    "btver1", "btver2", "bdver1", "bdver2", "bdver3", "bdver4", "znver1", "znver2", "znver3",
)

#: What the llvm-cpu target CPU implies (from :data:`NO_NATIVE_BF16_CPUS`): the
#: ``x86-avx2`` profile (this host built for x86-64-v3: bf16 emulated, f32 at
#: the AVX2 rate), so auto gives bf16 contractions plans whose products
#: multiply f32. On the CPUs other than x86-64-v3 only its bf16 verdict is
#: measured, not its rates.
CPU_DEFAULTS = {
    cpu: {
        "lcma-rewrite": (
            Default("profile", "x86-avx2", f"llvm-cpu target cpu {cpu}: no AVX512-BF16, bf16 "
                                           "is emulated (IREE's bf16 GEMM ran at about 1/55 of its "
                                           "f32 rate on x86-64-v3)",
                    when=lambda o: not os.environ.get("FALCON_PROFILE")),  # the user's profile wins
        ),
    }
    for cpu in NO_NATIVE_BF16_CPUS
}

#: What falcon-kernels running implies for the other passes, by where its kernels run: on CUDA
#: (arch sm_90a) the profile of falcon's generated CUDA kernels; on the CPU (x86-avx512) the
#: profile of falcon's CPU kernel, whose kernel form runs LCMA plans with the combines inside it
#: (unless ``$FALCON_PROFILE`` names one: the user's choice, as without the kernels).
KERNEL_DEFAULTS = {
    "cuda": {
        "lcma-rewrite": (
            Default("profile", "h200-falcon", "falcon-kernels on: the profile of falcon's generated "
                                              "kernels (classical and kernel-form plans), measured "
                                              "on the H200"),
        ),
    },
    "cpu": {
        "lcma-rewrite": (
            Default("profile", CPU_PROFILES["x86-avx512"], "falcon-kernels on (x86-avx512): the profile of falcon's "
                                             "CPU kernel (classical and kernel-form plans, the "
                                             "combines inside the kernel), measured on this machine",
                    when=lambda o: not os.environ.get("FALCON_PROFILE")),  # the user's profile wins
        ),
    },
    "cpu-avx2": {
        "lcma-rewrite": (
            Default("profile", CPU_PROFILES["x86-avx2"], "falcon-kernels on (x86-avx2): the profile of falcon's "
                                                  "AVX2 CPU kernel (classical and kernel-form plans), "
                                                  "measured on a 2-core Zen 3",
                    when=lambda o: not os.environ.get("FALCON_PROFILE")),
        ),
    },
}


def kernels_kind(options: Optional[KernelsOptions]) -> Optional[str]:
    """Where falcon-kernels with ``options`` runs its kernels, as :data:`KERNEL_DEFAULTS` keys them:
    ``"cpu"`` (x86-avx512), ``"cpu-avx2"`` (x86-avx2), ``"cuda"``, or None (``options`` None: not run)."""
    if options is None:
        return None
    if options.on_cpu:
        return "cpu" if options.isa == "avx512" else f"cpu-{options.isa}"
    return "cuda"

def _apply(options, defaults, applied: dict):
    """``options`` with each of ``defaults`` set where the option is still
    ``auto`` (``None`` or ``"auto"``); ``applied`` gets ``key: "value (why)"``."""
    specs = {s.name: s for s in option_specs(type(options))}
    for d in defaults:
        if getattr(options, d.option) not in (None, "auto") or (d.when and not d.when(options)):
            continue
        options = dataclasses.replace(options, **{d.option: d.value})
        spec = specs[d.option]
        applied[spec.key] = f"{spec.text_of(d.value)} ({d.why})"
    return options


def _cpu_and_kernel_defaults(options, pass_name: str, cpu: str, kernels: Optional[str], applied: dict):
    """``options`` with the :data:`CPU_DEFAULTS` of target CPU ``cpu`` (``""``: none) and then the
    :data:`KERNEL_DEFAULTS` of ``kernels`` (``"cuda"``, ``"cpu"`` or ``None``) for ``pass_name``; ``applied``
    gets what was set. The target CPU's come first: x86-falcon's bf16 table is a native-bf16 CPU's, and
    on an AVX-512 CPU without AVX512-BF16 (skylake-avx512, x86-64-v4, icelake-server ...) it kept a
    2048^3 bf16 GEMM classical (predicted 17 ms) where x86-avx2 knows IREE's emulated bf16 GEMM (3.6 s)
    and takes Strassen with f32 products (55 ms). falcon's AVX2 kernel (``"cpu-avx2"``) runs on such CPUs
    only, and its profile (x86-falcon-avx2) has x86-avx2's emulated bf16 table: it comes first."""
    if kernels == "cpu-avx2":  # its profile's bf16 table is already the emulated one: it goes first
        options = _apply(options, KERNEL_DEFAULTS[kernels].get(pass_name, ()), applied)
    if cpu in CPU_DEFAULTS:
        options = _apply(options, CPU_DEFAULTS[cpu].get(pass_name, ()), applied)
    if kernels and kernels != "cpu-avx2":
        options = _apply(options, KERNEL_DEFAULTS[kernels].get(pass_name, ()), applied)
    return options


def _with_defaults(options, pass_name: str, flags: Sequence[str], kernels: Optional[str] = None):
    """``(options, applied)``: :data:`PIPELINE_DEFAULTS`, the :data:`CPU_DEFAULTS` of the target CPU,
    :data:`KERNEL_DEFAULTS` (when falcon-kernels runs: ``kernels`` is ``"cuda"`` or ``"cpu"``, where its
    kernels run) and the :data:`TARGET_DEFAULTS` of every device ``flags`` select, for ``pass_name``, in
    that order (the first to set an option wins)."""
    applied: dict = {}
    options = _apply(options, PIPELINE_DEFAULTS.get(pass_name, ()), applied)
    cpu = "" if targets_cuda(flags) else target_cpu(flags)
    options = _cpu_and_kernel_defaults(options, pass_name, cpu, kernels, applied)
    devices = {d.split(":")[0] for d in target_devices(flags)}
    for device, per_pass in TARGET_DEFAULTS.items():
        if any(d.startswith(device) for d in devices):
            options = _apply(options, per_pass.get(pass_name, ()), applied)
    return options, applied


def imply_kernel_defaults(stages: list) -> list:
    """falcon-opt's stages with :data:`KERNEL_DEFAULTS` applied as falcon-compile applies them: an
    ``lcma-rewrite`` stage followed, anywhere later, by a ``falcon-kernels`` stage whose kernels run
    (``arch`` not ``none``: ``x86-avx512`` on the CPU, ``sm_90a`` or ``auto`` on CUDA) gets the profile of
    those kernels where its own options leave it ``auto`` (``x86-falcon``, unless ``$FALCON_PROFILE`` is
    set; ``h200-falcon``), and its report entries name the default (``defaults``). On the CPU the
    :data:`CPU_DEFAULTS` of the target CPU the kernels' ``cpu-flags`` name come first, as in
    falcon-compile (``skylake-avx512``: ``x86-avx2``, bf16 emulated). Without it,
    ``falcon-opt --lcma-rewrite --falcon-kernels=x86-avx512`` decided on the host profile (IREE's own
    GEMM: Strassen in the per-product form at 4096^3, predicted 1.83x) where falcon-compile decides
    on falcon's kernel (the kernel form, predicted 1.09x). Other stages are returned as they are.
    """
    out = list(stages)
    for i, st in enumerate(out):
        if st.name != "lcma-rewrite" or st.options is None:
            continue
        later = [k.options for k in out[i + 1:] if k.name == "falcon-kernels" and k.options is not None]
        kopts = next((k for k in later if k.arch != "none"), None)
        if kopts is None:
            continue
        applied: dict = {}
        cpu = target_cpu(kopts.cpu_flags) if kopts.on_cpu else ""  # () is the host: nothing implied
        options = _cpu_and_kernel_defaults(st.options, "lcma-rewrite", cpu, kernels_kind(kopts), applied)
        if applied:
            extra = dict(st.report_extra)
            extra["defaults"] = {**extra.get("defaults", {}), **applied}
            out[i] = dataclasses.replace(st, text=f"lcma-rewrite{{{to_text(options)}}}", options=options,
                                         report_extra=extra)
    return out


def profile_mismatch(options: LcmaOptions, flags: Sequence[str]) -> Optional[str]:
    """One warning line when the cost model's profile (``options.profile``, or
    ``$FALCON_PROFILE`` where that is ``None``/``host``) is for another kind of
    target than the one ``flags`` compile for (a GPU profile on llvm-cpu, a CPU
    one on cuda), else ``None``: the model would decide for other hardware."""
    from falcon_mlir.decision.profile import ProfileError, load_profile

    want = target_kind(flags)
    if want is None:
        return None
    try:
        profile = load_profile(options.profile)
    except ProfileError:  # reported where the decision is made
        return None
    if profile.kind == want:
        return None
    env = os.environ.get("FALCON_PROFILE")
    named = (f"$FALCON_PROFILE={env}" if options.profile in (None, "host") and env
             else f"profile={options.profile}")
    target = "cuda" if want == "gpu" else "llvm-cpu"
    return (f"warning: lcma-rewrite: the cost model's profile {profile.name} ({named}) is for a "
            f"{profile.kind} target, but this compiles for {target}: its decisions are for other "
            f"hardware")


def lcma_options(spec) -> Optional[LcmaOptions]:
    """The user's lcma spec as options (before any default), or ``None`` when
    the rewrite is off: ``None``/``False``/``"none"`` off (as for the tiles and
    kernels specs); ``True``, ``"auto"`` or ``""`` the defaults; option text;
    an :class:`LcmaOptions` (used as is).

    Raises:
        OptionError: bad option text.
        OptionTypeError (an OptionError and a TypeError): another kind of spec
            (``0``, a list; a callable is :func:`make_rewrite`'s).
    """
    if spec is None or spec is False:
        return None
    if spec is True:
        return LcmaOptions.parse("")  # the defaults, checked as text options are
    if isinstance(spec, LcmaOptions):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if LcmaOptions.means_off(text):
            return None
        return LcmaOptions.parse(text)
    raise OptionTypeError(
        f"lcma must be None, 'auto', 'none', an option string, LcmaOptions or a callable, "
        f"not {type(spec).__name__} {spec!r:.40}")


def _pass_options(spec, cls, what: str):
    """``spec`` as options of ``cls``: an instance as is, ``True`` the defaults
    (``"auto"``), a string parsed (checked whatever the target, so a typo
    shows before the target changes).

    Raises:
        OptionError: bad option text.
        OptionTypeError (an OptionError and a TypeError): another kind of
            spec (bytes, a list, a dict, a number...).
    """
    if isinstance(spec, cls):
        return spec
    if spec is True:
        return cls.parse("auto")
    if isinstance(spec, str):
        return cls.parse(spec)
    raise OptionTypeError(f"{what} must be None, 'auto', 'none', an option string or {cls.__name__}, "
                          f"not {type(spec).__name__} {spec!r:.40}")


def _tiles(spec, flags: Sequence[str]) -> tuple:
    """``(TilesOptions or None, applied defaults)``; see :func:`tiles_options`."""
    if spec is None or spec is False:
        return None, {}
    options = _pass_options(spec, TilesOptions, "tiles")
    options, applied = _with_defaults(options, "falcon-tiles", flags)
    if options.table in ("auto", "none"):  # no target implies a table, or turned off
        return None, {}
    return options, applied


def _kernels(spec, flags: Sequence[str]) -> tuple:
    """``(KernelsOptions or None, applied defaults)``; see :func:`kernels_options`."""
    if spec is None or spec is False:
        return None, {}
    options = _pass_options(spec, KernelsOptions, "kernels")
    if targets_llvm_cpu(flags):
        # The objects' key is the compile's own llvm-cpu target (a copy: the caller's options stay
        # theirs); set first, the defaults' conditions read it.
        options = dataclasses.replace(options, cpu_flags=cpu_target_flags(flags))
        options, applied = _with_defaults(options, "falcon-kernels", flags)
        if not options.on_cpu:  # auto, none, or a CUDA arch on a CPU target
            return None, applied if options.arch == "none" else {}
        return options, applied
    if not targets_cuda(flags):
        return None, {}
    options, applied = _with_defaults(options, "falcon-kernels", flags)
    if options.arch in ("auto", "none") or options.on_cpu:
        return None, applied
    # The objects' key is the compile's own CUDA target (a copy: the caller's options stay theirs).
    return dataclasses.replace(options, cuda_target=cuda_target(flags)), applied


def kernels_options(spec, flags: Sequence[str] = ()) -> Optional[KernelsOptions]:
    """falcon-kernels' options for ``spec`` given the iree-compile ``flags``, or
    ``None`` when the pass does not run: ``None``/``False``/``"none"`` off;
    ``True``/``"auto"``: on for a cuda target when Triton is installed, and
    (``arch=x86-avx512``) for an llvm-cpu target whose CPU has AVX-512
    F/BW/DQ/VL when a C compiler is found (``arch=x86-avx2`` for one with AVX2 and FMA only) (:data:`TARGET_DEFAULTS`,
    :func:`cpu_kernel_blocker`); option text (``"arch=sm_90a f32-mode=ieee"``); a
    :class:`KernelsOptions`. Off for other targets, and for an arch of another
    kind than the target (the text is checked all the same). ``cuda-target`` is
    the flags' ``--iree-cuda-target``; ``cpu-flags`` the flags' llvm-cpu ones
    (:func:`cpu_target_flags`).

    Raises:
        OptionError: an unknown option or value.
        OptionTypeError (an OptionError and a TypeError): ``spec`` of
            another kind (bytes, a list, ...).
    """
    return _kernels(spec, flags)[0]


def tiles_options(spec, flags: Sequence[str] = ()) -> Optional[TilesOptions]:
    """falcon-tiles' options for ``spec`` given the iree-compile ``flags``, or
    ``None`` when the pass does not run: ``None``/``False``/``"none"`` off;
    ``True``/``"auto"`` the table the target implies (:data:`TARGET_DEFAULTS`;
    none off cuda); option text (``"cuda-sm80"``, ``"table=cuda-sm80
    prefer=simt64x64"``); a :class:`TilesOptions`.

    Raises:
        OptionError: an unknown table or option.
        OptionTypeError (an OptionError and a TypeError): ``spec`` of
            another kind (bytes, a list, ...).
    """
    return _tiles(spec, flags)[0]


def _rewritten(report: list) -> bool:
    return any(e.get("plan") != "classical" for e in report)


def rewrite_stages(lcma, tiles, flags: Sequence[str], kernels="auto", empty_reduction: bool = True) -> list:
    """The stages run between IREE phases for ``lcma`` (see :func:`lcma_options`;
    not a callable), ``tiles`` (see :func:`tiles_options`), ``kernels`` (see
    :func:`kernels_options`) and ``flags``. With the rewrite off the
    ``empty-reduction`` pass comes first (unless ``empty_reduction`` is false:
    a custom rewrite in its place), so IREE 3.13 never meets a contraction
    over an empty reduction (K = 0), on which it crashes; lcma-rewrite
    replaces those itself.

    Raises:
        OptionError: bad option text.
    """
    stages = []
    kopts, kapplied = _kernels(kernels, flags)
    options = lcma_options(lcma)
    if options is not None and options.form == "kernel" and kopts is None:
        from falcon_mlir.options import OptionError

        why = kapplied.get("arch", "falcon-kernels is off (kernels=none)")
        raise OptionError(f"form=kernel needs the falcon-kernels pass, which does not run here: {why} "
                          "(the contractions would stay classical under a report that says rewritten)")
    if options is not None:
        options, applied = _with_defaults(options, "lcma-rewrite", flags, kernels=kernels_kind(kopts))
        extra = {"defaults": applied} if applied else {}
        mismatch = profile_mismatch(options, flags)
        if mismatch:
            extra["profile_warning"] = mismatch
        stages.append(Stage("lcma-rewrite", f"lcma-rewrite{{{to_text(options)}}}", options,
                            report_extra=extra))
        stages.append(Stage("canonicalize", "canonicalize,cse", when=_rewritten))
    elif empty_reduction:
        stages.append(Stage("empty-reduction", "empty-reduction", EmptyReductionOptions()))
    if kopts is not None:
        stages.append(Stage("falcon-kernels", f"falcon-kernels{{{to_text(kopts)}}}", kopts,
                            report_extra={"defaults": kapplied} if kapplied else {}))
    topts, applied = _tiles(tiles, flags)
    if topts is not None:
        stages.append(Stage("falcon-tiles", f"falcon-tiles{{{to_text(topts)}}}", topts,
                            report_extra={"defaults": applied} if applied else {}))
    return stages


def make_rewrite(lcma="auto", tiles="auto", flags: Sequence[str] = (),
                 tiles_report: Optional[list] = None, kernels="auto"):
    """The ``rewrite(module_op) -> report`` callback that IREE's session runs
    between phases, or ``None`` when nothing is to run. Options are parsed
    here, before any compilation.

    With the rewrite off (``lcma`` ``None``/``"none"``) the callback still runs
    the empty-reduction pass (:func:`rewrite_stages`), so it is ``None`` only
    for a callable ``lcma`` with nothing else to run.

    ``lcma`` may also be a callable ``rewrite(module_op) -> list[dict]``: it
    runs in place of lcma-rewrite (and its cleanup, and of empty-reduction),
    falcon-tiles after it.
    The callback returns the lcma-rewrite report (or empty-reduction's), with falcon-kernels'
    entries joined to it (each contraction's ``kernels`` list); falcon-tiles'
    entries go to ``tiles_report`` when given. Where the cost model's profile
    is for another kind of target than ``flags`` compile for
    (:func:`profile_mismatch`), the callback prints that warning line on
    stderr once and each lcma-rewrite entry carries it as ``profile_warning``. It has ``options`` (the
    lcma-rewrite options with defaults, or ``None``) and ``stages`` attributes.

    Raises:
        OptionError (a ValueError): bad option text.
    """
    custom = lcma if callable(lcma) and not isinstance(lcma, (str, bool)) else None
    stages = rewrite_stages(None if custom else lcma, tiles, flags, kernels, empty_reduction=custom is None)
    if custom is None and not stages:
        return None
    if custom is not None and not stages:
        return custom
    # A target whose kernels are off only because of the environment (a cuda target without
    # Triton; an llvm-cpu target CPU without AVX-512, or no C compiler): each contraction's entry
    # says so (the pass does not run to say it itself).
    kapplied = _kernels(kernels, flags)[1]
    no_kernels = kapplied.get("arch", "") if kapplied.get("arch", "").startswith("none") else None
    if targets_cuda(flags):
        no_kernels_why = "left to IREE: Triton is not installed (pip install 'falcon-mlir[cuda]')"
    else:  # the default's reason: "none (WHY)"
        no_kernels_why = f"left to IREE: {no_kernels[len('none ('):-1]}" if no_kernels else None

    lcma_stage = next((s for s in stages if s.name == "lcma-rewrite"), None)
    mismatch = lcma_stage.report_extra.get("profile_warning") if lcma_stage else None

    def rewrite(module_op):
        if mismatch:  # once per compile, before the rewrite decides anything
            import sys

            print(mismatch, file=sys.stderr, flush=True)
        report = list(custom(module_op) or []) if custom is not None else []
        pipe = Pipeline(stages)
        pipe.run(module_op, reraise=True)
        for st, entries in pipe.stage_reports:
            if st.name == "falcon-tiles":
                if tiles_report is not None:
                    tiles_report.extend(entries)
            elif st.name == "falcon-kernels":
                merge_kernel_entries(report, entries)
            else:
                report.extend(entries)
        if no_kernels:
            for e in report:  # (an op replaced by its init is gone: no kernel to speak of)
                if e.get("element_types") is not None and "kernels" not in e and not e.get("replaced_by"):
                    e["kernels"] = [{"kernel": None, "reason": no_kernels_why,
                                     "defaults": {"arch": no_kernels}}]
        return report

    rewrite.options = next((s.options for s in stages if s.name == "lcma-rewrite"), None)
    rewrite.stages = stages
    return rewrite


#: IREE options a module holding falcon's kernels needs: Triton's global scratch
#: (TMA descriptors) is 128-byte aligned, IREE's resource offsets are 64-byte
#: aligned by default. They are process-wide options in IREE 3.13 (a session
#: rejects them), set once per process (:func:`capi.set_global_flags`); the
#: larger alignment costs other modules of the process nothing but padding.
KERNEL_FLAGS = ("--iree-stream-resource-min-offset-alignment=128",)


def compile_source(source, *, flags: Sequence[str] = (), lcma="auto", tiles="auto",
                   phase: str = DEFAULT_REWRITE_PHASE, input_name: Optional[str] = None,
                   tiles_report: Optional[list] = None, kernels="auto") -> CompileResult:
    """Compile ``source`` (MLIR text or bytecode, or a path) with falcon's
    rewrite between IREE phases; the target defaults to :data:`DEFAULT_TARGET`
    when ``flags`` name no device (:func:`with_default_target`); with
    falcon-kernels on for CUDA (a cuda target with Triton installed, unless ``kernels``
    is ``"none"``), :data:`KERNEL_FLAGS` are set for the process (the CPU kernel needs none).

    Returns:
        The session's :class:`CompileResult` (output bytes, report of
        lcma-rewrite, warnings).

    Raises:
        OptionError: bad lcma, tiles or kernels option text (before compiling).
        CompileError: IREE or the rewrite failed (``RewriteError`` for the latter).
    """
    flags = with_default_target(flags)
    check_cuda_target(flags)
    kopts = kernels_options(kernels, flags)
    if kopts is not None and not kopts.on_cpu:
        from .capi import set_global_flags

        set_global_flags(KERNEL_FLAGS)
    rewrite = make_rewrite(lcma, tiles, flags, tiles_report, kernels)
    return compile_module(source, flags=flags, rewrite=rewrite, phase=phase,
                          input_name=input_name, result=True)
