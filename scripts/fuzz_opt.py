"""Mutation fuzzer for falcon-opt.

Takes the valid inputs in ``test/lit/*.mlir`` (split at ``// -----``, comment
lines dropped), mutates them (bytes and tokens: delete / duplicate / swap
lines, flip characters, change the numbers of shapes, including to 0, 1 and
huge, swap element types, drop tokens, truncate), and runs falcon-opt's
``main()`` in worker processes (imported once, one case at a time, killed
and replaced when a case runs past ``--timeout``) with an ``lcma-rewrite``
option string drawn from a fixed list.

A case fails when:

* ``main()`` raises (any exception, SystemExit included) or the worker dies
  (a crash in native code);
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

import argparse
import glob
import multiprocessing as mp
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
LIT_DIR = os.path.join(os.path.dirname(HERE), "test", "lit")

#: Option strings of lcma-rewrite the cases are run with (all valid: invalid
#: option strings are the business of test_bad_input.py). Product counts stay
#: small (at most 48 or 7*7 per contraction) so no case is slow by design.
OPTIONS = [
    "scheme=strassen levels=2",
    "scheme=strassen levels=1 edge=pad",
    "scheme=strassen levels=2 edge=pad",
    "scheme=3x3x3:23 levels=2 edge=pad",
    "scheme=strassen",
    "scheme=winograd",
    "scheme=3x3x3:23",
    "scheme=2x3x4:20 edge=pad",
    "scheme=strassen,2x2x3:11 levels=2",
    "scheme=4x4x4:48",
    "scheme=strassen barriers=true",
    "scheme=auto",
    "",
]

#: Extra falcon-opt flags drawn now and then (all valid).
EXTRA_FLAGS = [
    [], [], [], ["--canonicalize"], ["--cse"], ["--split-input-file"], ["--mlir-print-debuginfo"],
    ["--verify-each=false"], ["--allow-unregistered-dialect"],
]

ELEMENT_TYPES = ["f32", "f16", "bf16", "f64", "i8", "i32", "i64", "i1", "index", "f8E4M3FN",
                 "complex<f32>", "i0", "si8", "ui8", "tf32"]
HUGE = ["4611686018427387904", "9223372036854775807", "4294967296", "2147483648",
        "18446744073709551616", "99999999999999999999"]
PUNCT = list("{}()<>[],:%@=\"'#^!-") + ["\\", "\x00", "\xff", "\u00e9", "x", " ", "\n"]

_SHAPE_NUM = re.compile(r"(?<=[<x])(\d+)(?=x)")
_ANY_NUM = re.compile(r"\d+")
_ETYPE = re.compile(r"\b(f16|bf16|f32|f64|i1|i8|i32|i64)\b")
_TOKEN = re.compile(r"%[\w.]+|@\w+|[\w.]+|\S")
#: Failures already known and pinned by a strict xfail in test/python/test_bad_input.py:
#: reported on their own line, not counted as failures unless --strict.
KNOWN_BUGS: dict = {
    # pattern in stderr -> description of a known, not yet fixed bug (none now;
    # the int64 pad overflow and the K = 0 crash were fixed in the pass).
}

_EXC_NAME = re.compile(r"\b(?:[A-Z][a-zA-Z]*(?:Error|Exception)|KeyError|StopIteration|"
                       r"AssertionError|RecursionError)\b: ")


# --------------------------------------------------------------------------
# Seeds and mutations
# --------------------------------------------------------------------------

def load_seeds(lit_dir: str = LIT_DIR) -> list:
    """Valid chunks of the lit tests (comment lines dropped), plus whole files."""
    seeds = []
    for path in sorted(glob.glob(os.path.join(lit_dir, "*.mlir"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        chunks = re.split(r"(?m)^// -----\s*$", text)
        for ch in chunks:
            body = "\n".join(l for l in ch.splitlines() if not l.lstrip().startswith("//"))
            if body.strip():
                seeds.append(body.strip() + "\n")
        seeds.append(text)
    if not seeds:
        raise SystemExit(f"fuzz_opt: no seeds in {lit_dir}")
    return seeds


def _lines_op(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    op = rng.choice(["delete", "duplicate", "swap"])
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _flip_char(text: str, rng: random.Random) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + rng.choice(PUNCT) + text[i + 1:]


def _sub_nth(regex, text: str, rng: random.Random, repl) -> str:
    matches = list(regex.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[:m.start()] + repl(m) + text[m.end():]


def _shape_num(text: str, rng: random.Random) -> str:
    def repl(m):
        return rng.choice(["0", "1", "2", "3", "5", "7", "64", "1024", rng.choice(HUGE),
                           str(rng.randint(0, 40)), "?"])

    if rng.random() < 0.5:  # change every occurrence of one size (keeps the IR consistent)
        nums = sorted(set(_SHAPE_NUM.findall(text)))
        if nums:
            old, new = rng.choice(nums), repl(None)
            return re.sub(r"(?<=[<x])" + old + r"(?=x)", new, text)
    return _sub_nth(_SHAPE_NUM, text, rng, repl)


def _any_num(text: str, rng: random.Random) -> str:
    return _sub_nth(_ANY_NUM, text, rng,
                    lambda m: rng.choice(["0", "1", "-1", str(int(m.group()) + 1), rng.choice(HUGE)]))


def _elem_type(text: str, rng: random.Random) -> str:
    if rng.random() < 0.4:  # swap one type everywhere (keeps the IR consistent)
        found = sorted(set(_ETYPE.findall(text)))
        if found:
            old, new = rng.choice(found), rng.choice(ELEMENT_TYPES)
            return re.sub(r"\b" + re.escape(old) + r"\b", new, text)
    return _sub_nth(_ETYPE, text, rng, lambda m: rng.choice(ELEMENT_TYPES))


def _token_op(text: str, rng: random.Random) -> str:
    toks = list(_TOKEN.finditer(text))
    if not toks:
        return text
    m = rng.choice(toks)
    op = rng.choice(["delete", "duplicate", "replace"])
    if op == "delete":
        return text[:m.start()] + text[m.end():]
    if op == "duplicate":
        return text[:m.end()] + " " + m.group() + text[m.end():]
    other = rng.choice(toks).group()
    return text[:m.start()] + other + text[m.end():]


def _truncate(text: str, rng: random.Random) -> str:
    return text[:rng.randrange(len(text) + 1)] if text else text


def _byte_flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


TEXT_MUTATORS = [_lines_op, _flip_char, _shape_num, _shape_num, _any_num, _elem_type, _elem_type,
                 _token_op, _token_op, _truncate]


def mutate(seed: str, rng: random.Random) -> bytes:
    """One to three mutations of ``seed``; now and then a raw byte flip."""
    text = seed
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        text = rng.choice(TEXT_MUTATORS)(text, rng)
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        data = _byte_flip(data, rng)
    return data


# --------------------------------------------------------------------------
# Running one case (in a worker process)
# --------------------------------------------------------------------------

@dataclass
class Case:
    index: int
    data: bytes
    argv: list            # falcon-opt arguments after the input path


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


def run_case(case: Case, workdir: str) -> Outcome:
    """Run falcon-opt's main() on one case, in this process; classify the outcome."""
    import io

    from falcon_mlir.tools import falcon_opt

    if os.environ.get("FALCON_FUZZ_TEST_HANG") == str(case.index):  # test hook: hang on this case
        time.sleep(3600)
    inp = os.path.join(workdir, f"in{case.index}.mlir")
    out = os.path.join(workdir, f"out{case.index}.mlir")
    with open(inp, "wb") as f:
        f.write(case.data)
    st = os.stat(inp)
    argv = [inp, "-o", out] + case.argv
    err_py = io.StringIO()
    # Native code (LLVM's option parser, IR printing) writes to fd 2 directly.
    saved_fd2 = os.dup(2)
    native = tempfile.TemporaryFile(dir=workdir)
    os.dup2(native.fileno(), 2)
    old_err, old_out = sys.stderr, sys.stdout
    sys.stderr = err_py
    sys.stdout = io.TextIOWrapper(io.BytesIO())
    t0 = time.time()
    problem = None
    try:
        rc = falcon_opt.main(list(argv))
    except BaseException as e:  # noqa: BLE001 - anything escaping main() is a failure
        rc = f"raised {type(e).__name__}"
        problem = f"main() raised {type(e).__name__}: {e}"
    finally:
        sys.stderr, sys.stdout = old_err, old_out
        os.dup2(saved_fd2, 2)
        os.close(saved_fd2)
    seconds = time.time() - t0
    native.seek(0)
    stderr = err_py.getvalue() + native.read().decode("utf-8", "replace")
    native.close()
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


