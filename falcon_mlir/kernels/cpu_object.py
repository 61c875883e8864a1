"""Building falcon's CPU kernel object: the C compiler, its flags, the object's checks and cache.

What :mod:`falcon_mlir.kernels.cpu_gemm` and :mod:`falcon_mlir.kernels.cpu_plan` generate is C
source; this module turns a source into a relocatable x86-64 object that IREE 3.13 links into an
llvm-cpu executable (docs/kernels.md, *falcon's own CPU GEMM kernel*, "Compiler and cache"):

* the compiler (``$FALCON_CC`` or ``gcc``, :func:`compiler`) and its flags (:data:`MARCH` per ISA,
  :data:`CFLAGS`: freestanding, no libc calls);
* the checks on what it made (:func:`object_problem`: a whole ELF64 x86-64 relocatable object;
  :func:`undefined_symbols`: nothing IREE's ``--no-undefined`` link would miss);
* the cache (:func:`cache_dir`, keyed by SHA-256 of source, flags and compiler version; objects
  written atomically; a folder of the user's own under the system's temporary folder where the
  cache cannot be written or IREE cannot link from its path, :func:`linkable_path`);
* the CPU the object needs (:data:`ISA_FEATURES` per ISA: AVX-512 F/BW/DQ/VL for x86-64-v4 code, AVX2,
  FMA, F16C and BMI2 for the AVX2 build's x86-64-v3; :func:`host_has`, :func:`missing_target_features`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

#: Flags every object is compiled with, after its ISA's ``-march`` (:data:`MARCH`).
CFLAGS = ("-O3", "-mtune=native", "-ffreestanding", "-fPIC", "-fvisibility=hidden",
          "-fno-plt", "-fno-asynchronous-unwind-tables", "-fno-tree-loop-distribute-patterns",
          "-fno-stack-protector", "-fno-exceptions", "-fno-math-errno")
#: The x86-64 level each kernel ISA is compiled for: x86-64-v4 (AVX-512 F/BW/DQ/VL), x86-64-v3 (AVX2,
#: FMA, BMI2: an AVX2 object must hold no AVX-512 instruction gcc might pick on its own).
MARCH = {"avx512": "-march=x86-64-v4", "avx2": "-march=x86-64-v3"}


#: The AVX-512 subsets the object's code uses (``-march=x86-64-v4``), as ``/proc/cpuinfo`` and LLVM
#: (``cpu_features``) name them: a CPU with AVX-512F alone (Knights Landing) cannot run it.
REQUIRED_FEATURES = ("avx512f", "avx512bw", "avx512dq", "avx512vl")


#: The features each kernel ISA's object uses (``-march`` of :data:`MARCH`), as ``/proc/cpuinfo``
#: and LLVM name them (the same names for these). The AVX2 object's x86-64-v3 also allows BMI1, LZCNT and
#: MOVBE; gcc uses BMI2's shifts (shlx, shrx: about 70 in the object), so BMI2 is checked too.
ISA_FEATURES = {"avx512": REQUIRED_FEATURES, "avx2": ("avx", "avx2", "fma", "f16c", "bmi2")}
#: What each ISA's features are called in messages.
ISA_NAMES = {"avx512": "AVX-512 (F, BW, DQ, VL)", "avx2": "AVX2 and FMA (x86-64-v3)"}


def host_has(isa: str, cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this machine's CPU has every feature of :data:`ISA_FEATURES` ``[isa]`` (the ``flags``
    lines of ``cpuinfo``; False where it cannot be read)."""
    try:
        with open(cpuinfo) as f:
            lines = [ln.split(":", 1)[-1].split() for ln in f if ln.startswith("flags")]
    except OSError:
        return False
    return bool(lines) and all(set(ISA_FEATURES[isa]) <= set(flags) for flags in lines)


