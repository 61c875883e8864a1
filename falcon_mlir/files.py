"""Writing output files atomically: a reader (or a failure half-way) never
sees a half-written file, and an error leaves no stray file behind."""

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

    Each file goes to a temporary file in its own folder first (flushed and
    fsynced, mode from the umask), then all are renamed into place; if any
    step fails, the temporary files and the files already renamed are
    removed again.

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
            fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".",
                                       suffix=".tmp")
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
