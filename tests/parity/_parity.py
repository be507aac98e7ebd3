"""The parity check: a tsexplore-opened dataset against xarray's own backend, on every path.

``compare_store(path, fmt, data)`` opens one store on each path and compares it with what
xarray's own engine gives for the same store and the same options:

- ``lazy``: ``tse.open_dataset(path)`` against ``xr.open_dataset(path, engine=E)``;
- ``dask``: ``tse.open_dataset(path, chunks={})`` against ``xr.open_dataset(..., chunks={})``,
  including every variable's dask chunks;
- ``options``: ``xr.open_dataset(path, engine="tsexplore", **options)`` with xarray's decoder
  options drawn at random (``decode_cf``, ``mask_and_scale``, ``decode_times`` incl. a
  ``CFDatetimeCoder``, ``decode_timedelta``, ``concat_characters``, ``decode_coords``,
  ``drop_variables``). ``tse.open_dataset`` and ``engine="tsexplore"`` are the same code
  (xarray's ``open_dataset`` over the tsexplore entrypoint): each path is counted once;
- ``independent:<engine>``: for NetCDF files, a second library that shares no code with the
  store tsexplore reads through (``netcdf4`` for a file read with h5netcdf and the other way
  round, ``netcdf4`` for NetCDF3 read with scipy): equal values, dims, coordinates
  (``xr.testing.assert_equal``; encodings and attribute types are each library's own), so a
  mistake tsexplore shares with its reader's store can show.

``E`` is xarray's engine over the same store as tsexplore's reader
(:func:`tsexplore.sources.netcdf.engine_for`: scipy for NetCDF3, and for HDF5 the library
that wrote the file), so encodings compare key by key.

Each comparison is ``xr.testing.assert_identical`` of the loaded datasets, the same
``encoding`` (every key, NaN-aware) for the dataset and each variable, and random basic,
outer and vectorized ``isel`` (drawn with ``xarray.testing.strategies``) against the same
selection of xarray's loaded dataset, i.e. NumPy's meaning of the indexers: where xarray's
own lazy reader disagrees with NumPy (negative-step slices), tsexplore matches NumPy.
When xarray refuses an option or a store, tsexplore must refuse it with the same error type.

Every comparison is counted where it is made: :data:`COUNTS` (format, path) -> compared,
:data:`DIFFERED` (format, path) -> how many of those found a difference (the test then
fails); ``conftest.py`` writes both to ``test-artifacts/parity-counts.json``.
"""

from __future__ import annotations

import math
import os
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr
import xarray.testing.strategies as xrst
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import tsexplore as tse