def _worker(conn, workdir: str) -> None:
    from falcon_mlir.tools import falcon_opt  # noqa: F401 - import once, up front

    conn.send("ready")
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(run_case(case, workdir))


class _Worker:
    def __init__(self, ctx, workdir: str):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, workdir), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(120):
            raise RuntimeError("fuzz_opt: worker did not start")
        self.conn.recv()
        self.case: Optional[Case] = None
        self.started = 0.0

    def submit(self, case: Case) -> None:
        self.case, self.started = case, time.time()
        self.conn.send(case)

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(5)
        self.kill()


# --------------------------------------------------------------------------
# The campaign
# --------------------------------------------------------------------------

def make_cases(n: int, seed: int, seeds: list) -> list:
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        data = mutate(rng.choice(seeds), rng)
        argv = [f"--lcma-rewrite={rng.choice(OPTIONS)}"] + rng.choice(EXTRA_FLAGS)
        if rng.random() < 0.2:
            argv = rng.choice(EXTRA_FLAGS) + argv
        cases.append(Case(i, data, argv))
    return cases


def signature(o: Outcome) -> str:
    first = next((l for l in o.stderr.splitlines() if l.strip()), "")
    first = re.sub(r"^[^:]*:\d+:\d+: ", "", first)
    first = re.sub(r"\d+", "N", first)
    first = re.sub(r"'[^']*'", "'…'", first)
    return f"{o.problem.split(':')[0]} | {first[:140]}"


