"""falcon_mlir.files on outputs that are not regular files: a device, a FIFO,
``/dev/stdout`` (a link to ``/proc/self/fd/1``), a symbolic link to a file.

Renaming a temporary file over such a path replaced it with a regular file:
``falcon-opt in.mlir -o /dev/stdout | cat`` printed nothing (status 0) and, as
root, left the system's ``/dev/stdout`` a regular file holding the module (the
same for ``/dev/null``, ``/dev/stderr``). The tests use links and FIFOs in
``tmp_path`` only: before the fix they replace those, never a node in /dev.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest

from falcon_mlir.files import remove_temporaries, unwritable_reason, write_atomic, write_files_atomic

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd (Linux)")


def test_link_to_stdout_is_written_through(tmp_path):
    """A link to /proc/self/fd/1 (what /dev/stdout is) gets the data on the process's stdout."""
    link = tmp_path / "stdout"
    os.symlink("/proc/self/fd/1", link)
    code = f"from falcon_mlir.files import write_atomic; write_atomic({str(link)!r}, b'payload\\n')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"payload\n"
    assert os.path.islink(link) and os.readlink(link) == "/proc/self/fd/1"
    assert sorted(os.listdir(tmp_path)) == ["stdout"]


def test_fifo_is_written_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    try:
        write_files_atomic([(str(fifo), b"x" * 100000)])
    finally:
        if reader.is_alive():  # before the fix: unblock the reader
            with open(fifo, "wb") if stat.S_ISFIFO(os.stat(fifo).st_mode) else open(os.devnull, "wb"):
                pass
        reader.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got == [b"x" * 100000]
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_device_is_an_error_and_nothing_renamed(tmp_path):
    full = tmp_path / "full"
    os.symlink("/dev/full", full)
    other = tmp_path / "other.json"
    assert unwritable_reason(str(full)) is None
    with pytest.raises(OSError) as e:
        write_files_atomic([(str(other), b"{}"), (str(full), b"data")])
    assert e.value.filename == str(full)
    assert os.path.islink(full) and not other.exists()
    assert sorted(os.listdir(tmp_path)) == ["full"]


def test_link_to_a_file_stays_a_link(tmp_path):
    (tmp_path / "d").mkdir()
    target = tmp_path / "d" / "real.mlir"
    target.write_bytes(b"old")
    link = tmp_path / "link.mlir"
    os.symlink(target, link)
    write_atomic(str(link), b"new")
    assert os.path.islink(link) and target.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["d", "link.mlir"] and os.listdir(tmp_path / "d") == ["real.mlir"]
    # a temporary left by a dead writer lies beside the target, and is found there
    stray = tmp_path / "d" / ".real.mlir.4242.abc.tmp"
    stray.write_bytes(b"")
    assert remove_temporaries([str(link)], 4242) == [str(stray)]


def test_device_checked_itself_not_its_folder(tmp_path):
    """/dev/stdout's folder is not writable to a user: that is no reason to refuse a writable stdout."""
    link = tmp_path / "null"
    os.symlink(os.devnull, link)
    os.chmod(tmp_path, 0o555)
    try:
        assert unwritable_reason(str(link)) is None
    finally:
        os.chmod(tmp_path, 0o755)


def test_same_destination(tmp_path, monkeypatch):
    """-o x --lcma-report=x kept only the last file renamed; --lcma-report=- -o /dev/stdout mixed the
    JSON into the module on stdout."""
    from falcon_mlir.files import same_destination

    monkeypatch.chdir(tmp_path)
    os.symlink("/proc/self/fd/1", tmp_path / "so")
    assert same_destination([("-o", "a.mlir"), ("--lcma-report", "./a.mlir")]) == \
        "-o a.mlir and --lcma-report=./a.mlir name the same file (give each its own file)"
    assert same_destination([("-o", "so"), ("--lcma-report", "-")]) == \
        "-o so and --lcma-report=- both go to stdout (give each its own file)"
    assert same_destination([("-o", "a.mlir"), ("--lcma-report", "b.json")]) is None
    assert same_destination([("-o", os.devnull), ("--lcma-report", os.devnull)]) is None
    assert same_destination([("-o", "-"), ("--lcma-report", None)]) is None


def test_write_atomic_by_renames_a_whole_file_or_leaves_the_old_one(tmp_path):
    """A writer that takes a path (IREE's parameter archives): the file appears complete with the
    umask's mode; a writer that fails leaves the old file and no temporary."""
    from falcon_mlir.files import write_atomic_by

    out = tmp_path / "w.bin"
    out.write_bytes(b"old")

    def fails(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        write_atomic_by(str(out), fails)
    assert out.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["w.bin"]
    write_atomic_by(str(out), lambda tmp: open(tmp, "wb").write(b"new"))
    umask = os.umask(0)
    os.umask(umask)
    assert out.read_bytes() == b"new" and stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.bin"]
    with pytest.raises(OSError) as e:
        write_atomic_by(str(tmp_path / "no" / "x.bin"), lambda tmp: None)
    assert e.value.filename == str(tmp_path / "no" / "x.bin")
