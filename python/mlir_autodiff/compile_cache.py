"""The persistent compilation cache of `jit`: compiled versions that outlive the process.

On a miss, `jit` (CPU) compiles a version in memory with the ExecutionEngine,
as without the cache, and calls it at once; in a background thread the same
lowered module (the LLVM dialect the ExecutionEngine compiled, for this host's
CPU) becomes a shared library through the export path (`native_build`:
`mlir-translate`, `opt`, `llc` and the C compiler) and is stored as an entry.
The thread runs no MLIR pass and touches no MLIR object (the module's text is
taken first), so the first call pays nothing for the cache; at exit the
process waits for its pending entries (`flush`), so a short script's
versions are cached too. A later process that traces the same module finds
the entry and loads it: no transform pass, no lowering, no LLVM.

    AUTODIFF_CACHE=0            disables the cache (jit uses the ExecutionEngine)
    AUTODIFF_CACHE_DIR=path     where entries live (default $XDG_CACHE_HOME/mlir-autodiff,
                                else ~/.cache/mlir-autodiff)
    AUTODIFF_CACHE_MAX_MB=n     size cap (default 2048): least recently used entries go

The key of an entry (`Cache.key`) is a sha256 over everything the native code
depends on: the traced module's text (without locations: they only shape
diagnostics, and a hit produces none; a miss compiles the module with them),
the device, threads, donated leaves, the CPU target (`native`: this host's
CPU model and /proc/cpuinfo flags), the machine the CPU schedules' tiles are
derived from (`transforms/cpu/machine.py`: caches, cores, vector width, with
its AUTODIFF_CPU_* overrides), whether CPU schedules are strict, the
versions of this package, the MLIR bindings and LLVM's tools, a fingerprint
of the package's sources (size and mtime of each file: an edited pass never
hits an entry of the old code) and the entry and artifact formats.

An entry is a directory `<root>/<key>/` holding `artifact.so` and
`entry.json` (the key, the library's sha256 and what `jit` needs to call
it: `@main`'s native convention, the result remap, results computed in
donated buffers). It is written in a temporary directory and renamed into
place, so readers see a whole entry or none; when several processes compile
the same key at once, each builds, the first rename wins and the others use
the winner's entry. Before loading, the entry is checked: its files must be
plain files owned by the user and not writable by group or others (loading
a library runs its code), the JSON must parse and name this key, and the
library's sha256 must match; any failure moves the entry aside and compiles
it again. The root directory is created private to the user (0700); a root
owned by someone else or writable by group/others disables the cache with a
warning. A hit touches the entry's mtime; after each store, entries are
evicted least recently used first until the cache is under the cap.

Not cached (compiled in memory by the ExecutionEngine, as with
AUTODIFF_CACHE=0): `device="gpu"` versions (they still run on MLIR's CUDA
runtime; a GPU entry would be an export-style artifact with our CUDA
runtime, keyed by the chip, not tested on a GPU yet), and every version
when no C compiler or LLVM tool is found or the cache cannot be written
(one warning says why).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from . import aot, dialects, native_build, transforms
from .native_build import _host_cpu_name, tool_versions
from .native_call import NativeFunction
from .transforms import llvm_options
from .transforms.cpu.machine import host_machine
from .transforms.cpu.pipeline import STRICT_ENV

__all__ = ["Cache", "Entry", "active", "cache_dir", "flush", "store_in_background",
           "ENTRY_FORMAT"]

ENABLE_ENV = "AUTODIFF_CACHE"
DIR_ENV = "AUTODIFF_CACHE_DIR"
MAX_MB_ENV = "AUTODIFF_CACHE_MAX_MB"
DEFAULT_MAX_MB = 2048
#: Version of the entry layout and of the key's contents (bump on any change).
ENTRY_FORMAT = 2
ENTRY_JSON = "entry.json"
LIBRARY = "artifact.so"
#: Temporary and discarded directories older than this (seconds) are removed on eviction.
STALE_S = 3600.0

#: Statistics of this process (tests and benchmarks read them).
stats = {"hits": 0, "misses": 0, "stores": 0, "rebuilt": 0, "evicted": 0, "failed": 0}

#: Entries being written by background threads (see `store_in_background`).
_PENDING: list[threading.Thread] = []
_PENDING_LOCK = threading.Lock()
#: Seconds the process waits at exit for its pending entries.
EXIT_WAIT_S = 120.0


def store_in_background(cache: Cache, key: str, name: str, meta: dict[str, Any],
                        build: Callable[[str], None]) -> threading.Thread:
    """`cache.store(key, ...)` in a thread; a failure is counted and warned about once,
    never raised (the version already runs from memory)."""

    def work() -> None:
        # the whole builder thread at idle priority (its tools and theirs inherit it)
        native_build.idle_thread()
        try:
            cache.store(key, name, meta, build)
        except Exception as err:  # noqa: BLE001 - a cache write must never break a program
            stats["failed"] += 1
            _warn_once(f"could not store a compiled version ({err})")

    thread = threading.Thread(target=work, name=f"autodiff-cache-{key[:8]}", daemon=True)
    with _PENDING_LOCK:
        _PENDING[:] = [t for t in _PENDING if t.is_alive()]
        _PENDING.append(thread)
    thread.start()
    return thread


def flush(timeout: float | None = None) -> bool:
    """Wait for the entries being written in the background; True if all finished."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _PENDING_LOCK:
        pending = list(_PENDING)
    for thread in pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        thread.join(left)
    with _PENDING_LOCK:
        _PENDING[:] = [t for t in _PENDING if t.is_alive()]
        return not _PENDING


