"""Assembling a measured hardware profile: this machine's CPU or GPU, the
profile dict from falcon-calibrate's raw measurements, its checks and a
summary for humans.

Imports only the standard library (numpy not even), so that the measuring
half (:mod:`falcon_mlir.calibration.measure`, ``calibrate_run.py`` in a
bundle) can run on a machine without falcon_mlir with a copy of this file
(see :mod:`falcon_mlir.bundles`).
"""

from __future__ import annotations

import datetime
import math
import os
import platform
from pathlib import Path

__all__ = ["FORMAT", "CalibrationError", "iree_version", "cpu_info", "gpu_info", "profile_dict",
           "check_profile", "summary"]

#: Format of a bundle's manifest and of the profile.
FORMAT = 1


class CalibrationError(Exception):
    """A compile or run failed, or a result was wrong (one line for the user)."""


def iree_version(dist: str) -> str:
    """The installed version of distribution ``dist`` (``iree-base-runtime``), or ``?``."""
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "?"


def cpu_info() -> dict:
    """``{"model", "cores", "caches"}`` of this CPU (/proc/cpuinfo, /sys; cache sizes in bytes)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    model = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    caches = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in sorted(base.glob("index*")):
            if (idx / "type").read_text().strip() == "Instruction":
                continue
            level = (idx / "level").read_text().strip()
            size = (idx / "size").read_text().strip()
            mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:], 1)
            caches["l1d" if level == "1" else f"l{level}"] = int(size.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    return {"model": model, "cores": os.cpu_count() or 0, "caches": caches}


def gpu_info(rt) -> dict:
    """GPU name, SM count and L2 bytes: CUDA driver API through ctypes, else IREE/nvidia-smi."""
    info = {"model": "?", "cores": 0, "caches": {}}
    try:
        import ctypes
        cu = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        if cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0:
            buf = ctypes.create_string_buffer(256)
            if cu.cuDeviceGetName(buf, 256, dev) == 0:
                info["model"] = buf.value.decode()
            val = ctypes.c_int()
            if cu.cuDeviceGetAttribute(ctypes.byref(val), 16, dev) == 0:  # MULTIPROCESSOR_COUNT
                info["cores"] = val.value
            if cu.cuDeviceGetAttribute(ctypes.byref(val), 38, dev) == 0:  # L2_CACHE_SIZE
                info["caches"] = {"l2": val.value}
    except Exception:
        pass
    if info["model"] == "?":
        try:
            devs = rt.get_driver("cuda").query_available_devices()
            info["model"] = devs[0].get("name") or "?"
        except Exception:
            pass
    if info["model"] == "?":
        try:
            import subprocess
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip()
            info["model"] = out.splitlines()[0] if out else "?"
        except Exception:
            pass
    return info


def profile_dict(manifest: dict, raw: dict, driver: str, name, rt) -> dict:
    """The profile (a dict of :mod:`falcon_mlir.decision.profile`'s format) from
    the raw measurements: FLOP/s per GEMM size and dtype, add FLOP/s, bytes/s,
    seconds per dispatch, combine forms as fractions of the bandwidth."""
    kind = "cpu" if driver == "local-task" else "gpu"
    hw = cpu_info() if kind == "cpu" else gpu_info(rt)
    bw = raw["bandwidth"]["bytes_per_s"]
    dtypes = {}
    for dt, pts in raw["gemm"].items():
        dtypes[dt] = {"gemm": [[p["n"], p["flops"]] for p in sorted(pts, key=lambda p: p["n"])]}
        if dt in raw["add"]:
            dtypes[dt]["add"] = raw["add"][dt]["flops"]
    forms = {}
    if "per_product" in raw["forms"]:
        forms["per_product_combine"] = raw["forms"]["per_product"]["bytes_per_s"] / bw
    if "grouped" in raw["forms"]:
        forms["grouped_combine"] = raw["forms"]["grouped"]["bytes_per_s"] / bw
    unit = "SMs" if kind == "gpu" else "cores"
    tiles = sorted({t for m in manifest["modules"] for t in (m.get("tiles") or [])})
    flags = " ".join(f for f in manifest["flags"] if "target-device" not in f and "backends" not in f)
    prov = (f"falcon-calibrate{' --quick' if manifest.get('quick') else ''} on {hw['model']} "
            f"({hw['cores']} {unit}), device {driver}, iree-base-runtime {iree_version('iree-base-runtime')}, "
            f"compiled by iree-base-compiler {manifest.get('iree_compiler', '?')} with {flags}"
            + (f" and falcon tile choices ({', '.join(tiles)})" if tiles else "")
            + f", {datetime.date.today().isoformat()}")
    return {
        "format": FORMAT, "name": name or manifest.get("name") or f"{kind}-measured",
        "source": "measured", "provenance": prov, "kind": kind, "device": driver,
        "cores": int(hw["cores"]), "bandwidth": bw,
        "dispatch_overhead": raw["dispatch"]["per_dispatch_s"],
        "caches": hw["caches"], "dtypes": dtypes, "forms": forms,
    }


def check_profile(d: dict) -> None:
    """The checks that matter when falcon_mlir is not importable: positive finite numbers.

    Raises:
        CalibrationError: a figure that is not a positive number.
    """
    def pos(v, what):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise CalibrationError(f"measured {what} is not a positive number: {v!r}")
    pos(d["bandwidth"], "bandwidth")
    pos(d["dispatch_overhead"], "dispatch_overhead")
    for dt, e in d["dtypes"].items():
        for n, r in e["gemm"]:
            pos(r, f"dtypes.{dt}.gemm[{n}]")
        if "add" in e:
            pos(e["add"], f"dtypes.{dt}.add")
    for k, v in d["forms"].items():
        pos(v, f"forms.{k}")


def summary(profile: dict, raw: dict) -> str:
    """A few lines for humans: the figures of the profile."""
    out = [f"profile {profile['name']} ({profile['device']}): {profile['provenance']}"]
    for dt, e in profile["dtypes"].items():
        pts = ", ".join(f"{int(n)}: {r / 1e9:.1f}" for n, r in e["gemm"])
        out.append(f"  {dt} gemm GFLOP/s  {pts}")
        if "add" in e:
            out.append(f"  {dt} add  {e['add'] / 1e9:.1f} GFLOP/s")
    out.append(f"  bandwidth {profile['bandwidth'] / 1e9:.1f} GB/s")
    d = raw.get("dispatch", {})
    out.append(f"  dispatch overhead {profile['dispatch_overhead'] * 1e6:.2f} us per dispatch "
               f"(one call of 1 dispatch: {d.get('call_s', float('nan')) * 1e6:.1f} us)")
    out.append("  forms " + ", ".join(f"{k} {v:.2f}" for k, v in profile["forms"].items()))
    return "\n".join(out)
