"""``tse.rechunk(source, target, chunks=...)``: write a whole array in a new layout (Zarr v3).

The plan uses rechunker's algorithm (:mod:`rechunker.algorithm`): when a block aligned with
both the source's chunks and the target's chunks (or shards) fits a share of ``max_mem``, each
task copies such blocks directly (grown by ``consolidate_chunks``); otherwise
``rechunking_plan`` gives read chunks (whole source chunks) and write chunks (whole target
chunks), and the data goes through an intermediate Zarr store in ``temp_dir`` first (removed
afterwards). Dask runs the copy on ``workers`` threads; values
are read through the engine as one-pass reads (nothing is kept in the cache) and written by
xarray's ``to_zarr``, so attributes, coordinates and CF encodings are kept and the result
opens through tsexplore equal to the source.

Memory: ``max_mem`` bounds the data held at once. A part of it (``RESERVE``, at most half)
is kept for the engine's read buffers and the codecs; the rest is split between the workers,
each holding at most three blocks (the block read, the chunks decoded for it, its encoded
copy). Between the two stages and while dask runs, free memory goes back to the system. The
process itself (Python, NumPy, zarr, dask: about 250 MB) comes on top; measured, a 256 MiB
array rechunked with ``max_mem="64MB"`` peaks at 320-345 MiB of RSS.
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ._layout import compressors, layout_of
from .errors import ConfigError

#: encoding keys that say how values are stored (the rest describe the old layout)
CF_KEYS = ("dtype", "_FillValue", "missing_value", "scale_factor", "add_offset", "units", "calendar")
#: blocks of memory each worker is given (the block read, the chunks decoded for it, and its
#: encoded copy)
BLOCKS_PER_WORKER = 3
#: kept out of ``max_mem`` (at most half of it) for what does not grow with the blocks: the
#: engine's read buffers and decoded-chunk pool, the codecs' working memory
RESERVE = 32 * 2**20


def rechunk(
    source: Any,
    target: str | os.PathLike[str],
    chunks: Any,
    codec: Any = None,
    shards: Any = None,
    max_mem: int | str = "1GB",
    *,
    overwrite: bool = False,
    progress: bool = True,
    workers: int | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write every variable of ``source`` to a Zarr v3 store at ``target`` in a new layout.

    ``chunks``: a dict ``{dim: length}`` (dims not named keep their current chunk length) or a
    tuple for arrays of that many dims. ``codec``: a name (``"blosc-lz4-5"``, ``"zstd-3"``,
    ``"none"``...; see :mod:`tsexplore._layout`) or zarr codecs; None keeps the source's codec
    where it is Zarr. ``shards``: like ``chunks``, whole multiples of them (None: no shards).
    ``max_mem`` (bytes or ``"1GB"``) bounds the data held at once. Returns the target's path.
    """
    import dask
    from dask.utils import parse_bytes

    from .xarray import open_dataset

    try:
        budget = int(parse_bytes(max_mem))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"max_mem must be bytes or a size like '1GB', got {max_mem!r}") from exc
    nworkers = int(workers or min(4, os.cpu_count() or 1))
    if nworkers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers!r}")
    target = Path(target)
    ds = _open(source)
    _check_target(source, target, overwrite)
    _check_dims(ds, chunks, "chunks")
    _check_dims(ds, shards, "shards")
    task_mem = (budget - min(RESERVE, budget // 2)) // (BLOCKS_PER_WORKER * nworkers)
    plans = {n: _plan(str(n), ds[n], chunks, codec, shards, task_mem, budget) for n in ds.data_vars}
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(temp_dir or target.parent) / f".{target.name}.rechunk-{uuid.uuid4().hex[:8]}"
    try:
        with dask.config.set(scheduler="threads", num_workers=nworkers):
            data = {n: _read(ds[n], p["read"]) for n, p in plans.items()}
            staged = [n for n, p in plans.items() if p["inter"] is not None]
            if staged:  # no read fits the writes: through an intermediate store
                inter = {n: data[n].chunk(dict(zip(data[n].dims, plans[n]["inter"]))) for n in staged}
                _write(_with_data(ds, inter)[staged], scratch, plans, False, True, progress,
                       "rechunk 1/2 (intermediate)")
                _release()  # stage 1's buffers do not fit stage 2's chunks
                back = open_dataset(scratch, prefetch="off")
                data.update({n: _read(back[n], plans[n]["write"]) for n in staged})
            _write(_with_data(ds, data), target, plans, True, overwrite, progress,
                   "rechunk 2/2" if staged else "rechunk")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _open(source: Any) -> Any:
    import xarray as xr

    from .xarray import open_dataset

    if isinstance(source, xr.DataArray):
        return source.to_dataset(name=source.name if source.name is not None else "data")
    if isinstance(source, xr.Dataset):
        return source
    return open_dataset(source, prefetch="off")


def _check_target(source: Any, target: Path, overwrite: bool) -> None:
    if isinstance(source, (str, os.PathLike)) and "://" not in os.fspath(source):
        src = Path(source).resolve()
        dst = target.resolve()
        if dst == src or src in dst.parents or dst in src.parents:
            raise ConfigError(f"target {target} overlaps the source {source}; write somewhere else")
    if target.exists() and not overwrite:
        raise ConfigError(f"{target} exists; pass overwrite=True to replace it")


def _check_dims(ds: Any, spec: Any, what: str) -> None:
    if isinstance(spec, Mapping):
        unknown = sorted(set(map(str, spec)) - set(map(str, ds.dims)))
        if unknown:
            raise ConfigError(f"{what} names dims {unknown} that the data does not have; "
                              f"dims are {sorted(map(str, ds.dims))}")
    elif spec is not None and not isinstance(spec, (int, Sequence)):
        raise ConfigError(f"{what} must be a dict {{dim: length}} or a tuple, got {spec!r}")
    elif isinstance(spec, Sequence) and not any(v.ndim == len(spec) for v in ds.data_vars.values()):
        raise ConfigError(f"{what}={tuple(spec)} fits no variable: their dims are "
                          f"{[tuple(v.dims) for v in ds.data_vars.values()]}; pass a dict")


def _per_dim(spec: Any, var: Any, default: Sequence[int]) -> tuple[int, ...]:
    """One length per dim of ``var``: a dict by dim (others keep ``default``), an int for
    every dim, or a tuple (variables with another number of dims keep ``default``)."""
    if isinstance(spec, Mapping):
        return tuple(int(spec.get(str(d), c) or c) for d, c in zip(var.dims, default))
    if isinstance(spec, int):
        return (int(spec),) * var.ndim
    if len(spec) == var.ndim:
        return tuple(int(c) for c in spec)
    return tuple(default)


def _plan(name: str, var: Any, chunks: Any, codec: Any, shards: Any, task_mem: int,
          budget: int) -> dict[str, Any]:
    """Target chunks, shards, codec and rechunker's read/intermediate/write chunks."""
    from rechunker.algorithm import consolidate_chunks, rechunking_plan

    from ._layout import check_layout
    from .resolve import sources_of

    found = sources_of(var)
    src = found[0] if found and tuple(found[0].shape) == tuple(var.shape) else None
    now = layout_of(src, var)
    if src is None and not var.chunks:  # in memory: any read is free, the target's is best
        now = replace(now, chunks=_per_dim(chunks, var, now.chunks))
    tgt = tuple(max(1, min(c, s)) for c, s in zip(_per_dim(chunks, var, now.chunks), var.shape))
    shard = _per_dim(shards, var, tgt) if shards is not None else None
    check_layout(tgt, shard, var.shape)
    if shard is not None:  # no longer than the chunks that cover the array
        shard = tuple(min(sh, math.ceil(s / c) * c) for sh, c, s in zip(shard, tgt, var.shape))
        shard = None if shard == tgt else shard
    unit = shard or tgt
    itemsize = var.dtype.itemsize
    biggest = max(math.prod(now.chunks), math.prod(unit)) * itemsize
    if biggest > task_mem:
        from dask.utils import format_bytes

        raise ConfigError(
            f"max_mem={format_bytes(budget)} is too small for {name!r}: a source chunk is "
            f"{format_bytes(math.prod(now.chunks) * itemsize)} and a target "
            f"{'shard' if shard else 'chunk'} {format_bytes(math.prod(unit) * itemsize)}; each "
            f"worker needs {BLOCKS_PER_WORKER} of the larger after a reserve of up to "
            f"{format_bytes(RESERVE)}: raise max_mem or pass fewer workers"
        )
    shape = tuple(max(1, int(s)) for s in var.shape)
    unit = tuple(min(u, s) for u, s in zip(unit, shape))
    # blocks aligned with both grids: a direct copy when one fits (rechunker's plan grows the
    # last axes first and goes through an intermediate store even then)
    block = tuple(min(math.lcm(a, b), s) for a, b, s in zip(now.chunks, unit, shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rechunker's ExcessiveIOWarning: the plan is still valid
        if math.prod(block) * itemsize <= task_mem:
            read = inter = write = consolidate_chunks(shape, block, itemsize, task_mem)
        else:
            read, inter, write = rechunking_plan(shape, now.chunks, unit, itemsize, task_mem)
    read, inter, write = (tuple(int(c) for c in x) for x in (read, inter, write))
    return {
        "chunks": tgt, "shards": shard, "read": read, "write": write,
        "inter": None if read == write else inter,
        "compressors": compressors(codec if codec is not None else now.codec),
    }


def _read(var: Any, chunks: tuple[int, ...]) -> Any:
    """``var`` as a dask array of ``chunks`` whose tasks read through the engine once."""
    import xarray as xr

    from .engine.array import StreamingArray
    from .resolve import sources_of

    found = sources_of(var)
    src = found[0] if found else None
    if src is None or tuple(src.shape) != tuple(var.shape):
        return var.chunk(dict(zip(var.dims, chunks))).variable
    raw = xr.Variable(src.dims, StreamingArray(src).to_dask(chunks), dict(src.attrs))
    decoded = xr.decode_cf(xr.Dataset({"v": raw}))["v"].variable  # as open_dataset decodes it
    return decoded


def _with_data(ds: Any, variables: Mapping[Any, Any]) -> Any:
    out = ds.copy()
    for name, var in variables.items():
        enc = dict(ds[name].encoding)
        out[name] = var
        out[name].encoding = {**enc, **{k: v for k, v in var.encoding.items() if k in CF_KEYS}}
    return out


def _write(ds: Any, path: Path, plans: Mapping[Any, dict[str, Any]], final: bool,
           overwrite: bool, progress: bool, desc: str) -> None:
    """``ds.to_zarr(path)`` (Zarr v3, every chunk written) with a progress bar. ``final``:
    the target's chunks, codecs and shards; else the intermediate store (fast lz4, no shards)."""
    encoding: dict[str, dict[str, Any]] = {}
    for name, var in ds.variables.items():
        enc = {k: _fill(v, var.dtype) if k in ("_FillValue", "missing_value") else v
               for k, v in var.encoding.items() if k in CF_KEYS}
        enc.setdefault("_FillValue", None)
        plan = plans.get(name)
        if plan is not None and final:
            enc.update(chunks=plan["chunks"], compressors=plan["compressors"])
            if plan["shards"] is not None:
                enc["shards"] = plan["shards"]
        elif plan is not None:
            enc.update(chunks=plan["inter"], compressors=compressors("blosc-lz4-1"))
        encoding[str(name)] = enc
    with warnings.catch_warnings(), _progress(progress, desc), _trimming():
        warnings.simplefilter("ignore")  # zarr: consolidated metadata is not in the v3 spec yet
        ds.to_zarr(path, mode="w" if overwrite else "w-", zarr_format=3, encoding=encoding,
                   consolidated=True, write_empty_chunks=True)


def _fill(value: Any, dtype: Any) -> Any:
    """A fill value as a number: zarr v3 stores written by xarray keep a coordinate's
    ``_FillValue`` base64-encoded in its attributes, which come back as text."""
    if isinstance(value, str) and getattr(dtype, "kind", "O") in "biufcmM":
        from xarray.backends.zarr import FillValueCoder

        try:
            return FillValueCoder.decode(value, dtype)
        except Exception:  # noqa: BLE001 - not xarray's encoding: leave it to xarray to judge
            return value
    return value


def _release() -> None:
    """Give free memory back to the system: the engine's pool of decoded-chunk buffers, and
    what glibc's allocator keeps in its per-thread arenas."""
    from .sources import buffers

    buffers.clear()
    _trim()


def _trim() -> None:
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


@contextmanager
def _trimming(every: float = 0.1) -> Iterator[None]:
    """While dask runs, trim glibc's arenas at most every ``every`` seconds: blocks freed by
    a dozen threads (dask, the engine's readers, zarr's codecs) otherwise stay mapped."""
    from dask.callbacks import Callback

    last = [time.monotonic()]

    def posttask(*args: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= every:
            last[0] = now
            _trim()

    with Callback(posttask=posttask):
        yield


@contextmanager
def _progress(enabled: bool, desc: str) -> Iterator[None]:
    """A tqdm bar over dask's tasks (a widget in a notebook, text in a terminal)."""
    if not enabled:
        yield
        return
    from dask.callbacks import Callback
    from tqdm.auto import tqdm

    bar = tqdm(total=0, desc=desc, unit="task")

    def start_state(dsk: Any, state: Any) -> None:
        bar.total = sum(len(state[k]) for k in ("ready", "waiting", "finished", "running") if k in state)
        bar.refresh()

    try:
        with Callback(start_state=start_state, posttask=lambda *a: bar.update(1)):
            yield
    finally:
        bar.close()
