"""Triton compiles in a child process: after TensorFlow, in batches, none when cached, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from kernel_helpers import have, skip_without

from falcon_mlir.kernels import _worker, aot
from falcon_mlir.kernels.configs import KernelConfig
from falcon_mlir.kernels.spec import GemmSpec

SPEC = GemmSpec(256, 256, 128)


@skip_without("triton", "tensorflow")
def test_compile_after_tensorflow(tmp_path):
    """Importing triton after tensorflow aborts a process (both ship LLVM); compile_kernel must not."""
    code = textwrap.dedent("""
        import sys
        import tensorflow
        from falcon_mlir.kernels import GemmSpec, compile_kernel
        k = compile_kernel(GemmSpec(256, 256, 128), cache=False)
        assert k.cubin[:4] == b"\\x7fELF" and sys.modules.get("triton") is None
        print("OK", len(k.cubin))
    """)
    env = dict(os.environ, FALCON_KERNEL_CACHE=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-2000:]


@skip_without("triton")
def test_batch_in_one_child_and_none_when_cached(monkeypatch):
    calls = []
    real = _worker.run_jobs

    def counting(jobs, timeout=None):
        calls.append(len(jobs))
        return real(jobs, timeout)
    monkeypatch.setattr(_worker, "run_jobs", counting)
    items = [(SPEC, KernelConfig.parse("64x64x32,s2,w4,g4")), (SPEC, KernelConfig.parse("64x128x32,s2,w4,g4"))]
    first = aot.compile_kernels(items)
    assert calls == [2]  # both kernels in one child
    again = aot.compile_kernels(items)
    assert calls == [2]  # all cached: no child at all
    assert all(k.from_cache for k in again) and [k.cubin for k in again] == [k.cubin for k in first]
    assert sys.modules.get("triton") is None


@skip_without("triton")
def test_failures_are_one_line_and_do_not_stop_the_batch(tmp_path):
    bad = tmp_path / "bad_kernel.py"
    bad.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                   "def broken(x_ptr, N: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, N), undefined_name)\n")
    job = {"kind": "source", "path": str(bad), "fn": "broken", "signature": {"x_ptr": "*fp32"},
           "constexprs": {"N": 16}, "pointers": 1, "options": {"num_warps": 4}, "capability": 90,
           "label": "combine A of the test"}
    gemm = aot.gemm_request(SPEC, KernelConfig.parse("64x64x32,s2,w4,g4")).job
    results = _worker.run_jobs([job, {"kind": "nope"}, gemm])
    assert not results[0]["ok"] and results[0]["error"].startswith("Triton failed to compile combine A of the test: ")
    assert "\n" not in results[0]["error"] and "undefined_name" in results[0]["error"]
    assert results[1] == {"ok": False, "error": "unknown job kind 'nope'"}
    assert results[2]["ok"] and results[2]["num_programs"] == 16


def test_shared_memory_error_names_spec_and_config():
    md = {"num_ctas": 1, "cluster_dims": [1, 1, 1], "num_warps": 8, "shared": 262176}
    with pytest.raises(ValueError, match=r"^bf16_256x256x128_nn_obf16 with 128x256x64,s4,w8,g8 needs 262176 bytes"):
        aot.check_launchable(f"{SPEC.name} with 128x256x64,s4,w8,g8", md)


def test_worker_crash_is_one_line(monkeypatch):
    monkeypatch.setattr(_worker.sys, "executable", "/bin/false")
    with pytest.raises(_worker.WorkerError, match=r"^Triton worker failed \(exit 1\) compiling 1 kernel\(s\): "):
        _worker.run_jobs([{"kind": "gemm"}])
    assert _worker.run_jobs([]) == []


def test_triton_version_without_importing_it():
    if have("triton"):
        assert aot.triton_version() == aot.TRITON_VERSION
    assert sys.modules.get("triton") is None


def test_one_line_is_ptxas_own_error_not_the_repro_command():
    """Was: '...: Repro command: .../ptxas -lineinfo -v --bogus-flag ...' (Triton's last line says nothing)."""
    e = RuntimeError("PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\n"
                     "ptxas fatal   : Unknown option '-bogus-flag'\n\nRepro command: /x/ptxas -lineinfo -v "
                     "--bogus-flag --gpu-name=sm_90a /tmp/t.ptx -o /tmp/t.ptx.o\n")
    assert _worker._one_line(e) == "ptxas fatal   : Unknown option '-bogus-flag'"
    # A compilation error's message is its last line (after the source excerpt).
    assert _worker._one_line(RuntimeError("at 3:4:\n    tl.store(x, y)\n    ^\nNameError('y is not defined')")) \
        == "NameError('y is not defined')"


def test_damaged_cache_entries_are_compiled_again_never_trusted(tmp_path, monkeypatch):
    """Were: JSON null / a number / a string in an entry raised AttributeError ('internal error' in
    falcon-opt), and an entry whose cubin was cut short was embedded as it was (a module that fails on
    the GPU). Entries now carry their cubin's SHA-256."""
    import base64
    import json

    from kernel_helpers import fake_kernel

    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path))
    k = fake_kernel(SPEC)
    compiles = []

    def run_jobs(jobs, timeout=None):
        compiles.append(len(jobs))
        return [{"ok": True}] * len(jobs)
    monkeypatch.setattr(_worker, "run_jobs", run_jobs)
    req = aot.CompileRequest(key="entry", job={}, build=lambda r: k, load=aot.CompiledKernel._from_json,
                             dump=lambda x: x._to_json())
    assert aot.compile_batch([req]) == [k] and compiles == [1]
    good = (tmp_path / "entry.json").read_text()
    assert aot.compile_batch([req])[0].from_cache and compiles == [1]  # the entry is read back
    d = json.loads(good)
    short = dict(d, cubin=base64.b64encode(base64.b64decode(d["cubin"])[:100]).decode())
    for damaged in ("null", "42", '"text"', "[1, 2]", "{not json", json.dumps(short),
                    json.dumps({key: v for key, v in d.items() if key != "cubin_sha256"})):
        (tmp_path / "entry.json").write_text(damaged)
        n = len(compiles)
        out = aot.compile_batch([req])
        assert out == [k] and len(compiles) == n + 1, damaged
        assert (tmp_path / "entry.json").read_text() == good  # and overwritten


def test_generated_sources_go_elsewhere_when_the_cache_cannot_be_written(tmp_path, monkeypatch):
    """Was: a kernel-form plan with $FALCON_KERNEL_CACHE on a file (or a read-only folder) failed with
    'NotADirectoryError: ... /sources' (an internal error of falcon-kernels): 'a read-only cache only
    costs the cache'."""
    from falcon_mlir.kernels import lcma

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(blocker))
    p = lcma.source_path("# generated\n")
    assert p.read_text() == "# generated\n" and blocker not in p.parents
    assert lcma.source_path("# generated\n") == p
