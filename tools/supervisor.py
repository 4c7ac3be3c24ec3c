"""A driver survives a fatal signal in the MLIR bindings or in the user's program.

An assertion in upstream MLIR (reachable from malformed input through the
bindings' parser), or undefined behaviour in a program `autodiff-run`
executes (an out-of-bounds `tensor.extract`, `arith.divsi` by zero), kills
the process with a signal that Python cannot catch. So a console driver
forks first: the child does all the work with the same stdin/stdout, and the
parent only waits and relays the child's stderr (stdout as well when both
are one file, which keeps their order). When the child exits normally its
exit code and output pass through unchanged, bytes included (the relay
copies bytes; `--emit-bytecode` output goes straight to stdout). When it
dies from a signal, the parent prints one line instead of the crash report,

    autodiff-opt: internal error: MLIR aborted while parsing 'x.mlir': \
NamedAttrList::set: Assertion `value && "attributes may never be null"' failed

naming the stage the child last recorded with `set_stage` and the
assertion text upstream printed on stderr, and exits 1.

The normal path costs one fork and a pipe (about a millisecond; see
test_fuzz_drivers.py). `AUTODIFF_SUPERVISE=0` turns supervision off (to run a
driver under a debugger), and platforms without fork run unsupervised.
"""

from __future__ import annotations

import atexit
import gc
import mmap
import os
import re
import select
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

SUPERVISE_ENV = "AUTODIFF_SUPERVISE"

#: Where the child records what it is doing (shared with the parent).
_STAGE: mmap.mmap | None = None
_STAGE_BYTES = 4096

#: Lines of a crash report upstream prints before it dies: from the first one
#: on, the parent holds stderr back (and replays it if the child exits after all).
_CRASH_LINE = re.compile(
    rb"Assertion .* failed\.|^LLVM ERROR: |^PLEASE submit a bug report|^Stack dump"
)
_ASSERTION = re.compile(r"^(?P<where>.*?): (?P<what>Assertion .*failed)\.?$")
_NOT_NAMES = ("decltype", "sizeof", "alignof", "noexcept")
_FUNCTION = re.compile(r"([A-Za-z_][\w:~]*)\(")

_SIGNAL_WORDS = {
    signal.SIGSEGV: "segmentation fault: an out-of-bounds memory access",
    signal.SIGFPE: "arithmetic exception: an integer division by zero or overflow",
    signal.SIGBUS: "bus error: a misaligned or unmapped memory access",
    signal.SIGILL: "illegal instruction",
    signal.SIGABRT: "aborted",
}


def set_stage(text: str) -> None:
    """Record what the (child) driver is doing now, for a crash message; cheap, no I/O."""
    if _STAGE is None:
        return
    data = text.encode("utf-8", "replace")[: _STAGE_BYTES - 1]
    _STAGE[: len(data) + 1] = data + b"\0"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def assertion_text(report: str) -> str | None:
    """`Func::name: Assertion `cond' failed` out of the C library's assertion line."""
    for line in report.splitlines():
        m = _ASSERTION.search(line.strip())
        if m:
            # `prog: file.cpp:123: ret ns::Class::fn(args) const: Assertion ...`
            names = [n for n in _FUNCTION.findall(m["where"]) if n not in _NOT_NAMES]
            func = re.sub(r"^(mlir|llvm)::", "", names[0]) if names else ""
            return f"{func}: {m['what']}" if func else m["what"]
        if line.startswith("LLVM ERROR: "):
            return line[len("LLVM ERROR: "):].strip()
    return None


def crash_message(tool: str, signum: int, stage: str, report: str,
                  user_program: Callable[[str], str | None] | None = None) -> str:
    """The one line printed for a child killed by `signum` while at `stage`."""
    assertion = assertion_text(report)
    name = signal_name(signum)
    if assertion is None and user_program is not None:
        program = user_program(stage)
        if program is not None:
            return (f"{tool}: error: {program} crashed with {name} "
                    f"({_SIGNAL_WORDS.get(signum, name)}): its behaviour is undefined "
                    "for these arguments")
    where = f" while {stage}" if stage else ""
    if assertion is not None:
        return f"{tool}: internal error: MLIR aborted{where}: {assertion}"
    return f"{tool}: internal error: MLIR crashed{where}: {name} ({_SIGNAL_WORDS.get(signum, name)})"


