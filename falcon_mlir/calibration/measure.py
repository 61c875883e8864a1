#!/usr/bin/env python3
"""The measuring half of falcon-calibrate: run a prepared bundle's modules,
time them and assemble the hardware profile.

Runs where falcon_mlir may be missing (the GPU machine of ``falcon-calibrate
--prepare DIR``): it needs only Python, numpy and ``iree.runtime``. The
bundle carries this file as ``calibrate_run.py`` and unmodified copies of the
standalone library modules it imports (:mod:`falcon_mlir.cli`,
:mod:`falcon_mlir.compare`, :mod:`falcon_mlir.dtypes`, :mod:`falcon_mlir.files`,
:mod:`falcon_mlir.calibration.assemble`, see :mod:`falcon_mlir.bundles`);
there::

    python3 DIR/calibrate_run.py DIR -o PROFILE.json [--raw RAW.json]

Timing (:func:`time_calls`): one checked call and one warm-up call, then the
call repeated enough times to fill ``seconds`` (at least 3); the median is
taken. Inputs are on the device before timing; a call returns when the
device is done (IREE's synchronous function ABI); results stay on the device.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

try:  # falcon_mlir installed
    from falcon_mlir.calibration.assemble import (FORMAT, CalibrationError, check_profile, profile_dict,
                                                  summary)
    from falcon_mlir.cli import ArgumentParser, ToolError, error_line, run_tool
    from falcon_mlir.compare import rel_err
    from falcon_mlir.dtypes import np_type
    from falcon_mlir.files import unwritable_reason, write_atomic
except ImportError:  # calibrate_run.py in a bundle: the copies beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from falcon_calibrate_assemble import FORMAT, CalibrationError, check_profile, profile_dict, summary
    from falcon_cli import ArgumentParser, ToolError, error_line, run_tool
    from falcon_compare import rel_err
    from falcon_dtypes import np_type
    from falcon_files import unwritable_reason, write_atomic

PROG = "falcon-calibrate"
#: File names in a bundle: this file, the manifest.
RUNNER = "calibrate_run.py"
MANIFEST = "manifest.json"
#: Strassen's U (coefficients of A11, A12, A21, A22 in each of the R = 7 products).
STRASSEN_U = {
    "a11": [1, 0, 1, 0, 1, -1, 0],
    "a12": [0, 0, 0, 0, 1, 0, 1],
    "a21": [0, 1, 0, 0, 0, 1, 0],
    "a22": [1, 1, 0, 1, 0, 0, -1],
}
#: Relative error (max-norm vs float64) a GEMM's first result must stay under.
GEMM_TOL = {"f32": 1e-3, "f16": 5e-2, "bf16": 5e-2, "f64": 1e-10, "i8": 0.0}
#: Seconds per dispatch assumed where the chain of dispatches times no slower than one dispatch (the
#: smallest overhead measured through the rewrite's fence on the development host, 0.05 us).
DISPATCH_FLOOR_S = 5e-8


class Progress:
    """A progress bar (tqdm when installed and stderr is a terminal), else one line per step."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        self.total, self.desc, self.i, self.enabled = total, desc, 0, enabled
        self._bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                size = shutil.get_terminal_size((100, 24))  # a pty may report 0 x 0
                self._bar = tqdm(total=total, desc=f"{PROG} {desc}", unit="step", file=sys.stderr,
                                 ncols=max(60, min(size.columns or 100, 120)), nrows=max(size.lines, 5))
            except ImportError:
                pass

    def step(self, text: str) -> None:
        """One step done; ``text`` says which."""
        self.i += 1
        if self._bar is not None:
            self._bar.set_postfix_str(text[:60], refresh=False)
            self._bar.update(1)
        elif self.enabled:
            print(f"[{PROG}] {self.desc} {self.i}/{self.total}: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Remove the bar."""
        if self._bar is not None:
            self._bar.close()


def is_int(t: str) -> bool:
    """Whether MLIR element type ``t`` is an integer (``i8``, ``i32``)."""
    return t.startswith("i")


def fill(rng, shape, t: str) -> np.ndarray:
    """Random values (never zeros) of MLIR type ``t``; large arrays tile a 1 Mi random pattern."""
    size = int(np.prod(shape))
    k = min(size, 1 << 20)
    if is_int(t):
        base = rng.integers(-100, 100, size=k, dtype=np.int16)
        base[base == 0] = 7
    else:
        base = (rng.random(k, dtype=np.float32) + 0.5)
        base *= np.where(rng.random(k) < 0.5, -1.0, 1.0).astype(np.float32)
    arr = np.resize(base, size) if size > k else base
    return arr.reshape(shape).astype(np_type(t))


def _timed(fn, args) -> float:
    """Seconds of one call (its result dropped at once: it may hold device memory)."""
    t0 = time.perf_counter()
    res = fn(*args)
    t = time.perf_counter() - t0
    del res
    return t


def _reps(est: float, seconds: float, min_reps: int, max_reps: int = 100000) -> int:
    """Calls of ``est`` seconds each that fill ``seconds``, within [min_reps, max_reps]."""
    return int(min(max_reps, max(min_reps, math.ceil(seconds / max(est, 1e-7)))))


def time_calls(fn, args, seconds: float, min_reps: int = 3, max_reps: int = 100000) -> list:
    """Call times in seconds: one warm-up call, then enough calls for ``seconds``."""
    _timed(fn, args)
    reps = _reps(_timed(fn, args), seconds, min_reps, max_reps)
    return [_timed(fn, args) for _ in range(reps)]


def time_pair(fa, fb, args, seconds: float, min_reps: int = 5) -> tuple:
    """Alternating calls of ``fa`` and ``fb`` (drift hits both): two lists of seconds."""
    _timed(fa, args)
    _timed(fb, args)
    reps = _reps(_timed(fb, args), seconds / 2, min_reps)
    ta, tb = [], []
    for _ in range(reps):
        ta.append(_timed(fa, args))
        tb.append(_timed(fb, args))
    return ta, tb


def _median(xs) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def check_device(driver: str) -> None:
    """Open IREE's ``driver`` once, before minutes of compiling for it.

    Raises:
        CalibrationError: no such device here (one line).
    """
    import iree.runtime as rt

    try:
        rt.Config(driver)
    except Exception as e:
        raise CalibrationError(f"cannot open IREE device '{driver}': {error_line(e)}") from None


class _Run:
    """One bundle being measured: the runtime, device, inputs' generator, raw results."""

    def __init__(self, rt, bundle: Path, driver: str, seconds: float, bar):
        self.rt, self.bundle, self.seconds, self.bar = rt, bundle, seconds, bar
        try:
            self.config = rt.Config(driver)
        except Exception as e:
            raise CalibrationError(f"cannot open IREE device '{driver}': {error_line(e)}") from None
        self.rng = np.random.default_rng(20261130)
        self.raw: dict = {"gemm": {}, "add": {}, "dispatch": {}, "forms": {}}

    def load(self, m: dict):
        """The function of manifest entry ``m`` (its sha256 checked)."""
        vmfb = (self.bundle / m["file"]).read_bytes()
        if hashlib.sha256(vmfb).hexdigest() != m["sha256"]:
            raise CalibrationError(f"{m['file']}: sha256 mismatch (bundle damaged)")
        ctx = self.rt.SystemContext(config=self.config)
        vm = self.rt.VmModule.copy_buffer(ctx.instance, vmfb)
        ctx.add_vm_module(vm)
        return ctx.modules[vm.name][m["function"]]

    def dev(self, x):
        return self.rt.asdevicearray(self.config.device, x)

    def step(self, text: str) -> None:
        if self.bar:
            self.bar.step(text)

    def gemm(self, m: dict, fn) -> None:
        """FLOP/s = 2 n^3 / median; the first result's 64 random rows checked."""
        n, tin = m["n"], m["in"]
        a, b = fill(self.rng, (n, n), tin), fill(self.rng, (n, n), tin)
        args = [self.dev(a), self.dev(b)]
        rows = np.sort(self.rng.choice(n, size=min(64, n), replace=False))
        out = np.asarray(fn(*args).to_host())[rows]
        err = rel_err(out, a[rows].astype(np.float64) @ b.astype(np.float64))
        if not err <= GEMM_TOL[m["dtype"]]:
            raise CalibrationError(f"gemm {m['dtype']} n={n}: wrong result (relative error {err:.2e})")
        del a, b, out
        ts = time_calls(fn, args, self.seconds)
        med = _median(ts)
        rate = 2.0 * n ** 3 / med
        self.raw["gemm"].setdefault(m["dtype"], []).append(
            {"n": n, "median_s": med, "min_s": min(ts), "reps": len(ts), "flops": rate,
             "rel_err": err, "tiles": m.get("tiles")})
        self.step(f"gemm {m['dtype']} {n}: {rate / 1e9:.1f} GFLOP/s")

    def add(self, m: dict, fn) -> None:
        """FLOP/s = 2 * 4 * elements * chain / median."""
        el, ch = m["elements"], m["chain"]
        args = [self.dev(fill(self.rng, (el,), m["in"])) for _ in range(4)]
        out = np.asarray(fn(*args).to_host())
        if out.shape != (el,) or (not is_int(m["acc"]) and not np.all(np.isfinite(out.astype(np.float64)))):
            raise CalibrationError(f"add {m['dtype']}: bad result")
        ts = time_calls(fn, args, self.seconds)
        med = _median(ts)
        rate = 2.0 * 4 * el * ch / med
        self.raw["add"][m["dtype"]] = {"elements": el, "chain": ch, "dispatches": m.get("dispatches"),
                                       "median_s": med, "reps": len(ts), "flops": rate}
        self.step(f"add {m['dtype']}: {rate / 1e9:.1f} GFLOP/s")

    def bandwidth(self, m: dict, fn) -> None:
        """bytes/s = (2 read + 1 written) * 4 * elements / median."""
        el = m["elements"]
        a, b = fill(self.rng, (el,), "f32"), fill(self.rng, (el,), "f32")
        args = [self.dev(a), self.dev(b)]
        if not np.array_equal(np.asarray(fn(*args).to_host()), a + b):
            raise CalibrationError("bandwidth module: wrong result")
        del a, b
        ts = time_calls(fn, args, self.seconds)
        med = _median(ts)
        bw = 3.0 * 4 * el / med
        self.raw["bandwidth"] = {"elements": el, "bytes": 12 * el, "median_s": med, "reps": len(ts),
                                 "bytes_per_s": bw}
        self.step(f"bandwidth: {bw / 1e9:.1f} GB/s")

    def form(self, m: dict, fn) -> None:
        """A combine form's achieved bytes/s (bytes as the module docstring of
        :mod:`falcon_mlir.calibration.microbench` counts them)."""
        role, bsz = m["role"], m["block"]
        a = fill(self.rng, (2 * bsz, 2 * bsz), "f32")
        args = [self.dev(a)]
        out = np.asarray(fn(*args).to_host())
        blk = {"a11": a[:bsz, :bsz], "a12": a[:bsz, bsz:], "a21": a[bsz:, :bsz], "a22": a[bsz:, bsz:]}
        if role == "per_product":
            ok = np.allclose(out, blk["a11"] + blk["a22"], rtol=1e-6, atol=1e-6)
            nbytes = 3 * 4 * bsz * bsz
        else:
            R = m["R"]
            ok = out.shape == (R, bsz, bsz)
            for r in range(R) if ok else ():
                ref = sum(STRASSEN_U[k][r] * blk[k][:64].astype(np.float64) for k in STRASSEN_U)
                ok = ok and np.allclose(out[r, :64], ref, rtol=1e-5, atol=1e-5)
            nbytes = (R * m["used"] + R) * 4 * bsz * bsz
        if not ok:
            raise CalibrationError(f"{role} combine module: wrong result")
        del a, out, blk
        ts = time_calls(fn, args, self.seconds)
        med = _median(ts)
        self.raw["forms"][role] = {"block": bsz, "bytes": nbytes, "median_s": med, "reps": len(ts),
                                   "bytes_per_s": nbytes / med}
        self.step(f"{role} combine: {nbytes / med / 1e9:.1f} GB/s")

    def dispatch(self, disp: list) -> None:
        """Seconds per dispatch: (median_65 - median_1) / (65 - 1), timed alternately."""
        fa, fb = self.load(disp[0]), self.load(disp[1])
        args = [self.dev(fill(self.rng, (disp[0]["elements"],), "f32"))]
        ta, tb = time_pair(fa, fb, args, 2 * self.seconds)
        ma, mb = _median(ta), _median(tb)
        da, db = disp[0].get("dispatches", disp[0]["count"]), disp[1].get("dispatches", disp[1]["count"])
        slope = (mb - ma) / (db - da)
        # Chained through the rewrite's fence a dispatch costs 0.05-1.4 us here, so on a loaded machine
        # the 65-dispatch chain can time at or below the single one: that is "below what this measures",
        # not an error (it failed falcon-calibrate and its test under load); the floor is recorded as such.
        per = slope if slope > DISPATCH_FLOOR_S else DISPATCH_FLOOR_S
        self.raw["dispatch"] = {"dispatches": [da, db], "median_s": [ma, mb], "reps": len(ta),
                                "per_dispatch_s": per, "slope_s": slope, "floored": per != slope, "call_s": ma}
        for m in disp:
            self.step(f"dispatch chain of {m['count']}")
        if per != slope:
            self.step(f"dispatch overhead below this measurement ({db} dispatches {mb * 1e6:.1f} us, {da} "
                      f"{ma * 1e6:.1f} us): {DISPATCH_FLOOR_S * 1e6:.2f} us assumed")


def read_manifest(bundle) -> dict:
    """The manifest of a bundle folder.

    Raises:
        CalibrationError: missing, unreadable, or not a falcon-calibrate bundle of :data:`FORMAT`.
    """
    path = Path(bundle) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CalibrationError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("tool") != PROG:
        raise CalibrationError(f"{path} is not a {PROG} bundle of format {FORMAT}")
    return manifest


def run_bundle(bundle, *, driver=None, seconds=None, name=None, progress=None) -> tuple:
    """Measure every module of ``bundle`` on IREE HAL ``driver`` (default: the
    bundle's device), ``seconds`` per measurement (default: the bundle's).

    Returns:
        ``(profile dict, raw results dict)``; the profile in the format of
        :mod:`falcon_mlir.decision.profile` (``source: "measured"``).

    Raises:
        CalibrationError: a module failed to load or run, or computed a wrong result.
    """
    try:
        import iree.runtime as rt
    except ImportError as e:
        raise CalibrationError(f"cannot import iree.runtime (pip install iree-base-runtime): {e}") from None
    manifest = read_manifest(bundle)
    driver = driver or manifest["device"]
    seconds = float(seconds if seconds is not None else manifest.get("seconds", 0.75))
    mods = manifest["modules"]
    bar = progress(len(mods), "measure") if progress else None
    try:
        run = _Run(rt, Path(bundle), driver, seconds, bar)
        # Bandwidth first: the forms are fractions of it.
        order = sorted(mods, key=lambda m: {"bandwidth": 0, "dispatch": 1}.get(m["role"], 2))
        measure = {"gemm": run.gemm, "add": run.add, "bandwidth": run.bandwidth,
                   "per_product": run.form, "grouped": run.form}
        for m in order:
            if m["role"] != "dispatch":
                measure[m["role"]](m, run.load(m))
        disp = [m for m in order if m["role"] == "dispatch"]
        if len(disp) == 2:
            run.dispatch(disp)
    except CalibrationError:
        raise
    except Exception as e:
        raise CalibrationError(f"running the benchmarks on '{driver}' failed: {error_line(e)}") from None
    finally:
        if bar:
            bar.close()
    raw = run.raw
    profile = profile_dict(manifest, raw, driver, name, rt)
    raw["manifest"] = {k: v for k, v in manifest.items() if k != "modules"}
    raw["modules"] = manifest["modules"]
    return profile, raw


def write_json(path, data: dict) -> None:
    """``data`` as indented JSON to ``path``, atomically.

    Raises:
        OSError: the file cannot be written.
    """
    write_atomic(str(path), (json.dumps(data, indent=1) + "\n").encode())


def check_output(option: str, path: str) -> None:
    """Fail early when ``path`` cannot be written as a file.

    Raises:
        ToolError: ``PROG: error: OPTION PATH: why`` with status 2; ``-`` too (stdout
            holds the summary: it is not an output file here; was: a file named ``-``).
    """
    if path == "-":
        raise ToolError(f"{PROG}: error: {option} -: stdout is not an output file here (the summary goes "
                        "there); give a file name", 2)
    why = unwritable_reason(path)
    if why:
        raise ToolError(f"{PROG}: error: {option} {path}: {why}", 2)


def runner_main(argv=None) -> int:
    """``python3 DIR/calibrate_run.py DIR -o PROFILE.json``: measure a prepared
    bundle. Exit status 0; 2 bad arguments; 1 a failed run (one line, no file)."""
    return run_tool(PROG, _runner_body, argv)


def _runner_body(argv: list) -> int:
    p = ArgumentParser(prog=RUNNER, usage_status=2,
                       description="measure a falcon-calibrate bundle (numpy + iree.runtime only)")
    p.add_argument("bundle")
    p.add_argument("-o", "--output", required=True, help="profile JSON to write")
    p.add_argument("--raw", help="also write the raw measurements (JSON)")
    p.add_argument("--driver", help="IREE HAL driver (default: the bundle's device)")
    p.add_argument("--seconds", type=float, help="time per measurement (default: the bundle's)")
    p.add_argument("--name", help="profile name (default: the bundle's, else the output's stem)")
    args = p.parse_args(argv)
    if args.seconds is not None and not args.seconds > 0:
        raise ToolError(f"{PROG}: error: --seconds must be > 0", 2)
    check_output("-o", args.output)
    if args.raw:
        check_output("--raw", args.raw)
    try:
        name = args.name
        if not name:
            try:
                name = json.loads((Path(args.bundle) / MANIFEST).read_text()).get("name")
            except (OSError, ValueError, AttributeError):
                name = None
        name = name or Path(args.output).stem
        t0 = time.perf_counter()
        profile, raw = run_bundle(args.bundle, driver=args.driver, seconds=args.seconds, name=name,
                                  progress=lambda total, desc: Progress(total, desc))
        check_profile(profile)
        raw["wall_s"] = time.perf_counter() - t0
        if args.raw:
            write_json(args.raw, raw)
        write_json(args.output, profile)
    except CalibrationError as e:
        raise ToolError(f"{PROG}: error: {error_line(e)}") from None
    except OSError as e:
        raise ToolError(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}") from None
    print(summary(profile, raw))
    print(f"wrote {args.output} ({raw['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(runner_main())
