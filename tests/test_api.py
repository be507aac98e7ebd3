"""The public face: names, the xarray backend entry point, the ``.tse`` accessor, dask chunks,
error messages for bad input, import hygiene and the layering of the package.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import tsexplore as tse
from tsexplore.errors import (
    ConfigError,
    IndexingError,
    MissingDependencyError,
    SourceError,
    TsExploreDeprecationWarning,
    TsExploreError,
    UnsupportedSourceError,
    missing_dependency,
)
from tsexplore.xarray import TsExploreBackendEntrypoint, sources_of

PACKAGE = Path(tse.__file__).resolve().parent
GUI = ("ipywidgets", "holoviews", "bokeh", "panel", "IPython")
HEAVY = ("ipywidgets", "holoviews", "bokeh", "panel", "anywidget", "torch", "tensorflow", "cupy")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("api") / "s.zarr"
    values = np.random.default_rng(5).standard_normal((6, 10, 12)).astype("float32")
    group = zarr.open_group(str(path), mode="w")
    arr = group.create_array(
        "temp",
        shape=values.shape,
        chunks=(2, 5, 6),
        dtype="float32",
        dimension_names=("time", "y", "x"),
    )
    arr[...] = values
    arr.attrs["units"] = "K"
    other = group.create_array(
        "mask", shape=(10, 12), chunks=(5, 6), dtype="int8", dimension_names=("y", "x")
    )
    other[...] = 1
    group.attrs["title"] = "api"
    return path, values


# -- names ---------------------------------------------------------------------------------------


def test_public_names_exist() -> None:
    for name in tse.__all__:
        assert hasattr(tse, name), name
    for name in (
        "open_dataset",
        "stats",
        "explore",
        "reduce",
        "batches",
        "sample_data",
        "synthetic",
        "close",
        "config",
        "errors",
        "StatsSnapshot",
        "Priority",
    ):
        assert name in tse.__all__ and callable(getattr(tse, name)) or name in ("config", "errors")
    assert isinstance(tse.stats(), tse.StatsSnapshot)
    assert issubclass(tse.TsExploreError, Exception)


def test_open_dataset_is_lazy_and_correct(store: tuple[Path, np.ndarray]) -> None:
    path, values = store
    ds = tse.open_dataset(path)
    assert tse.stats().reads == 0  # metadata only
    assert ds.attrs["title"] == "api" and ds["temp"].attrs["units"] == "K"
    assert ds["temp"].encoding["chunks"] == (2, 5, 6)
    assert ds["temp"].encoding["preferred_chunks"] == {"time": 2, "y": 5, "x": 6}
    np.testing.assert_array_equal(ds["temp"].isel(time=3).values, values[3])
    assert tse.stats().reads == 4  # one time-chunk slab of 2 x 2 chunks, nothing else


# -- xarray backend ----------------------------------------------------------------------------


def test_backend_entry_point_is_registered() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="xarray.backends")}
    assert names.get("tsexplore") == "tsexplore.xarray:TsExploreBackendEntrypoint"
    assert "tsexplore" in xr.backends.list_engines()


def test_xr_open_dataset_engine_tsexplore(store: tuple[Path, np.ndarray]) -> None:
    path, values = store
    via_xr = xr.open_dataset(path, engine="tsexplore")
    xr.testing.assert_identical(via_xr.load(), tse.open_dataset(path).load())
    dropped = xr.open_dataset(path, engine="tsexplore", drop_variables=["mask"])
    assert set(dropped.data_vars) == {"temp"}
    with pytest.raises(ConfigError, match="missing"):
        xr.open_dataset(path, engine="tsexplore", missing="sometimes")


@pytest.fixture(scope="module")
def cf_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with CF encodings (times, packing, a fill value, characters), by xarray."""
    path = tmp_path_factory.mktemp("api-cf") / "cf.zarr"
    temp = np.linspace(-5, 30, 24).reshape(4, 6)
    temp[0, 0] = np.nan
    ds = xr.Dataset(
        {
            "temp": (("time", "x"), temp, {"units": "degC"}),
            "flag": (("x",), np.array([0, 1, 2, -1, 1, 0], "i2")),
            "code": (("x", "nchar"), np.full((6, 2), b"a")),
            "lag": (("time",), np.arange(4) * np.timedelta64(90, "m")),
        },
        coords={"time": xr.date_range("2000-01-01", periods=4, freq="D").values, "x": np.arange(6.0)},
        attrs={"title": "cf"},
    )
    ds["temp"].encoding.update(dtype="int16", scale_factor=0.01, _FillValue=-32768)
    ds["flag"].encoding["_FillValue"] = -1
    ds["temp"].attrs["coordinates"] = "x"
    ds.to_zarr(path, zarr_format=3, mode="w")
    return path


DECODER_CASES = [
    {},
    {"decode_cf": False},
    {"mask_and_scale": False},
    {"decode_times": False},
    {"decode_timedelta": False},
    {"decode_times": xr.coders.CFDatetimeCoder(use_cftime=True)},
    {"concat_characters": False},
    {"decode_coords": False},
    {"decode_coords": "all"},
    {"drop_variables": ["flag", "x"]},
    {"mask_and_scale": {"temp": False}},
]