#: ``TSEXPLORE_PARITY_EXAMPLES`` bounds the generated examples per format (30 when every test
#: runs, ``make test``; 5 in plain ``pytest``'s quick set: tests/conftest.py), so the suite
#: stays within a few minutes on two busy cores; examples are derandomized (the same on
#: every run) unless ``TSEXPLORE_PARITY_RANDOM=1``. Applied per test, never loaded globally.
SETTINGS = settings(
    max_examples=int(os.environ.get("TSEXPLORE_PARITY_EXAMPLES", "30")),
    deadline=None,
    derandomize=os.environ.get("TSEXPLORE_PARITY_RANDOM", "0") != "1",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

#: (format, path) -> how many datasets (or files) were compared on that path
COUNTS: Counter[tuple[str, str]] = Counter()
#: (format, path) -> how many of those comparisons found a difference
DIFFERED: Counter[tuple[str, str]] = Counter()
#: (format, kind) -> how many random isel selections were compared
SELECTIONS: Counter[tuple[str, str]] = Counter()
#: format -> absent chunks read as fill values during the comparisons (sparse stores)
ABSENT: Counter[str] = Counter()
#: the real files compared (path -> xarray engine)
FILES: dict[str, str] = {}
#: format -> chunk parts (blosc blocks) read during the comparisons
PARTS: Counter[str] = Counter()
#: selections where xarray's lazy reader differs from NumPy (tsexplore matched NumPy)
XARRAY_LAZY_DIVERGES: Counter[str] = Counter()

ENGINE_OF = {"zarr2": "zarr", "zarr3": "zarr", "zarr3-sharded": "zarr"}


def same_store_engine(path: str) -> str:
    """xarray's engine over the store tsexplore reads ``path`` with."""
    from tsexplore.sources.netcdf import engine_for

    return engine_for(os.path.abspath(path))


def independent_engine(path: str) -> str | None:
    """A library that shares no code with tsexplore's reader for ``path`` (None: none here)."""
    import importlib.util

    engine = same_store_engine(path)
    if engine == "scipy":
        other = None if path.endswith(".gz") else "netcdf4"
    elif not _is_netcdf4(path):
        return None  # plain HDF5 (no netCDF-4 conventions): each library names its dims its own way
    else:
        other = "h5netcdf" if engine == "netcdf4" else "netcdf4"
    module = {"netcdf4": "netCDF4", "h5netcdf": "h5netcdf"}.get(other or "")
    return other if module and importlib.util.find_spec(module) else None


def _is_netcdf4(path: str) -> bool:
    """A netCDF-4 file (``_NCProperties``, written by netCDF-C or h5netcdf), not bare HDF5."""
    import h5py

    with h5py.File(path, "r") as f:
        return "_NCProperties" in f.attrs


class counted:
    """``with counted(fmt, label): <compare>`` counts one comparison, and a difference when
    the block raises ``AssertionError`` (which it lets through: the test fails)."""

    def __init__(self, fmt: str, label: str, table: Counter[tuple[str, str]] | None = None) -> None:
        self.key, self.table = (fmt, label), COUNTS if table is None else table

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if kind is None or issubclass(kind, AssertionError):
            self.table[self.key] += 1
            if kind is not None:
                DIFFERED[self.key] += 1
        return False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.dtype) or isinstance(b, np.dtype):
        return np.dtype(a) == np.dtype(b) and getattr(a, "metadata", None) == getattr(b, "metadata", None)
    if isinstance(a, (np.ndarray, np.generic, float)) or isinstance(b, (np.ndarray, np.generic, float)):
        try:
            return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)) and (
                np.asarray(a).dtype == np.asarray(b).dtype
            )
        except TypeError:
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return bool(a == b) and type(a) is type(b)


#: what tsexplore adds to a dataset's encoding (how it reads the input, in words)
OWN_ENCODING = ("tsexplore_reader",)


def assert_same_encoding(got: xr.Dataset, ref: xr.Dataset) -> None:
    mine = {k: v for k, v in got.encoding.items() if k not in OWN_ENCODING}
    assert _same(mine, dict(ref.encoding)), (got.encoding, ref.encoding)
    for name, var in ref.variables.items():
        mine, theirs = dict(got[name].encoding), dict(var.encoding)
        assert mine.keys() == theirs.keys(), (name, sorted(mine), sorted(theirs))
        for key in theirs:
            assert _same(mine[key], theirs[key]), (name, key, mine[key], theirs[key])


def assert_parity(got: xr.Dataset, ref: xr.Dataset, *, chunks: bool = False) -> None:
    """Identical values, dims, coords, attrs, dtypes and encodings (and dask chunks)."""
    if chunks:
        for name, var in ref.variables.items():
            assert got[name].variable.chunks == var.chunks, (name, got[name].chunks, var.chunks)
    assert_same_encoding(got, ref)
    xr.testing.assert_identical(got.load(), ref.load())