def _run(work: Callable[[], int]) -> int:
    try:
        return work()
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            return code or 0
        sys.stderr.write(f"{code}\n")
        return 1


def _exit_now(code: int) -> NoReturn:
    """Exit with `code` after the atexit handlers, skipping the interpreter's teardown.

    Tearing down an interpreter that loaded the bindings costs more CPU than
    a small run itself; nothing the drivers do needs it (their files are
    closed, and what must finish at exit, like a compile cache entry being
    written, is an atexit handler).
    """
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _same_file(a: int, b: int) -> bool:
    try:
        return os.path.samestat(os.fstat(a), os.fstat(b))
    except OSError:
        return False


def supervised(tool: str, work: Callable[[], int],
               user_program: Callable[[str], str | None] | None = None) -> int:
    """Run `work()` in a forked child and return its exit code; one line if it dies.

    Neither process returns: each exits with the code (see _exit_now).
    `user_program(stage)` names the
    user's function a crash at `stage` happened in (None: a crash in MLIR).
    """
    global _STAGE
    if os.environ.get(SUPERVISE_ENV, "1") == "0" or not hasattr(os, "fork"):
        return work()
    try:
        both = _same_file(1, 2)
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()  # the child's collections leave the inherited heap unwritten (shared)
        stage = mmap.mmap(-1, _STAGE_BYTES)
        read_end, write_end = os.pipe()
        pid = os.fork()
    except OSError:  # no fork here (limits): do the work unsupervised
        return work()
    if pid == 0:  # the child: do the work, its stderr (and stdout) into the pipe
        _STAGE = stage
        os.close(read_end)
        os.dup2(write_end, 2)
        if both:
            os.dup2(write_end, 1)
        os.close(write_end)
        _exit_now(_run(work))
    os.close(write_end)
    _exit_now(_supervise(tool, pid, read_end, 1 if both else 2, stage, user_program))


def _supervise(tool: str, pid: int, read_end: int, out_fd: int, stage: mmap.mmap,
               user_program: Callable[[str], str | None] | None) -> int:
    # Ctrl-C reaches the child as well (one process group): it decides the exit code.
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    previous_term = signal.signal(signal.SIGTERM, forward)
    held: list[bytes] = []  # a crash report being written
    pending = b""
    status: int | None = None

    def emit(data: bytes) -> None:
        while data:
            try:
                n = os.write(out_fd, data)
            except BrokenPipeError:
                return
            except InterruptedError:
                continue
            data = data[n:]

    def take(data: bytes, final: bool) -> None:
        nonlocal pending
        pending += data
        lines = pending.split(b"\n")
        pending = b"" if final else lines.pop()
        out = []
        for i, line in enumerate(lines):
            last = final and i == len(lines) - 1
            text = line if last else line + b"\n"
            if not text:
                continue
            if held or _CRASH_LINE.search(line):
                held.append(text)
            else:
                out.append(text)
        if out:
            emit(b"".join(out))

    try:
        while True:
            try:
                ready, _, _ = select.select([read_end], [], [], 0.2)
            except InterruptedError:
                continue
            if ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break  # EOF: the child (and all it started) closed the pipe
                take(chunk, False)
                continue
            if status is not None:
                break  # exited, but something it started keeps the pipe open
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
        if status is None:
            _, status = os.waitpid(pid, 0)
        take(b"", True)
    finally:
        os.close(read_end)
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    where = ""
    try:
        raw = stage[:_STAGE_BYTES]
        where = raw[: raw.find(b"\0")].decode("utf-8", "replace")
    finally:
        stage.close()
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum in (signal.SIGINT, signal.SIGPIPE):
            emit(b"".join(held))
            return 130 if signum == signal.SIGINT else 1
        report = b"".join(held).decode("utf-8", "replace")
        line = crash_message(tool, signum, where, report, user_program)
        emit((line + "\n").encode("utf-8"))
        return 1
    emit(b"".join(held))
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
