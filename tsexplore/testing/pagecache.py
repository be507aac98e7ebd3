"""Cold page cache: drop a store's pages before a timed run and measure what is left.

``cold_cache`` (the benchmarks) tries ``sync; echo 3 > /proc/sys/vm/drop_caches`` and always
also calls ``posix_fadvise(POSIX_FADV_DONTNEED)`` on every file of the store; ``evict`` (what
``tse.advise`` does to its candidate stores) flushes and drops only the files it is given, so
nothing else on the machine is disturbed; ``resident_fraction`` asks the kernel (``mincore``)
how much of the files is still in memory afterwards.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def store_files(path: Path) -> list[Path]:
    """Every regular file under the store."""
    out: list[Path] = []
    for root, _dirs, files in os.walk(path):
        out.extend(Path(root) / f for f in files)
    return out


def cold_cache(path: Path, drop_caches: bool = True) -> dict[str, Any]:
    """Drop the store's pages from the page cache; say which methods worked.

    Tries ``sync; echo 3 > /proc/sys/vm/drop_caches`` (needs root; may fail in a container;
    skipped when ``drop_caches`` is False) and always also ``posix_fadvise(DONTNEED)`` on
    every file, then measures with ``mincore`` how much of the store is still resident.
    """
    out: dict[str, Any] = {}
    if not drop_caches:
        out["drop_caches"] = "skipped"
    else:
        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            out["drop_caches"] = "ok"
        except OSError as exc:
            out["drop_caches"] = f"failed: {exc.strerror or exc}"
    files = store_files(path)
    done, errors = _fadvise_dontneed(files, sync=False)
    out["fadvise"] = f"ok ({done} files)" if not errors else f"{done} ok, {len(errors)} failed"
    out["resident_after"] = resident_fraction(files)
    return out


def evict(files: Sequence[Path], sync: bool = True) -> float | None:
    """Drop ``files`` from the page cache; the fraction still resident afterwards (``mincore``).

    ``sync`` first writes their dirty pages back (``fdatasync``): the kernel cannot drop pages
    that are not yet on disk, so a store written a moment ago stays in memory without it.
    """
    _fadvise_dontneed(files, sync)
    return resident_fraction(files)


def _fadvise_dontneed(files: Iterable[Path], sync: bool) -> tuple[int, list[str]]:
    done, errors = 0, []
    if not hasattr(os, "posix_fadvise"):  # not on macOS/Windows: nothing can be dropped
        return done, ["posix_fadvise is not available on this system"]
    for name in files:
        try:
            fd = os.open(name, os.O_RDONLY)
            try:
                if sync:
                    os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                done += 1
            finally:
                os.close(fd)
        except OSError as exc:
            errors.append(f"{Path(name).name}: {exc}")
    return done, errors


def cold_summary(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One line for the report: which method worked and the worst residency seen."""
    recs = [r for r in records if r]
    if not recs:
        return {}
    drops = {r.get("drop_caches") for r in recs}
    resident = [r["resident_after"] for r in recs if r.get("resident_after") is not None]
    methods = []
    if drops == {"ok"}:
        methods.append("drop_caches")
    methods.append("posix_fadvise(DONTNEED)")
    return {
        "methods": methods,
        "drop_caches": sorted(d for d in drops if d),
        "fadvise": recs[-1].get("fadvise"),
        "max_resident_after": max(resident) if resident else None,
        "checks": len(recs),
    }


_libc: Any = None


def resident_fraction(files: Sequence[Path]) -> float | None:
    """Fraction of the files' pages in the page cache (``mincore``); None where unsupported."""
    global _libc
    try:
        if _libc is None:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.mmap.restype = ctypes.c_void_p
            lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_long]
            lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_ubyte)]
            _libc = lib
        page = os.sysconf("SC_PAGE_SIZE")
        resident = total = 0
        for name in files:
            size = os.path.getsize(name)
            if size == 0:
                continue
            npages = (size + page - 1) // page
            fd = os.open(name, os.O_RDONLY)
            try:
                addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
                if addr in (None, ctypes.c_void_p(-1).value):
                    return None
                try:
                    vec = (ctypes.c_ubyte * npages)()
                    if _libc.mincore(addr, size, vec) != 0:
                        return None
                    resident += sum(v & 1 for v in vec)
                finally:
                    _libc.munmap(addr, size)
            finally:
                os.close(fd)
            total += npages
        return resident / total if total else 0.0
    except (OSError, AttributeError, ValueError):
        return None