@pytest.mark.parametrize("opts", DECODER_CASES, ids=[str(sorted(c)) for c in DECODER_CASES])
def test_xarray_decoder_options_are_honoured(cf_store: Path, opts: dict) -> None:
    """Both open paths take xarray's decoder options and give what xarray's zarr engine gives."""
    assert set(tse.xarray.DECODER_OPTIONS) <= set(TsExploreBackendEntrypoint.open_dataset_parameters)
    truth = xr.open_dataset(cf_store, engine="zarr", **opts).load()
    xr.testing.assert_identical(xr.open_dataset(cf_store, engine="tsexplore", **opts).load(), truth)
    xr.testing.assert_identical(tse.open_dataset(cf_store, **opts).load(), truth)
    xr.testing.assert_identical(tse.open_dataset(cf_store, chunks={}, **opts).load(), truth)


def test_use_cftime_keyword_as_xarray_takes_it(cf_store: Path) -> None:
    with pytest.warns(FutureWarning, match="use_cftime"):
        truth = xr.open_dataset(cf_store, engine="zarr", use_cftime=True).load()
    with pytest.warns(FutureWarning, match="use_cftime"):
        got = tse.open_dataset(cf_store, use_cftime=True).load()
    xr.testing.assert_identical(got, truth)
    assert type(got["time"].values[0]).__module__.startswith("cftime")


def test_unknown_keyword_names_the_decoder_options(store: tuple[Path, np.ndarray]) -> None:
    with pytest.raises(ConfigError, match="unknown keyword.*decode_times"):
        tse.open_dataset(store[0], decode_dates=False)


def test_guess_can_open() -> None:
    entry = TsExploreBackendEntrypoint()
    assert entry.guess_can_open("a/b.zarr") and entry.guess_can_open("x.npy")
    assert not entry.guess_can_open("notes.txt") and not entry.guess_can_open(object())


def test_chunks_give_dask_arrays_reading_through_the_engine(store: tuple[Path, np.ndarray]) -> None:
    import dask.array as da

    path, values = store
    ds = tse.open_dataset(path, chunks={})
    assert isinstance(ds["temp"].data, da.Array)
    assert ds["temp"].data.chunksize == (2, 5, 6)
    np.testing.assert_allclose(ds["temp"].mean("time").compute().values, values.mean(0), atol=1e-6)
    assert tse.stats().reads == 12  # every chunk once, through the engine
    coarse = tse.open_dataset(path, chunks={"time": 6})
    assert coarse["temp"].data.chunksize[0] == 6
    with pytest.raises(ConfigError, match="chunks"):
        tse.open_dataset(path, chunks="bad")


def test_accessor(store: tuple[Path, np.ndarray]) -> None:
    path, _ = store
    ds = tse.open_dataset(path)
    assert isinstance(ds.tse.stats(), tse.StatsSnapshot)
    (src,) = ds["temp"].tse.sources
    assert src.shape == (6, 10, 12) and src.dims == ("time", "y", "x")
    assert len(ds.tse.sources) == 2
    assert sources_of(ds["temp"].isel(time=slice(0, 2))) == [src]  # survives lazy indexing
    for method in ("mean", "sum", "std", "var", "min", "max", "count", "histogram", "batches"):
        assert callable(getattr(ds["temp"].tse, method))


def test_open_dataset_accepts_objects() -> None:
    values = np.arange(24, dtype="int32").reshape(4, 6)
    da = xr.DataArray(values, dims=("a", "b"), name="named", coords={"a": [1, 2, 3, 4]})
    ds = tse.open_dataset(da)
    assert list(ds.data_vars) == ["named"]
    np.testing.assert_array_equal(ds["a"].values, [1, 2, 3, 4])
    np.testing.assert_array_equal(ds["named"].values, values)
    ds2 = tse.open_dataset(values)
    assert list(ds2.data_vars) == ["data"]


def test_the_budget_is_set_once_for_the_process(store: tuple[Path, np.ndarray]) -> None:
    tse.config.set(cache_bytes=12_345_678)
    first = tse.open_dataset(store[0])
    assert tse.stats().cache_budget == 12_345_678
    # the per-open argument sets the same one budget, and says so
    with pytest.warns(TsExploreDeprecationWarning, match=r"tse.config.set\(cache_bytes=2000000\)"):
        second = tse.open_dataset(store[0], cache_bytes=2_000_000)
    assert tse.stats().cache_budget == tse.config.get().cache_bytes == 2_000_000
    np.testing.assert_array_equal(first["temp"].values, second["temp"].values)
    assert 0 < tse.stats().cache_bytes <= 2_000_000  # both datasets' chunks, in the one budget


# -- errors -----------------------------------------------------------------------------------------