def host_has_avx512(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this machine's CPU has every subset in :data:`REQUIRED_FEATURES` (:func:`host_has`)."""
    return host_has("avx512", cpuinfo)


def host_isa(cpuinfo: str = "/proc/cpuinfo"):
    """The widest kernel ISA this machine's CPU runs (``avx512``, ``avx2``), or None."""
    return next((isa for isa in ISA_FEATURES if host_has(isa, cpuinfo)), None)


def missing_target_features(target_attr: str, isa: str = "avx512") -> list:
    """The :data:`ISA_FEATURES` ``[isa]`` an ``#hal.executable.target`` attribute's ``cpu_features``
    lack, as ``+avx512f`` ...; ``[]`` when it has them all or names no ``cpu_features``."""
    import re

    m = re.search(r'cpu_features = "([^"]*)"', target_attr)
    if m is None:
        return []
    have = set()
    for f in m.group(1).split(","):  # in order: a later -fma takes back an earlier +fma (LLVM's rule)
        (have.add if f.startswith("+") else have.discard)(f[1:])
    return [f"+{f}" for f in ISA_FEATURES[isa] if f not in have]


def compiler() -> str:
    """The C compiler: ``$FALCON_CC`` or ``gcc`` on PATH.

    Raises:
        RuntimeError: none found (one line: set FALCON_CC or install gcc).
    """
    cc = os.environ.get("FALCON_CC") or "gcc"
    path = shutil.which(cc)
    if path is None:
        raise RuntimeError(f"no C compiler '{cc}' for falcon's CPU kernel: install gcc or set FALCON_CC")
    return path


def cache_dir() -> Path:
    """``$FALCON_KERNEL_CACHE/cpu`` or ``~/.cache/falcon-mlir/cpu``."""
    env = os.environ.get("FALCON_KERNEL_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "falcon-mlir") / "cpu"


def linkable_path(path) -> bool:
    """Whether IREE 3.13 can link an object at ``path``: it runs its linker through ``sh -c`` with
    the object's path unquoted, so a space splits it and a quote breaks the command (letters,
    digits and ``_.+-@%,:=/`` only)."""
    import re

    return re.fullmatch(r"[A-Za-z0-9_.+\-@%,:=/]+", str(path)) is not None


_FALLBACK_DIR: list = []


def _fallback_dir() -> Path:
    """The folder for objects when :func:`cache_dir` cannot be written or IREE cannot link from it:
    ``falcon-mlir-<uid>/cpu`` under the system's temporary folder, the user's own (mode 0700, not a
    link), kept after the process like the cache (names are content hashes). Where that folder is not
    the user's own, a new temporary folder, also kept.

    Kept because a module's text names the object by its path for a later compile: falcon-opt's
    output, or ``falcon-compile --compile-to=input`` compiled on by another iree-compile process. A
    folder removed at exit (as it was) left those texts naming a file that no longer existed:
    "referenced object file not found" in the later compile, after falcon-opt had exited 0.
    """
    if not _FALLBACK_DIR:
        import stat

        base = Path(tempfile.gettempdir()) / f"falcon-mlir-{os.getuid()}"
        try:
            base.mkdir(mode=0o700, exist_ok=True)
            st = base.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise PermissionError(f"{base} is not a private folder of this user")
            d = base / "cpu"
            d.mkdir(exist_ok=True)
        except OSError:
            d = Path(tempfile.mkdtemp(prefix="falcon-cpu-"))
        _FALLBACK_DIR.append(d)
    return _FALLBACK_DIR[0]


def object_problem(path: Path):
    """What makes ``path`` unusable as the kernel's object, or None: it must be a whole
    ELF64 little-endian x86-64 relocatable object (every section and the section header
    table inside the file: a truncated object fails here, not in IREE's linker).
    """
    import struct

    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if data[:4] != b"\x7fELF":
        return "not an ELF file" + (" (empty)" if not data else "")
    if len(data) < 64 or data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF object"
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if e_type != 1 or e_machine != 62:
        return f"not an x86-64 relocatable object (type {e_type}, machine {e_machine})"
    if shentsize < 64 or shoff + shnum * shentsize > len(data):
        return f"truncated ({len(data)} bytes: the section headers end past it)"
    for i in range(shnum):
        sh_type, = struct.unpack_from("<I", data, shoff + i * shentsize + 4)
        off, size = struct.unpack_from("<QQ", data, shoff + i * shentsize + 24)
        if sh_type != 8 and off + size > len(data):  # SHT_NOBITS (.bss) takes no bytes
            return f"truncated ({len(data)} bytes: section {i} ends at {off + size})"
    return None


def _compiler_version(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cc


def compile_source(src: str, label: str = "source", cache: bool = True, isa: str = "avx512") -> Path:
    """Compile C source ``src`` with ``isa``'s :data:`MARCH` and :data:`CFLAGS` to an object file and return its path.

    The object is cached under :func:`cache_dir` by SHA-256 of (source,
    flags, compiler version); written to a temporary file and renamed.
    ``label`` names the kernel in errors.

    A cached object that :func:`object_problem` rejects (truncated) is
    compiled again; where the cache cannot be written, or its path is not
    :func:`linkable_path` (a space in ``$HOME``), the object goes to the
    user's folder under the system's temporary folder (:func:`_fallback_dir`),
    kept after the process: module texts name the object by its path.

    Raises:
        RuntimeError: no compiler (:func:`compiler`), the compiler failed (its
            first error line, or its exit status), it made no usable object
            (:func:`object_problem`), or the object has undefined symbols (IREE
            links with ``--no-undefined`` and no libc).
    """
    cc = compiler()
    flags = (MARCH[isa], *CFLAGS)
    key = hashlib.sha256("\0".join([src, " ".join(flags), _compiler_version(cc)]).encode()).hexdigest()[:24]
    name = f"sgemm_{key}.o"
    out = cache_dir() / name
    if cache and out.is_file() and object_problem(out) is None and linkable_path(out.resolve()):
        return out  # a damaged entry (truncated) is compiled again below
    with tempfile.TemporaryDirectory() as tmp:
        c_file, o_file = Path(tmp) / "k.c", Path(tmp) / "k.o"
        c_file.write_text(src)
        res = subprocess.run([cc, *flags, "-c", str(c_file), "-o", str(o_file)], capture_output=True, text=True)
        if res.returncode != 0:
            text = (res.stderr + res.stdout).strip()
            first = next((ln for ln in text.splitlines() if "error" in ln), text[:200].replace("\n", " "))
            first = first or f"exit status {res.returncode}, no output"
            raise RuntimeError(f"{cc} failed on falcon's CPU kernel ({label}): {first}")
        problem = object_problem(o_file)
        if problem:
            raise RuntimeError(f"{cc} made no usable object for falcon's CPU kernel ({label}): {problem}")
        missing = undefined_symbols(o_file)
        if missing:
            raise RuntimeError(f"falcon's CPU kernel ({label}) needs symbols IREE cannot link: {', '.join(missing)}")
        if linkable_path(out.resolve()):
            try:
                return _store(o_file, out)
            except OSError:  # the cache cannot be written (read-only, not a folder): it only costs the cache
                pass
        return _store(o_file, _fallback_dir() / name)  # also where IREE could not link from the cache


def _store(obj: Path, out: Path) -> Path:
    """Copy ``obj`` to ``out`` atomically (a temporary file in the same folder, renamed), readable by all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_out = tempfile.mkstemp(dir=out.parent, suffix=".o.tmp")
    os.close(fd)
    try:
        shutil.copyfile(obj, tmp_out)
        os.chmod(tmp_out, 0o644)
        os.replace(tmp_out, out)
    except BaseException:
        try:
            os.unlink(tmp_out)
        except OSError:
            pass
        raise
    return out


def defined_symbols(obj: Path):
    """Symbols an object file defines (``nm --defined-only``); None when nm is missing or fails."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    res = subprocess.run([nm, "--defined-only", str(obj)], capture_output=True, text=True)
    return [ln.split()[-1] for ln in res.stdout.splitlines() if ln.strip()] if res.returncode == 0 else None


def undefined_symbols(obj: Path) -> list:
    """Undefined symbols of an object file (``nm -u``; ``[]`` when nm is missing)."""
    nm = shutil.which("nm")
    if nm is None:
        return []
    res = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True)
    return [ln.split()[-1] for ln in res.stdout.splitlines() if ln.strip()]