atexit.register(lambda: flush(EXIT_WAIT_S))


def cache_dir() -> str:
    """The cache's root: $AUTODIFF_CACHE_DIR, else $XDG_CACHE_HOME/mlir-autodiff, else
    ~/.cache/mlir-autodiff."""
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "mlir-autodiff")


def enabled() -> bool:
    """Whether `jit` uses the cache (AUTODIFF_CACHE is not 0/false/off/no)."""
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def max_bytes() -> int:
    raw = os.environ.get(MAX_MB_ENV, "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        _warn_once(f"{MAX_MB_ENV}={raw!r} is not a number; using {DEFAULT_MAX_MB}")
        mb = DEFAULT_MAX_MB
    return int(mb * 1024 * 1024)


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(f"mlir-autodiff compilation cache: {msg}", RuntimeWarning, stacklevel=3)


def _private_enough(st: os.stat_result) -> bool:
    """Owned by this user and not writable by group or others."""
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def active() -> Cache | None:
    """The cache `jit` uses now, or None (disabled, or a root that is not safe to use)."""
    if not enabled():
        return None
    root = cache_dir()
    try:
        if not os.path.isdir(root):
            os.makedirs(os.path.dirname(root), exist_ok=True)
            try:
                os.mkdir(root, 0o700)
            except FileExistsError:
                pass
            else:
                os.chmod(root, 0o700)  # whatever the umask
        st = os.stat(root)
    except OSError as err:
        _warn_once(f"cannot create {root} ({err}); compiling without it")
        return None
    if not stat.S_ISDIR(st.st_mode) or not _private_enough(st):
        _warn_once(f"{root} is not a directory owned by this user and closed to writes by "
                   "others; compiling without the cache")
        return None
    return Cache(root)


# --------------------------------------------------------------------------- the key

def _cpu_flags() -> list[str]:
    flags = aot.cpu_flags()
    return sorted(flags) if flags is not None else []


@functools.lru_cache(maxsize=None)
def _host() -> dict[str, Any]:
    return {"cpu_model": _host_cpu_name(), "cpu_flags": _cpu_flags()}


def _source_dirs() -> list[str]:
    return [os.path.dirname(os.path.abspath(__file__)), *transforms.__path__,
            *dialects.__path__]


@functools.lru_cache(maxsize=None)
def source_fingerprint() -> str:
    """A digest of the package's files (path, size, mtime): code that compiles differently
    after an edit never hits the old entries, even without a version bump."""
    h = hashlib.sha256()
    for top in sorted(set(_source_dirs())):
        for folder, subdirs, files in os.walk(top):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def versions() -> dict[str, Any]:
    """What built the code: package, MLIR and LLVM tool versions, formats, sources."""
    return {**tool_versions(), "artifact_format": aot.FORMAT_VERSION,
            "entry_format": ENTRY_FORMAT, "sources": source_fingerprint()}


# --------------------------------------------------------------------------- entries

class CacheError(RuntimeError):
    """An entry could not be written (the caller compiles without the cache)."""


@dataclasses.dataclass
class Entry:
    """A loaded cache entry: the library, its `@main` and what the caller stored with it."""

    path: str
    meta: dict[str, Any]
    lib: Any
    main: NativeFunction

    def __post_init__(self) -> None:
        # The library is unloaded with its last user (jit evicts versions: memory stays
        # bounded); each load holds its own reference count in the dynamic loader.
        weakref.finalize(self, _unload, self.lib)


def _unload(lib: Any) -> None:
    try:
        import _ctypes

        _ctypes.dlclose(lib._handle)
    except (ImportError, AttributeError, OSError):
        pass


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Cache:
    """The entries under one root directory (see the module doc)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def key(self, module_text: str, *, device: str, threads: int, donated: Sequence[int],
            cpu: str = "native", chip: str | None = None, opt_level: int = 3) -> str:
        """The sha256 (hex) naming the entry of one compiled version."""
        fields = {
            "module": module_text, "device": device, "threads": int(threads),
            "donated": [int(d) for d in donated], "cpu": cpu, "opt_level": opt_level,
            "llvm_options": list(llvm_options.cpu_options()),
            "strict_schedules": os.environ.get(STRICT_ENV) == "1",
            "host": _host() if cpu == "native" else None,
            # the schedules' tiles are derived from it, whatever the target
            "machine": host_machine().key(),
            "chip": chip if device == "gpu" else None,
            "versions": versions(),
        }
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()

    def path(self, key: str) -> str:
        return os.path.join(self.root, key)

    # -- reading -------------------------------------------------------------------------

    def _check(self, key: str) -> dict[str, Any] | str:
        """The entry's JSON if the entry is sound, else why not (a missing entry: "")."""
        path = self.path(key)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return ""
        if not stat.S_ISDIR(st.st_mode) or not _private_enough(st):
            return "the entry is not a private directory of this user"
        for name in (ENTRY_JSON, LIBRARY):
            try:
                fst = os.lstat(os.path.join(path, name))
            except FileNotFoundError:
                return f"{name} is missing"
            if not stat.S_ISREG(fst.st_mode) or not _private_enough(fst):
                return f"{name} is not a plain file of this user closed to writes by others"
        try:
            with open(os.path.join(path, ENTRY_JSON)) as f:
                entry = json.load(f)
        except (OSError, ValueError) as err:
            return f"{ENTRY_JSON} is unreadable ({err})"
        if (not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT
                or entry.get("key") != key or not isinstance(entry.get("meta"), dict)
                or not isinstance(entry.get("sha256"), str)):
            return f"{ENTRY_JSON} does not describe this entry"
        try:
            digest = _sha256(os.path.join(path, LIBRARY))
        except OSError as err:
            return f"{LIBRARY} is unreadable ({err})"
        if digest != entry["sha256"]:
            return f"{LIBRARY} does not match its recorded sha256"
        return entry

    def load(self, key: str, name: str) -> Entry | None:
        """The entry `key`, checked and loaded; None when there is none or it is unsound
        (then it is moved aside, and the caller compiles it again)."""
        checked = self._check(key)
        if isinstance(checked, str):
            if checked:
                stats["rebuilt"] += 1
                self._discard(key)
            return None
        path = self.path(key)
        meta = checked["meta"]
        try:
            lib, main = aot.load_main(os.path.join(path, LIBRARY), meta["main"], name, "cpu",
                                      path)
        except (aot.ArtifactError, KeyError, TypeError) as err:
            _warn_once(f"entry {key[:12]} cannot be loaded ({err}); compiling it again")
            stats["rebuilt"] += 1
            self._discard(key)
            return None
        try:
            os.utime(path)  # least recently used = oldest mtime
        except OSError:
            pass
        return Entry(path, meta, lib, main)

    def _discard(self, key: str) -> None:
        """Move an unsound entry out of the way (atomically), then delete it."""
        trash = os.path.join(self.root, f".trash-{key[:16]}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(self.path(key), trash)
        except OSError:
            return  # gone already (another process discarded or evicted it)
        shutil.rmtree(trash, ignore_errors=True)

    # -- writing -------------------------------------------------------------------------

    def store(self, key: str, name: str, meta: dict[str, Any],
              build: Callable[[str], None]) -> Entry:
        """Write the entry `key`: `build(path)` writes the library at `path`; `meta` is
        stored beside it. Returns the loaded entry (another process's, if it won)."""
        try:
            tmp = tempfile.mkdtemp(prefix=".tmp-", dir=self.root)
        except OSError as err:
            raise CacheError(f"cannot write in {self.root}: {err}") from None
        try:
            lib_path = os.path.join(tmp, LIBRARY)
            build(lib_path)
            entry = {"format": ENTRY_FORMAT, "key": key, "name": name,
                     "sha256": _sha256(lib_path), "meta": meta}
            with open(os.path.join(tmp, ENTRY_JSON), "w") as f:
                json.dump(entry, f, indent=1)
            for p in (lib_path, os.path.join(tmp, ENTRY_JSON)):
                os.chmod(p, stat.S_IMODE(os.stat(p).st_mode) & ~0o077)
            for _ in range(3):
                try:
                    os.rename(tmp, self.path(key))
                    stats["stores"] += 1
                    break
                except OSError:
                    # Another process stored the same key first: use its entry if sound
                    # (a rename of a directory never replaces a non-empty one).
                    won = self.load(key, name)
                    if won is not None:
                        return won
            else:
                raise CacheError(f"cannot move the entry {key[:12]} into place")
        except OSError as err:
            raise CacheError(f"cannot write the entry {key[:12]}: {err}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        loaded = self.load(key, name)
        if loaded is None:
            raise CacheError(f"the entry {key[:12]} vanished after it was written")
        self.evict(keep=key)
        return loaded

    # -- size ----------------------------------------------------------------------------

    def entries(self) -> list[tuple[str, float, int]]:
        """(key, mtime, size in bytes) of each entry."""
        out = []
        try:
            names = os.listdir(self.root)
        except OSError:
            return out
        for name in names:
            path = os.path.join(self.root, name)
            try:
                st = os.lstat(path)
                if name.startswith("."):
                    if time.time() - st.st_mtime > STALE_S:  # a crashed writer's leftovers
                        shutil.rmtree(path, ignore_errors=True)
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    continue
                size = sum(os.lstat(os.path.join(path, f)).st_size for f in os.listdir(path))
            except OSError:
                continue
            out.append((name, st.st_mtime, size))
        return out

    def evict(self, keep: str | None = None) -> None:
        """Remove least recently used entries (never `keep`) until under the size cap."""
        cap = max_bytes()
        entries = self.entries()
        total = sum(size for _, _, size in entries)
        for key, _, size in sorted(entries, key=lambda e: e[1]):
            if total <= cap:
                break
            if key == keep:
                continue
            self._discard(key)
            stats["evicted"] += 1
            total -= size
