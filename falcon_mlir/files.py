"""Writing output files atomically: a reader (or a failure half-way) never
sees a half-written file, and an error leaves no stray file behind.

A temporary file is named ``.NAME.PID.RANDOM.tmp`` beside its output ``NAME``
(PID: the writing process), so that when a process dies before it could
remove its temporaries (a signal), the process that waited for it can
(:func:`remove_temporaries`; :func:`falcon_mlir.cli.run_tool_guarded`)."""

from __future__ import annotations

import os
import tempfile
from typing import Iterable, Optional, Tuple


def unwritable_reason(path: str) -> Optional[str]:
    """Why ``path`` cannot be written, checked before any work (``"no such
    directory"``, ``"is a directory"``, ``"permission denied"``), or None."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        return "no such directory"
    if os.path.isdir(path):
        return "is a directory"
    if not os.access(folder, os.W_OK):
        return "permission denied"
    return None


def write_files_atomic(files: Iterable[Tuple[str, bytes]]) -> None:
    """Write every ``(path, data)`` pair or none of them.

    Each file goes to a temporary file in its own folder first
    (``.NAME.PID.RANDOM.tmp``; flushed and fsynced, mode from the umask),
    then all are renamed into place; if any step fails, the temporary files
    and the files already renamed are removed again.

    Raises:
        OSError: a file cannot be written; ``e.filename`` is the path.
    """
    temps: list = []
    done: list = []
    current = ""
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, data in files:
            current = path
            folder = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=_temp_prefix(path, os.getpid()), suffix=".tmp")
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~umask)
        for tmp, path in temps:
            current = path
            os.replace(tmp, path)
            done.append(path)
    except BaseException as e:
        for tmp, _ in temps:
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
        folder = os.path.dirname(os.path.abspath(path))
        prefix = _temp_prefix(path, pid)
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
