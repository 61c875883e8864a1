"""Mutation fuzzer for falcon-opt.

Takes the valid inputs in ``test/lit/**/*.mlir`` (split at ``// -----``,
comment lines dropped), mutates them (bytes and tokens: delete / duplicate /
swap lines, flip characters, change the numbers of shapes, including to 0, 1
and huge, swap element types, drop tokens, truncate; the cases are made in
``scripts/fuzz_opt_cases.py``), and runs falcon-opt's command line on each
(``python -m falcon_mlir.tools.falcon_opt``, one process per case,
``--jobs`` at a time, killed when it runs past ``--timeout``) with an
``lcma-rewrite`` option string drawn from a fixed list.

A case fails when:

* the process dies of a signal (a crash in native code);
* stderr holds ``Traceback``, ``internal error``, or an exception class name
  (``lcma-rewrite: IndexError: ...``), i.e. a bug rather than a diagnosis;
* it hangs (runs past ``--timeout`` seconds, default 20);
* the exit status is neither 0 nor 1, or it is 1 with nothing on stderr;
* it exits 0 and the output does not parse back, or it exits non-zero and
  the output file exists; or the input file changed.

Usage::

    python3 scripts/fuzz_opt.py --cases 1000 --seed 1 [--jobs 2] [--timeout 20]
                              [--save-dir fuzz-failures] [--verbose]

Prints the number of cases, of failures and of distinct failure signatures;
each failing input is saved as ``<save-dir>/<n>.mlir`` with ``<n>.txt``
(argv, exit status, stderr).  Exit status 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from falcon_mlir.cli import ArgumentParser, ToolError, run_tool
from falcon_mlir.files import write_files_atomic
from fuzz_opt_cases import LIT_DIR, Case, load_seeds, make_cases  # noqa: F401 - Case: the tests' too

#: Failures already known and pinned by a strict xfail in test/python/ (tools/test_falcon_opt.py,
#: passes/lcma_rewrite/test_unusual_ir.py):
#: reported on their own line, not counted as failures unless --strict.
KNOWN_BUGS: dict = {
    # pattern in stderr -> description of a known, not yet fixed bug (none now;
    # the int64 pad overflow and the K = 0 crash were fixed in the pass).
}

_EXC_NAME = re.compile(r"\b(?:[A-Z][a-zA-Z]*(?:Error|Exception)|KeyError|StopIteration|"
                       r"AssertionError|RecursionError)\b: ")


# --------------------------------------------------------------------------
# Running one case (a falcon-opt process)
# --------------------------------------------------------------------------

def falcon_opt_command() -> list:
    """How to start falcon-opt: the console script installed beside this
    Python, else ``python -m falcon_mlir.tools.falcon_opt``."""
    exe = os.path.join(os.path.dirname(sys.executable), "falcon-opt")
    if os.path.exists(exe):
        return [exe]
    return [sys.executable, "-m", "falcon_mlir.tools.falcon_opt"]


@dataclass
class Outcome:
    index: int
    rc: object
    stderr: str
    problem: Optional[str] = None
    seconds: float = 0.0
    argv: list = field(default_factory=list)

    @property
    def known(self) -> Optional[str]:
        """The KNOWN_BUGS description this failure matches, if any."""
        if not self.problem:
            return None
        for pattern, what in KNOWN_BUGS.items():
            if re.search(pattern, self.stderr):
                return what
        return None


def _classify(rc, stderr: str, out_path: str, out_exists: bool, input_changed: bool,
              allow_unregistered: bool) -> Optional[str]:
    if "Traceback" in stderr:
        return "traceback"
    if "internal error" in stderr:
        return "internal error"
    if _EXC_NAME.search(stderr):
        return "exception name in stderr"
    if input_changed:
        return "input file changed"
    if rc not in (0, 1):
        return f"exit status {rc}"
    if rc == 1:
        if not stderr.strip():
            return "exit 1 without a message"
        if out_exists:
            return "output file left after an error"
        return None
    if not out_exists:
        return "exit 0 without an output file"
    from iree.compiler import ir

    with open(out_path, "rb") as f:
        out = f.read()
    chunks = re.split(rb"(?m)^// -----\s*$", out)
    for ch in chunks:
        with ir.Context() as ctx:
            ctx.allow_unregistered_dialects = allow_unregistered
            try:
                ir.Module.parse(ch)
            except Exception as e:  # noqa: BLE001 - any failure to parse back
                return f"output does not parse back: {str(e).strip().splitlines()[0][:120]}"
    return None


def run_case(case: Case, workdir: str, timeout: float = 20.0, command=None) -> Outcome:
    """Run falcon-opt (``command``, default :func:`falcon_opt_command`) on one
    case in a process of its own; classify the outcome."""
    command = command or falcon_opt_command()
    if os.environ.get("FALCON_FUZZ_TEST_HANG") == str(case.index):  # test hook: hang on this case
        command = [sys.executable, "-c", "import time; time.sleep(3600)"]
    inp = os.path.join(workdir, f"in{case.index}.mlir")
    out = os.path.join(workdir, f"out{case.index}.mlir")
    with open(inp, "wb") as f:
        f.write(case.data)
    st = os.stat(inp)
    argv = [inp, "-o", out] + case.argv
    t0 = time.time()
    problem = None
    try:
        r = subprocess.run(command + argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=timeout)
        rc, stderr = r.returncode, r.stderr.decode("utf-8", "replace")
        if rc < 0:
            rc, problem = "crash", f"crashed (signal {-rc})"
    except subprocess.TimeoutExpired:
        rc, stderr, problem = "timeout", "", f"hang (> {timeout:g} s)"
    seconds = time.time() - t0
    with open(inp, "rb") as f:
        changed = f.read() != case.data or os.stat(inp).st_mtime_ns != st.st_mtime_ns
    if problem is None:
        problem = _classify(rc, stderr, out, os.path.exists(out), changed,
                            "--allow-unregistered-dialect" in case.argv)
    for p in (inp, out):
        try:
            os.unlink(p)
        except OSError:
            pass
    return Outcome(case.index, rc, stderr, problem, seconds, argv[1:])


# --------------------------------------------------------------------------
# The campaign
# --------------------------------------------------------------------------

def signature(o: Outcome) -> str:
    first = next((l for l in o.stderr.splitlines() if l.strip()), "")
    first = re.sub(r"^[^:]*:\d+:\d+: ", "", first)
    first = re.sub(r"\d+", "N", first)
    first = re.sub(r"'[^']*'", "'…'", first)
    return f"{o.problem.split(':')[0]} | {first[:140]}"


def _preload() -> None:
    """Import what falcon-opt runs on (the IREE compiler's Python bindings and
    falcon_mlir's passes and pipeline), so that a forked case starts warm."""
    import importlib
    import pkgutil

    for name in ("iree.compiler.ir", "iree.compiler.dialects.linalg", "falcon_mlir.passes",
                 "falcon_mlir.pipeline"):
        try:
            mod = importlib.import_module(name)
            for info in pkgutil.walk_packages(getattr(mod, "__path__", []), name + "."):
                importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - a module less preloaded is only slower
            pass


def _child(argv: list, err_fd: int) -> None:
    """In a forked process: ``python -m falcon_mlir.tools.falcon_opt ARGV``
    with stdin and stdout on /dev/null and stderr on ``err_fd``; never returns."""
    import runpy
    import traceback

    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(err_fd, 2)
    code = 1
    try:
        sys.argv = ["falcon-opt"] + argv
        runpy.run_module("falcon_mlir.tools.falcon_opt", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except BaseException:  # as the interpreter would: the traceback, status 1
        traceback.print_exc()
    try:
        sys.stderr.flush()
    finally:
        os._exit(code)


def _serve(conn, workdir: str, jobs: int, timeout: float) -> None:
    """The fork server: preload, then run the cases it is sent, ``jobs`` forked
    processes at a time, and send back ``(index, rc, stderr, out exists,
    input changed, seconds)`` per case. It never creates an MLIR context
    itself (forking a process with compiler threads is not safe)."""
    _preload()
    conn.send("ready")
    pending = list(reversed(conn.recv()))
    running: dict = {}  # pid -> (case, start, stderr file, input path, output path, input stat)
    while pending or running:
        while pending and len(running) < jobs:
            case = pending.pop()
            inp = os.path.join(workdir, f"in{case.index}.mlir")
            out = os.path.join(workdir, f"out{case.index}.mlir")
            with open(inp, "wb") as f:
                f.write(case.data)
            err = tempfile.TemporaryFile(dir=workdir)
            pid = os.fork()
            if pid == 0:
                if os.environ.get("FALCON_FUZZ_TEST_HANG") == str(case.index):  # test hook: hang
                    time.sleep(3600)
                _child([inp, "-o", out] + case.argv, err.fileno())
            running[pid] = (case, time.time(), err, inp, out, os.stat(inp))
        time.sleep(0.005)
        for pid, (case, start, err, inp, out, st) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            seconds = time.time() - start
            if not done and seconds <= timeout:
                continue
            if not done:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                rc = "timeout"
            else:
                rc = os.waitstatus_to_exitcode(status)
                rc = "crash" if rc < 0 else rc
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
            err.close()
            with open(inp, "rb") as f:
                changed = f.read() != case.data or os.stat(inp).st_mtime_ns != st.st_mtime_ns
            conn.send((case.index, rc, stderr, os.path.exists(out), changed, min(seconds, timeout)))
            del running[pid]


def fuzz(cases: list, jobs: int, timeout: float, verbose: bool = False) -> list:
    """Run every case, ``jobs`` falcon-opt processes at a time; returns the
    list of :class:`Outcome` in case order (failures have ``problem``).

    Each case is a process of its own running ``python -m
    falcon_mlir.tools.falcon_opt`` on it, forked from a server process that
    imported the compiler bindings and falcon_mlir's passes once (a cold
    start per case would cost about a second more); where ``os.fork`` is
    missing, cold processes (:func:`run_case`)."""
    if not hasattr(os, "fork"):
        with tempfile.TemporaryDirectory(prefix="falcon-fuzz-") as workdir, \
                ThreadPoolExecutor(max(1, jobs)) as pool:
            return sorted(pool.map(lambda c: run_case(c, workdir, timeout), cases), key=lambda o: o.index)
    import multiprocessing as mp

    by_index = {c.index: c for c in cases}
    results: list = []
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="falcon-fuzz-") as workdir:
        conn, child = ctx.Pipe()
        server = ctx.Process(target=_serve, args=(child, workdir, max(1, jobs), timeout), daemon=True)
        server.start()
        child.close()
        try:
            if not conn.poll(300):
                raise RuntimeError("fuzz_opt: fork server did not start")
            conn.recv()
            conn.send(cases)
            for _ in cases:
                index, rc, stderr, out_exists, changed, seconds = conn.recv()
                case = by_index[index]
                out = os.path.join(workdir, f"out{index}.mlir")
                if rc == "timeout":
                    problem = f"hang (> {timeout:g} s)"
                elif rc == "crash":
                    problem = "crashed (killed by a signal)"
                else:
                    problem = _classify(rc, stderr, out, out_exists, changed,
                                        "--allow-unregistered-dialect" in case.argv)
                for p in (os.path.join(workdir, f"in{index}.mlir"), out):
                    try:
                        os.unlink(p)
                    except OSError:
                        pass
                o = Outcome(index, rc, stderr, problem, seconds, ["-o", out] + case.argv)
                results.append(o)
                if verbose:
                    print(f"[{o.index}] rc={o.rc} {o.seconds:.2f}s {o.problem or ''}", flush=True)
        finally:
            server.kill()
            server.join(5)
    results.sort(key=lambda o: o.index)
    return results


def main(argv=None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    return run_tool("fuzz_opt", _main, argv)


def _main(argv: list) -> int:
    p = ArgumentParser(prog="fuzz_opt", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    p.add_argument("--save-dir", default="fuzz-failures")
    p.add_argument("--lit-dir", default=LIT_DIR)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--strict", action="store_true", help="count known bugs (KNOWN_BUGS) as failures")
    args = p.parse_args(argv)
    try:
        seeds = load_seeds(args.lit_dir)
    except (OSError, ValueError) as e:
        raise ToolError(f"fuzz_opt: error: {e}") from None

    cases = make_cases(args.cases, args.seed, seeds)
    t0 = time.time()
    results = fuzz(cases, args.jobs, args.timeout, args.verbose)
    failures = [o for o in results if o.problem and (args.strict or not o.known)]
    known = [o for o in results if o.problem and o.known and not args.strict]
    by_index = {c.index: c for c in cases}
    sigs: dict = {}
    for o in failures:
        sigs.setdefault(signature(o), []).append(o.index)
    if failures or known:
        os.makedirs(args.save_dir, exist_ok=True)
        for o in failures + known:
            base = os.path.join(args.save_dir, str(o.index))
            write_files_atomic([(base + ".mlir", by_index[o.index].data), (base + ".txt", (
                f"argv: falcon-opt {o.index}.mlir {' '.join(repr(a) for a in o.argv)}\n"
                f"rc: {o.rc}\nproblem: {o.problem}\nseconds: {o.seconds:.2f}\n"
                f"stderr:\n{o.stderr}").encode())])
    rcs: dict = {}
    for o in results:
        rcs[str(o.rc)] = rcs.get(str(o.rc), 0) + 1
    print(f"fuzz_opt: {len(results)} cases (seed {args.seed}) in {time.time() - t0:.1f} s; "
          f"exit statuses {dict(sorted(rcs.items()))}; {len(failures)} failures, "
          f"{len(sigs)} distinct; {len(known)} known")
    known_kinds: dict = {}
    for o in known:
        known_kinds.setdefault(o.known, []).append(o.index)
    for what, idx in known_kinds.items():
        print(f"  {len(idx):4d} x known: {what}  (e.g. {args.save_dir}/{idx[0]}.mlir)")
    for sig, idx in sorted(sigs.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(idx):4d} x {sig}  (e.g. {args.save_dir}/{idx[0]}.mlir)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