def test_unknown_path(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.nc4x"
    with pytest.raises(UnsupportedSourceError, match="does not exist") as info:
        tse.open_dataset(missing)
    assert str(missing) in str(info.value)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(UnsupportedSourceError, match="Zarr stores .* NetCDF"):
        tse.open_dataset(text)
    with pytest.raises(SourceError, match="no Zarr store|cannot open"):
        tse.open_dataset(tmp_path / "absent.zarr")


def test_unreadable_files_name_the_problem(tmp_path: Path) -> None:
    bad_npy = tmp_path / "bad.npy"
    bad_npy.write_bytes(b"not a numpy file at all")
    with pytest.raises(SourceError, match="bad.npy"):
        tse.open_dataset(bad_npy)
    bad_nc = tmp_path / "bad.nc"
    bad_nc.write_bytes(b"GARBAGE!")
    with pytest.raises(SourceError, match="neither NetCDF3"):
        tse.open_dataset(bad_nc)


def test_unknown_kind_of_object() -> None:
    with pytest.raises(UnsupportedSourceError, match="object of type dict") as info:
        tse.open_dataset({"a": 1})
    assert isinstance(info.value, TsExploreError) and isinstance(info.value, TypeError)
    with pytest.raises(UnsupportedSourceError, match="int"):
        tse.open_dataset(42)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"missing": "ignore"}, r"missing must be 'raise' or 'fill', got 'ignore'"),
        ({"prefetch": "always"}, r"prefetch must be one of .*'auto'.*got 'always'"),
        ({"cache_bytes": -5}, r"cache_bytes .* got -5"),
        ({"cache_bytes": "1GB"}, r"cache_bytes .* got '1GB'"),
        ({"cache_bytes": 1.5}, r"cache_bytes .* got 1.5"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str, store: tuple[Path, np.ndarray]) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        tse.open_dataset(store[0], **kwargs)
    assert isinstance(info.value, (TsExploreError, ValueError))


def test_bad_settings_and_synthetic_arguments() -> None:
    with pytest.raises(ConfigError, match="unknown setting"):
        tse.config.set(speed=11)
    with pytest.raises(ConfigError, match="cache_bytes"):
        tse.config.set(cache_bytes=-1)
    with pytest.raises(ConfigError, match="shape"):
        tse.synthetic((-1, 4))
    with pytest.raises(ConfigError, match="dtype"):
        tse.synthetic((4,), dtype="U3")
    with pytest.raises(ConfigError, match="chunks"):
        tse.synthetic((4, 4), chunks=(0, 2))
    with pytest.raises(ConfigError, match="unknown dims"):
        tse.synthetic((4, 4), chunks={"nope": 2})


def test_out_of_range_selection_is_an_indexing_error() -> None:
    from tsexplore.engine.array import read_selection

    (src,) = sources_of(tse.synthetic((4, 4), (2, 2)))
    with pytest.raises(IndexingError, match="out of range") as info:
        read_selection(src, (7, 0))
    assert isinstance(info.value, IndexError)
    with pytest.raises(IndexingError, match="1-D integer/boolean"):
        read_selection(src, (np.array([[0]]), 0))
    with pytest.raises(IndexingError, match="too many"):
        read_selection(src, (0, 0, 0))


def test_missing_dependency_names_the_extra() -> None:
    err = missing_dependency("cupy", "gpu", "backend='cupy'")
    assert isinstance(err, MissingDependencyError) and isinstance(err, ImportError)
    assert "pip install 'tsexplore[gpu]'" in str(err) and "cupy" in str(err)


# -- import hygiene and layering -------------------------------------------------------------------


@pytest.mark.slow
def test_import_does_not_pull_heavy_stacks() -> None:
    code = (
        "import json, sys; import tsexplore, tsexplore.engine, tsexplore.sources, tsexplore.xarray, tsexplore.pyramid;"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY)!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TSEXPLORE_SAMPLE_SIZE": "small"},
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute names of every module imported anywhere in ``path`` (lazy imports included)."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    if package and package[-1] == "__init__":
        package = package[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
            found += [(n, node.lineno) for n in names]
    return found


@pytest.mark.parametrize("layer", ["engine", "sources"])
def test_engine_and_sources_never_import_gui_code(layer: str) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files
    offenders = [
        f"{f.relative_to(PACKAGE)}:{line} imports {name}"
        for f in files
        for name, line in _imports(f)
        if name.split(".")[0] in GUI
    ]
    assert not offenders, offenders


def test_empty_negative_step_slice_reads_nothing() -> None:
    """xarray's decompose_indexer raises on these for every backend; the engine's array not."""
    ds = tse.open_dataset(np.arange(1, dtype="int16"))
    assert ds["data"].isel(dim_0=slice(None, 0, -1)).values.shape == (0,)
    ds5 = tse.open_dataset(np.arange(5, dtype="int16"))
    np.testing.assert_array_equal(ds5["data"].isel(dim_0=slice(0, 0, -1)).values, [])
    np.testing.assert_array_equal(ds5["data"][::-2].values, [4, 2, 0])