def fuzz(cases: list, jobs: int, timeout: float, verbose: bool = False) -> list:
    """Run every case; returns the list of :class:`Outcome` (failures have ``problem``)."""
    ctx = mp.get_context("spawn")
    results: list = []
    with tempfile.TemporaryDirectory(prefix="falcon-fuzz-") as workdir:
        workers = [_Worker(ctx, workdir) for _ in range(max(1, jobs))]
        pending = list(reversed(cases))
        try:
            while pending or any(w.case is not None for w in workers):
                for i, w in enumerate(workers):
                    if w.case is None and pending:
                        w.submit(pending.pop())
                    if w.case is None:
                        continue
                    if w.conn.poll(0.01):
                        try:
                            o = w.conn.recv()
                        except (EOFError, OSError):
                            o = Outcome(w.case.index, "crash", "", "worker died (native crash)",
                                        time.time() - w.started, w.case.argv)
                            workers[i] = _Worker(ctx, workdir)
                        results.append(o)
                        if verbose:
                            print(f"[{o.index}] rc={o.rc} {o.seconds:.2f}s {o.problem or ''}",
                                  flush=True)
                        w.case = None
                    elif not w.proc.is_alive():
                        results.append(Outcome(w.case.index, "crash", "",
                                               f"worker died (exit code {w.proc.exitcode})",
                                               time.time() - w.started, w.case.argv))
                        workers[i] = _Worker(ctx, workdir)
                    elif time.time() - w.started > timeout:
                        w.kill()
                        results.append(Outcome(w.case.index, "timeout", "",
                                               f"hang (> {timeout:g} s)", timeout, w.case.argv))
                        workers[i] = _Worker(ctx, workdir)
        finally:
            for w in workers:
                w.stop()
    results.sort(key=lambda o: o.index)
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fuzz_opt", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    p.add_argument("--save-dir", default="fuzz-failures")
    p.add_argument("--lit-dir", default=LIT_DIR)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--strict", action="store_true", help="count known bugs (KNOWN_BUGS) as failures")
    args = p.parse_args(argv)

    cases = make_cases(args.cases, args.seed, load_seeds(args.lit_dir))
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
            with open(os.path.join(args.save_dir, f"{o.index}.mlir"), "wb") as f:
                f.write(by_index[o.index].data)
            with open(os.path.join(args.save_dir, f"{o.index}.txt"), "w") as f:
                f.write(f"argv: falcon-opt {o.index}.mlir {' '.join(repr(a) for a in o.argv)}\n"
                        f"rc: {o.rc}\nproblem: {o.problem}\nseconds: {o.seconds:.2f}\n"
                        f"stderr:\n{o.stderr}")
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
