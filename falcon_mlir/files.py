"""Writing output files atomically: a reader (or a failure half-way) never
sees a half-written file, and an error leaves no stray file behind.

A temporary file is named ``.NAME.PID.RANDOM.tmp`` beside its output ``NAME``
(PID: the writing process), so that when a process dies before it could
remove its temporaries (a signal), the process that waited for it can
(:func:`remove_temporaries`; :func:`falcon_mlir.cli.run_tool_guarded`).

What is not a regular file cannot be replaced that way: a path that names an
existing device, FIFO or socket (``/dev/stdout``, ``/dev/null``, a pipe from
``mkfifo``), or any existing path under ``/dev`` or ``/proc``, is written in
place, as ``open(path, "wb")`` would; a symbolic link to a file keeps being
that link, and the file it points to is replaced (:func:`_target`)."""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Callable, Iterable, Optional, Tuple


def _target(path: str) -> Tuple[str, bool]:
    """``(where to write, in place)`` for the output ``path``.

    In place (no temporary file, no rename): an existing path under ``/dev``
    or ``/proc`` (``/dev/stdout`` links to ``/proc/self/fd/1``, whatever fd 1
    is) or one that is not a regular file (a device, a FIFO): renaming over it
    replaced the device node or link with a regular file (as root: the
    system's ``/dev/stdout`` or ``/dev/null``) and the output never reached
    the reader. Otherwise the path with its symbolic links resolved, so that
    a link stays a link.
    """
    absolute = os.path.abspath(path)
    if os.path.lexists(absolute) and absolute.startswith(("/dev/", "/proc/")):
        return path, True
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path):
            return path, True
    except OSError:  # missing (or a dangling link): a new file
        pass
    return os.path.realpath(path), False


def unwritable_reason(path: str) -> Optional[str]:
    """Why ``path`` cannot be written, checked before any work (``"no such
    directory"``, ``"is a directory"``, ``"permission denied"``), or None.
    A device or FIFO (``/dev/stdout``) is checked itself, not its folder."""
    if os.path.isdir(path):
        return "is a directory"
    where, in_place = _target(path)
    if in_place:
        return None if os.access(where, os.W_OK) else "permission denied"
    folder = os.path.dirname(where) or "."
    if not os.path.isdir(folder):
        return "no such directory"
    if not os.access(folder, os.W_OK):
        return "permission denied"
    return None


def write_files_atomic(files: Iterable[Tuple[str, bytes]]) -> None:
    """Write every ``(path, data)`` pair or none of them.

    Each file goes to a temporary file in its own folder first
    (``.NAME.PID.RANDOM.tmp``; flushed and fsynced, mode from the umask),
    then all are renamed into place; if any step fails, the temporary files
    and the files already renamed are removed again. A device or FIFO
    (``/dev/stdout``; :func:`_target`) is written in place, after the
    temporary files and before the renames: what went there cannot be taken
    back, but a failure there (``/dev/full``) still leaves no file renamed.

    Raises:
        OSError: a file cannot be written; ``e.filename`` is the path.
    """
    temps: list = []
    done: list = []
    in_place: list = []
    current = ""
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, data in files:
            current = path
            where, direct = _target(path)
            if direct:
                in_place.append((path, data))
                continue
            folder = os.path.dirname(where)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=_temp_prefix(where, os.getpid()), suffix=".tmp")
            temps.append((tmp, where, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~umask)
        for path, data in in_place:
            current = path
            with open(path, "wb") as f:  # close flushes: ENOSPC of /dev/full raises here
                f.write(data)
        for tmp, where, path in temps:
            current = path
            os.replace(tmp, where)
            done.append(where)
    except BaseException as e:
        for tmp, _, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        for path in done:
            try:
                os.unlink(path)
            except OSError:
                pass
        if isinstance(e, OSError):  # name the file asked for, not a temporary one
            e.filename = current
        raise


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` (bytes) to ``path`` through a temporary file in the same
    folder and ``os.replace``: the file is either as before or complete.

    Raises:
        OSError: the folder is missing or not writable, or the disk is full.
    """
    write_files_atomic([(path, data)])


def write_atomic_by(path: str, write: Callable[[str], None]) -> None:
    """Have ``write(tmp)`` write a file at ``tmp``, a temporary path beside ``path`` (named as
    :func:`write_files_atomic`'s), then give it the umask's mode and rename it to ``path``: for
    writers that take a path (e.g. IREE's parameter archives). On any failure ``tmp`` is removed
    and ``path`` is as before.

    Raises:
        OSError: the folder is missing or not writable, or the disk is full (``e.filename`` is
            ``path``); whatever ``write`` raises.
    """
    umask = os.umask(0)
    os.umask(umask)
    where = os.path.realpath(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(where), prefix=_temp_prefix(where, os.getpid()),
                                   suffix=".tmp")
    except OSError as e:
        e.filename = path
        raise
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, where)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            e.filename = path
        raise


def _temp_prefix(path: str, pid: int) -> str:
    """How the names of ``path``'s temporary files written by process ``pid`` begin."""
    return f".{os.path.basename(path)}.{pid}."


def remove_temporaries(paths: Iterable[str], pid: int) -> list:
    """Remove the temporary files that process ``pid`` left beside ``paths``
    (:func:`write_files_atomic`'s, had it died before cleaning up; the finished
    files ``paths`` themselves are left alone).

    Returns:
        The paths removed. Never raises: a folder that cannot be listed or a
        file that cannot be removed is skipped.
    """
    removed = []
    for path in paths:
        where, in_place = _target(path)
        if in_place:
            continue
        folder = os.path.dirname(where)
        prefix = _temp_prefix(where, pid)
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(folder, name))
                    removed.append(os.path.join(folder, name))
                except OSError:
                    pass
    return removed


def _destination(path: str):
    """What writing ``path`` reaches, for :func:`same_destination`: ``"stdout"`` for ``-``
    or a path that is this process's stdout (``/dev/stdout``, or the file that stdout is
    redirected to); ``(device, inode)`` of an existing regular file; else the resolved path;
    None for another device (``/dev/null`` may take any number of outputs)."""
    try:
        out = os.fstat(1)
    except OSError:
        out = None
    if path == "-":
        return "stdout"
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    if out is not None and (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
        return "stdout"
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def same_destination(outputs: Iterable[Tuple[str, str]]) -> Optional[str]:
    """Why two of a tool's ``(flag, path)`` outputs cannot both be written (``path`` ``-``:
    stdout; None and empty paths are skipped), or None.

    ``-o out.vmfb --lcma-report=out.vmfb`` left only the last file renamed in place, and
    ``--lcma-report=- -o /dev/stdout`` (or ``... > out.mlir -o out.mlir``) put the JSON and
    the module into one stream or lost one: the reason reads ``-o /dev/stdout and
    --lcma-report=- both go to stdout`` or ``-o x and --lcma-report=x name the same file
    (give each its own file)``.
    """
    seen: dict = {}
    for flag, path in outputs:
        if not path:  # None: not asked for; "": the tool's own error
            continue
        key = _destination(path)
        if key is None:
            continue
        if key in seen:
            (flag0, path0) = seen[key]
            what = "both go to stdout" if key == "stdout" else "name the same file"
            return f"{_spelled(flag0, path0)} and {_spelled(flag, path)} {what} (give each its own file)"
        seen[key] = (flag, path)
    return None


def _spelled(flag: str, path: str) -> str:
    """``-o x`` or ``--lcma-report=x``, as a user writes them."""
    return f"{flag}={path}" if flag.startswith("--") else f"{flag} {path}"
