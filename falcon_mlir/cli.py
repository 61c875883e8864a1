"""What every falcon command-line tool shares: one error type, an argparse
parser that reports a bad command line as one line, and the wrapper that
turns any failure into one line on stderr and an exit status (never a
traceback); for the tools that run IREE through its Python API, the
wrapper that also turns a crash of IREE's native code into one line
(:func:`run_tool_guarded`).

    def main(argv=None) -> int:
        return run_tool("falcon-x", _body, argv)

    def _body(argv) -> int:
        args = ArgumentParser(prog="falcon-x").parse_args(argv)
        if bad:
            raise ToolError("falcon-x: error: what is wrong")
        ...
        return 0
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import signal
import sys
import time
from typing import Callable, Optional, Sequence


class ToolError(Exception):
    """A user-facing error of a command-line tool.

    ``str(error)`` is the whole line printed on stderr (``PROG: error: ...``
    or ``file:line:col: error: ...``); ``status`` is the exit status
    (1 unless the tool documents another, e.g. 2 for a bad command line).
    """

    def __init__(self, line: str, status: int = 1):
        super().__init__(line)
        self.status = status


def one_line(text) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


def error_line(e: BaseException, limit: int = 300) -> str:
    """The line of ``str(e)`` that says what went wrong, for a one-line report:
    the first line that holds "error" (IREE's diagnostics put notes and IR
    dumps around it), else the first non-empty line, else the exception's
    type name; at most ``limit`` characters."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else type(e).__name__)
    return msg[:limit]