def outcome(fn: Callable[[], xr.Dataset]) -> tuple[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "ok", fn()
        except Exception as exc:  # noqa: BLE001 - compared with the other side's error
            return "error", exc


@st.composite
def decoder_options(draw: st.DrawFn, names: list[str]) -> dict[str, Any]:
    """A random set of xarray's decoder options (each one may be left out)."""
    opts: dict[str, Any] = {}
    if draw(st.booleans()):
        opts["decode_cf"] = draw(st.booleans())
    if draw(st.booleans()):
        opts["mask_and_scale"] = draw(st.booleans())
    choice = draw(st.sampled_from(["unset", "bool", "coder"]))
    if choice == "bool":
        opts["decode_times"] = draw(st.booleans())
    elif choice == "coder":
        opts["decode_times"] = xr.coders.CFDatetimeCoder(
            use_cftime=draw(st.sampled_from([None, True, False])),
            time_unit=draw(st.sampled_from(["ns", "s", "us"])),
        )
    if draw(st.booleans()):
        opts["decode_timedelta"] = draw(st.sampled_from([True, False]))
    if draw(st.booleans()):
        opts["concat_characters"] = draw(st.booleans())
    if draw(st.booleans()):
        opts["decode_coords"] = draw(st.sampled_from([True, False, "coordinates", "all"]))
    if names and draw(st.booleans()):
        opts["drop_variables"] = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    return opts


def _isel_cases(draw: st.DrawFn, sizes: dict[str, int]) -> list[tuple[str, dict[str, Any]]]:
    sizes = {k: v for k, v in sizes.items() if v > 0}
    if not sizes:
        return []
    cases = [("basic", draw(xrst.basic_indexers(sizes=sizes)))]
    cases.append(("outer", draw(xrst.outer_array_indexers(sizes=sizes, min_dims=1))))
    if len(sizes) >= 2:
        cases.append(("vectorized", draw(xrst.vectorized_indexers(sizes=sizes))))
    return cases


def _negative_step(idx: dict[str, Any]) -> bool:
    return any(isinstance(k, slice) and (k.step or 1) < 0 for k in idx.values())


def check_selections(draw: st.DrawFn, fmt: str, got: xr.Dataset, lazy_ref: xr.Dataset, ref: xr.Dataset) -> None:
    """Random isel of the tsexplore dataset equal the same isel of xarray's loaded one."""
    for kind, idx in _isel_cases(draw, dict(ref.sizes)):
        expected = ref.isel(idx)
        mine = got.isel(idx)
        with counted(fmt, kind, SELECTIONS):
            xr.testing.assert_identical(mine.load(), expected)
        status, theirs = outcome(lambda idx=idx: lazy_ref.isel(idx).load())
        if status == "error" or not theirs.identical(expected):
            XARRAY_LAZY_DIVERGES["negative-step" if _negative_step(idx) else kind] += 1


def compare_store(
    draw: st.DrawFn, path: str, fmt: str, names: list[str], engine: str | None = None,
    reference: Callable[[], Any] | None = None,
) -> None:
    """Compare one store on every path (see the module docstring); counted under ``fmt``.

    ``engine``: xarray's engine for the store (default: the one over the same store);
    ``reference``: what xarray opens (a fresh one per call; default ``path``), e.g. an
    fsspec file object over a URL that xarray's engine does not open by name.
    """
    engine = engine or ENGINE_OF.get(fmt) or same_store_engine(path)
    opts = draw(decoder_options(names))

    def opened_by_xarray() -> Any:
        return path if reference is None else reference()

    runs: list[tuple[str, Callable[[], xr.Dataset], Callable[[], xr.Dataset], bool]] = [
        ("lazy", lambda: tse.open_dataset(path), lambda: xr.open_dataset(opened_by_xarray(), engine=engine), False),
        (
            "dask",
            lambda: tse.open_dataset(path, chunks={}),
            lambda: xr.open_dataset(opened_by_xarray(), engine=engine, chunks={}),
            True,
        ),
        (
            "options",
            lambda: xr.open_dataset(path, engine="tsexplore", **opts),
            lambda: xr.open_dataset(opened_by_xarray(), engine=engine, **opts),
            False,
        ),
    ]
    for label, mine, theirs, chunked in runs:
        status_ref, ref = outcome(theirs)
        status, got = outcome(mine)
        with counted(fmt, label):
            if status_ref == "error":
                assert status == "error", f"{label}: xarray refused {opts} ({ref!r}) but tsexplore opened it"
                assert type(got) is type(ref) or isinstance(got, type(ref)), (label, got, ref)
                continue
            assert status == "ok", f"{label} {opts}: tsexplore failed where xarray opened it: {got!r}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert_parity(got, ref, chunks=chunked)
        if label in ("lazy", "options"):  # fresh (unloaded) datasets for isel
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check_selections(draw, fmt, mine(), theirs(), ref)
    local = "://" not in path
    other = independent_engine(path) if local and engine in ("scipy", "netcdf4", "h5netcdf") else None
    if other is not None:
        status_ref, ref = outcome(lambda: xr.open_dataset(path, engine=other).load())
        if status_ref == "ok":  # (a file the other library cannot read has nothing to say)
            with counted(fmt, f"independent:{other}"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                xr.testing.assert_equal(tse.open_dataset(path).load(), ref)


def n_chunks(shape: tuple[int, ...], chunks: tuple[int, ...]) -> int:
    return math.prod(math.ceil(s / c) for s, c in zip(shape, chunks))
