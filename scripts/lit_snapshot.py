#!/usr/bin/env python3
"""Snapshot falcon-opt's behaviour on every test/lit RUN line, for refactoring.

    python3 scripts/lit_snapshot.py ROOT OUT_DIR
    diff -r -I '^falcon-opt ' BEFORE_DIR AFTER_DIR    # byte-identical behaviour

For each ``falcon-opt`` RUN line of ``ROOT/test/lit/**/*.mlir`` (the part before
the first ``|``; ``not`` dropped) it runs the command and stores, under
OUT_DIR, ``<file>.<n>.out`` (the command, exit status, stdout and stderr, with
the test's folder written as ``LIT``) and each ``%t`` file the command wrote.
Two trees compare byte for byte with ``diff -r``; lines starting with the
command (``falcon-opt ...``) name paths and are skipped with ``-I``.
"""

import glob
import os
import re
import shutil
import subprocess
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: lit_snapshot.py ROOT OUT_DIR", file=sys.stderr)
        return 2
    root, out = (os.path.abspath(a) for a in argv)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for path in sorted(glob.glob(os.path.join(root, "test/lit/**/*.mlir"), recursive=True)):
        if "Inputs" in path:
            continue
        lit_dir = os.path.dirname(path).encode()
        runs = [ln.split("RUN:", 1)[1].strip() for ln in open(path) if "RUN:" in ln]
        for i, line in enumerate(runs):
            cmd = line.split("|")[0].strip()
            if not re.match(r"^(not )?falcon-opt ", cmd):
                continue
            cmd = re.sub(r"^not ", "", cmd).split(";")[0]
            tdir = os.path.join(out, "tmp")
            shutil.rmtree(tdir, ignore_errors=True)
            os.makedirs(tdir)
            cmd = (cmd.replace("%s", path).replace("%t", os.path.join(tdir, "t"))
                   .replace("%S", os.path.dirname(path)))
            p = subprocess.run(cmd, shell=True, capture_output=True, cwd=root)
            key = f"{os.path.basename(path)}.{i}"
            with open(os.path.join(out, key + ".out"), "wb") as f:
                f.write(cmd.replace(out, "OUT").replace(root, "ROOT").encode()
                        + b"\n== rc %d\n== stdout\n" % p.returncode + p.stdout.replace(lit_dir, b"LIT")
                        + b"\n== stderr\n" + p.stderr.replace(lit_dir, b"LIT"))
            for fn in sorted(os.listdir(tdir)):
                with open(os.path.join(tdir, fn), "rb") as src, \
                        open(os.path.join(out, f"{key}.{fn}"), "wb") as dst:
                    dst.write(src.read().replace(lit_dir, b"LIT"))
            shutil.rmtree(tdir)
    print(f"{len(os.listdir(out))} files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