class _VersionAction(argparse.Action):
    """``--version``: :func:`version_text` on stdout as written (argparse's own
    version action reflows it to the terminal's width), then exit status 0."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print_version(parser.prog)
        parser.exit(0)


class ArgumentParser(argparse.ArgumentParser):
    """argparse without the usage dump: a bad command line raises
    :class:`ToolError` with one line ``PROG: error: MESSAGE (see PROG --help)``
    and ``usage_status`` (default 1) as its exit status; ``--help`` writes as
    :func:`emit_stdout` does. A top-level parser
    (``version=True``, the default; subcommands' parsers have none) takes
    ``--version``: :func:`version_text` on stdout, exit status 0."""

    def __init__(self, *args, usage_status: int = 1, version: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.usage_status = usage_status
        if version:
            self.add_argument("--version", action=_VersionAction,
                              help="print the versions of falcon-mlir and IREE and exit")

    def error(self, message):
        raise ToolError(f"{self.prog}: error: {message} (see {self.prog} --help)", self.usage_status)

    def print_help(self, file=None):
        """As argparse's; to stdout through :func:`emit_stdout` (``--help`` to a full or
        closed stdout: one line, status 1, not a silent status 0).

        Raises:
            BrokenPipeError, ToolError: as :func:`emit_stdout`.
        """
        if file is not None:
            return super().print_help(file)
        emit_stdout(self.prog, self.format_help().encode())

    def add_subparsers(self, **kwargs):
        """As argparse's, the subcommands' parsers reporting errors the same way
        (one line, ``usage_status``)."""
        kwargs.setdefault("parser_class", functools.partial(type(self), usage_status=self.usage_status,
                                                            version=False))
        return super().add_subparsers(**kwargs)


def version_text(prog: str) -> str:
    """What ``PROG --version`` prints (every falcon tool, as ``iree-compile
    --version`` and ``mlir-opt --version`` do): falcon-mlir's version and the
    IREE compiler and runtime it runs on, from the installed distributions'
    metadata (``not installed`` where one is missing), e.g.::

        falcon-opt (falcon-mlir 0.1.0)
          iree-base-compiler 3.13.0, iree-base-runtime 3.13.0
    """
    from importlib import metadata

    def dist(name: str) -> str:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            return f"{name} not installed"

    from falcon_mlir import __version__

    return f"{prog} (falcon-mlir {__version__})\n  {dist('iree-base-compiler')}, {dist('iree-base-runtime')}"


def print_version(prog: str) -> None:
    """Write :func:`version_text` and a newline to stdout (``PROG --version``), as
    :func:`emit_stdout` does.

    Raises:
        BrokenPipeError, ToolError: as :func:`emit_stdout`.
    """
    emit_stdout(prog, (version_text(prog) + "\n").encode())


def emit_stdout(prog: str, data: bytes) -> None:
    """A tool's output ``data`` to stdout (:func:`write_stdout`), a failure as one line.

    Raises:
        BrokenPipeError: the reader went away (:func:`run_tool`: nothing said, status 1).
        ToolError: stdout is closed or cannot be written (a full disk):
            ``PROG: error: cannot write to stdout: REASON``, status 1.
    """
    if sys.stdout is None:  # fd 1 closed when Python started (``PROG --version >&-``)
        raise ToolError(f"{prog}: error: cannot write to stdout: it is closed")
    try:
        write_stdout(data)
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as e:  # ValueError: the stream was closed
        silence_stdout()  # what stayed in the buffer is not flushed again at exit
        raise ToolError(f"{prog}: error: cannot write to stdout: {getattr(e, 'strerror', None) or e}") from None


def read_stdin(prog: str) -> bytes:
    """All of stdin, as bytes (a tool's input ``-``).

    Raises:
        ToolError: stdin is closed (``PROG - <&-``: ``sys.stdin`` is None) or cannot be read:
            ``PROG: error: cannot read stdin: REASON``, status 1.
    """
    if sys.stdin is None:  # fd 0 closed when Python started
        raise ToolError(f"{prog}: error: cannot read stdin: it is closed")
    try:
        return sys.stdin.buffer.read()
    except (OSError, ValueError) as e:  # ValueError: the stream was closed
        raise ToolError(f"{prog}: error: cannot read stdin: {getattr(e, 'strerror', None) or e}") from None


def silence_stdout() -> None:
    """Point fd 1 at /dev/null, so that Python's final flush of a pipe whose
    reader went away prints no "Exception ignored ... BrokenPipeError"."""
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def write_stdout(data: bytes) -> None:
    """Write all of ``data`` to stdout and flush.

    ``BufferedWriter.write`` can return a short count without raising when the
    reader goes away or the disk fills up; the rest is written again until it
    raises.

    Raises:
        BrokenPipeError: the reader closed the pipe.
        OSError: any other write error (disk full, ...).
    """
    out = sys.stdout.buffer
    view = memoryview(data)
    while view:
        n = out.write(view)
        if not n:
            raise OSError(0, "short write to stdout")
        view = view[n:]
    out.flush()


def run_tool(prog: str, body: Callable[[list], int], argv: Optional[Sequence[str]] = None, *,
             preload: Sequence[str] = ()) -> int:
    """Run ``body(argv)`` (``argv`` defaults to ``sys.argv[1:]``) and return its
    exit status, mapping failures to one line on stderr:

    * :class:`ToolError`: its line, its status;
    * ``KeyboardInterrupt``: ``PROG: interrupted``, 130;
    * ``BrokenPipeError`` (the reader of stdout went away): nothing, 1;
    * ``SystemExit`` (``--help``): its code;
    * any other exception (a bug of ours): ``PROG: internal error: TYPE: MESSAGE
      (please report this with the input)``, 2.

    Args:
        preload: the modules ``body`` imports that load native code (IREE's
            extension, numpy), imported first with SIGINT, SIGTERM and SIGHUP
            held (:func:`_import_held`): a Ctrl-C that comes while they load is
            taken right after them, as ``PROG: interrupted``, 130, not inside
            them, where it can be lost or turned into another error.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    return _run(prog, body, argv, preload, None)


def _run(prog: str, body: Callable[[list], int], argv: list, preload: Sequence[str], mask) -> int:
    """:func:`run_tool` for ``argv``; ``mask``: the signal mask to set after ``preload``
    (the forked child, whose forwarded signals are held until then), None: as it was."""
    try:
        # --help needs none of the native modules: it stays as quick as before the preload
        _import_held(() if _asks_help(argv) else preload, mask)
        return body(argv)
    except ToolError as e:
        print(str(e), file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        silence_stdout()
        return 1
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:  # noqa: BLE001 - a bug of ours: still one line
        print(f"{prog}: internal error: {type(e).__name__}: {one_line(e)} "
              "(please report this with the input)", file=sys.stderr)
        return 2


def _asks_help(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for the help text (``-h``, ``--help``; before a ``--``)."""
    for a in argv:
        if a == "--":
            return False
        if a in ("-h", "--help"):
            return True
    return False


def _import_held(modules: Sequence[str], mask=None) -> None:
    """Import ``modules`` (names, in order) with SIGINT, SIGTERM and SIGHUP
    blocked, then set the signal mask back (to ``mask`` where given); a signal
    that came meanwhile is taken then: Ctrl-C as ``KeyboardInterrupt`` raised
    here, after the imports.

    A ``KeyboardInterrupt`` raised while a module with native code loads is
    not reliably passed on: IREE's nanobind extension calls Python code during
    its initialisation and aborts the process on an exception it cannot pass
    (SIGABRT); importlib's own callbacks and C code that clears errors lose
    it (the tool then runs to the end, status 0); numpy, interrupted half-way
    through its initialisation, fails the next import with ``ImportError:
    cannot load module more than once per process``. Without ``pthread_sigmask``
    (not POSIX) the modules are imported as they are.

    Raises:
        KeyboardInterrupt: a SIGINT came while the modules were imported.
        ImportError: a module is missing or fails to load.
    """
    if not hasattr(signal, "pthread_sigmask") or (not modules and mask is None):
        for name in modules:
            importlib.import_module(name)
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    try:
        for name in modules:
            importlib.import_module(name)
    finally:  # CPython runs the handlers of signals left pending right here
        signal.pthread_sigmask(signal.SIG_SETMASK, held if mask is None else mask)


#: The environment variable that keeps :func:`run_tool_guarded` in one process
#: (set to anything but ``""`` or ``"0"``): for debuggers, which follow the parent.
NO_FORK_ENV = "FALCON_NO_FORK"

#: Signals that mean the process's own code crashed (not a kill from outside).
_CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGFPE, signal.SIGILL, signal.SIGABRT} | {
    getattr(signal, name) for name in ("SIGBUS", "SIGTRAP", "SIGSYS") if hasattr(signal, name)}

#: Signals the parent passes on to the child (Ctrl-C, kill, a closed terminal).
_FORWARDED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def run_tool_guarded(prog: str, body: Callable[[list], int], argv: Optional[Sequence[str]] = None, *,
                     doing: str = "running", paths: Optional[Callable[[list], tuple]] = None,
                     preload: Sequence[str] = (), left: Optional[Callable[[list, float], Optional[str]]] = None
                     ) -> int:
    """:func:`run_tool`, with ``body`` in a forked child process when the tool
    runs as its own program, so that a crash of native code (IREE, MLIR, LLVM:
    SIGSEGV, SIGFPE, SIGABRT ...) ends in one line instead of a bare signal.

    The child runs ``run_tool(prog, body, argv)`` on the parent's stdin,
    stdout and stderr and exits with its status; the parent only waits and returns
    that status. When the child dies of a signal, the parent removes the
    temporary files the child left beside the outputs
    (:func:`falcon_mlir.files.remove_temporaries`), prints one line::

        PROG: error: IREE crashed (SIGFPE) while DOING in.mlir; nothing was written

    (``killed by SIGKILL`` for a signal that is not a crash: out of memory, a
    kill from outside) and returns 128 + the signal's number: the status a
    shell shows for a process killed by that signal (136 for SIGFPE, what
    scripts saw before), apart from 1 (a diagnosed error) and 2 (a bug of
    ours). SIGINT, SIGTERM and SIGHUP sent to the parent go on to the child;
    the child takes SIGINT as one ``KeyboardInterrupt`` (``PROG:
    interrupted``, 130, from ``body`` or :func:`run_tool`), held until its
    handler is set and ``preload`` is imported, so that one that comes at
    any moment is taken where :func:`run_tool` reports it. On Linux the
    child is killed when the parent is (SIGKILL from a timeout).

    It runs ``body`` in this process, exactly as :func:`run_tool`, where
    ``argv`` is given (a caller in Python, e.g. a test, whose process is not
    ours to fork), where ``os.fork`` does not exist (not POSIX), or where
    ``$FALCON_NO_FORK`` is set (:data:`NO_FORK_ENV`). The fork is safe
    because a tool's module imports nothing heavy and starts no thread of
    its own before its ``main`` (falcon-bench's and falcon-calibrate's
    import numpy, whose OpenBLAS threads OpenBLAS itself stops and restarts
    around a fork, by ``pthread_atfork``).

    Args:
        doing: what the tool does to its input, for the line (``compiling``).
        paths: ``paths(argv) -> (input, outputs)``, called in the parent only
            after a signal, for the input's name in the line (``-``: stdin)
            and the outputs whose temporary files to remove; a failure there
            gives ``its input`` and no outputs.
        left: for a tool that writes as it goes (falcon-bench's CSV, shape by
            shape): ``left(argv, since) -> clause or None``, called in the
            parent after a signal with the time the tool started
            (``time.time()``); the clause (``the rows measured so far are in
            out.csv``) ends the line instead of ``nothing was written``
            (None, or a failure there, keeps that).
        preload: as :func:`run_tool`'s: the modules with native code that
            ``body`` imports, imported in the child (or in this process)
            with the interrupt held.

    Returns:
        The exit status. Never raises.
    """
    if argv is not None or not hasattr(os, "fork") or os.environ.get(NO_FORK_ENV, "") not in ("", "0"):
        return run_tool(prog, body, argv, preload=preload)
    argv = list(sys.argv[1:])
    since = time.time()
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:  # inherited: waitpid would find no child
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    parent = os.getpid()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)  # none between fork and handlers
    _flush_std()
    try:
        pid = os.fork()
    except OSError:  # no process left to fork (EAGAIN, ENOMEM): in this process
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return run_tool(prog, body, argv, preload=preload)
    if pid == 0:
        _child(prog, body, argv, mask, parent, preload)  # never returns
    child, forwarded = [pid], []

    def forward(signum, frame):  # kept until exit: after the child, nothing to forward
        if child:
            forwarded.append(signum)
            try:
                os.kill(child[0], signum)
            except OSError:
                pass

    for s in _FORWARDED:
        signal.signal(s, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    child.clear()
    if status >= 0:
        return status
    return _report_death(prog, -status, pid, argv, doing, paths, interrupted=signal.SIGINT in forwarded,
                         left=left, since=since)


def _flush_std() -> bool:
    """Flush stdout and stderr (those that exist); False if one failed (closed, disk full)."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - the caller decides what it means
            ok = False
    return ok


def _child(prog: str, body: Callable[[list], int], argv: list, mask, parent: int, preload) -> None:
    """The forked child of :func:`run_tool_guarded`: ``run_tool``, then the interpreter's normal
    exit with its status (``SystemExit``: atexit functions run, e.g. the temporary folders of compiled
    kernels); ``os._exit(1)`` if anything before that raised. Never returns.

    The forwarded signals stay blocked (as the parent forked) until ``preload`` is imported, inside
    :func:`run_tool`'s reporting: an interrupt that came earlier (while ``_die_with`` loaded ctypes,
    or while IREE loaded) is ``PROG: interrupted`` there, not a silent ``os._exit(1)`` here."""
    status = 1
    try:
        _die_with(parent)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where it is ignored
            signal.signal(signal.SIGINT, _interrupt_once)
        status = _run(prog, body, argv, preload, mask)
        if not _flush_std():  # what the interpreter's exit would have found
            status = status or 1
    except BaseException:  # noqa: BLE001 - run_tool raises nothing; never back into the parent's code
        os._exit(1)
    sys.exit(status)


def _interrupt_once(signum, frame):
    """The child's SIGINT handler: one ``KeyboardInterrupt`` (Ctrl-C reaches
    the child from the terminal and again from the parent), later ones ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _die_with(parent: int) -> None:
    """Linux: this process gets SIGKILL when its parent ``parent`` dies (a
    timeout's SIGKILL to the tool must not leave its compile running);
    elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)


def _report_death(prog: str, signum: int, pid: int, argv: list, doing: str, paths,
                  interrupted: bool = False, left=None, since: float = 0.0) -> int:
    """After the child ``pid`` died of ``signum``: remove its temporaries, say so in one
    line, return 128 + ``signum``; where an interrupt had been passed on to it (``interrupted``:
    Ctrl-C while the child was still importing IREE's native code can end in SIGABRT), the line is
    ``PROG: interrupted`` and the status 130, as for an interrupt the child took itself. The line ends
    in ``left(argv, since)`` where that says what the child left written, else ``nothing was written``."""
    name, outputs = "its input", []
    if paths is not None:
        try:
            name, outputs = paths(argv)
            name = "<stdin>" if name == "-" else name
        except (Exception, SystemExit):  # noqa: BLE001 - a command line the child had refused
            pass
    from falcon_mlir.files import remove_temporaries

    remove_temporaries([p for p in outputs if p not in (None, "", "-")], pid)
    if interrupted:
        line, status = f"{prog}: interrupted", 130
    else:
        try:
            signame = signal.Signals(signum).name
        except ValueError:
            signame = f"signal {signum}"
        what = f"IREE crashed ({signame})" if signum in _CRASH_SIGNALS else f"killed by {signame}"
        kept = None
        if left is not None:
            try:
                kept = left(argv, since)
            except (Exception, SystemExit):  # noqa: BLE001 - as paths: the child had said why
                pass
        line, status = f"{prog}: error: {what} while {doing} {name}; {kept or 'nothing was written'}", 128 + signum
    try:
        print(line, file=sys.stderr)
    except Exception:  # noqa: BLE001 - no stderr: the status says it
        pass
    return status
