"""Stores shared by Python's own ``http.server``, which ignores ``Range``: read them all.

A plain static server (``python -m http.server`` in a Zarr folder, a common way to share one)
answers a byte-range request with the whole object (HTTP 200). fsspec hands that body back
as if it were the range; obstore refuses it (``NotSupportedError``). Either way the engine
cuts the range from the whole object, remembers the host (its later ranges are whole GETs at
once) and counts ``whole_object_fallbacks``. The truth is ``xr.open_zarr`` of the local copy:
stores written by ``ds.to_zarr()`` -- plain, sharded (an index at the end of each shard,
ranges for the inner chunks) and blosc with small blocks (frame-level part reads ask for the
frame's head and its blocks by range) -- read with both remote readers.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from zarr.codecs import BloscCodec

import tsexplore as tse

pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")

READERS = ["obstore", "fsspec"]
SHAPE = (16, 64, 64)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of three stores written by ``ds.to_zarr()``."""
    root = tmp_path_factory.mktemp("static")
    values = np.random.default_rng(11).standard_normal(SHAPE).astype("float32")
    ds = xr.Dataset(
        {"temp": (("time", "y", "x"), values, {"units": "K"})},
        coords={"time": pd.date_range("2000-01-01", periods=SHAPE[0]), "y": np.arange(64.0)},
        attrs={"title": "served by http.server"},
    )
    ds.to_zarr(root / "plain.zarr", mode="w")
    ds.to_zarr(root / "sharded.zarr", mode="w", zarr_format=3,
               encoding={"temp": {"chunks": (2, 16, 16), "shards": (8, 32, 32)}})
    # one 16 KiB blosc block per frame of a deep chunk: a frame is a part read, by range
    blosc = BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", blocksize=64 * 64 * 4)
    ds.to_zarr(root / "blosc.zarr", mode="w", zarr_format=3,
               encoding={"temp": {"chunks": SHAPE, "compressors": [blosc]}})
    return root


class _Handler(SimpleHTTPRequestHandler):
    """The standard library's static file handler, unchanged; it notes the Range headers."""

    seen: list[str | None]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(self.headers.get("Range"))
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass


class _Server(ThreadingHTTPServer):
    """``ThreadingHTTPServer``, quiet when a client hangs up on a body it does not want
    (obstore drops the connection of a 200 answered to a range)."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@pytest.fixture
def server(stores: Path) -> Iterator[tuple[str, list[str | None]]]:
    """``http.server`` serving ``stores`` on 127.0.0.1 (a new port, so a new host, per test):
    its URL and the Range header of every GET it answered (None: a whole GET)."""
    seen: list[str | None] = []
    handler = type("Handler", (_Handler,), {"seen": seen})
    httpd = _Server(("127.0.0.1", 0), functools.partial(handler, directory=str(stores)))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              name="static-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _reader(name: str) -> None:
    if name == "obstore":
        pytest.importorskip("obstore")
    pytest.importorskip("aiohttp")
    tse.config.set(remote_reader=name)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", ["plain", "sharded", "blosc"])
def test_a_store_on_http_server_reads_as_xarray_reads_the_local_copy(
    server, stores: Path, reader: str, name: str
) -> None:
    _reader(reader)
    url, seen = server
    got = tse.open_dataset(f"{url}/{name}.zarr")
    xr.testing.assert_identical(got.load(), xr.open_zarr(stores / f"{name}.zarr").load())
    snap = tse.stats()
    assert snap.errors == 0
    if name == "sharded":  # the index, then the inner chunks, are ranges of each shard
        assert snap.whole_object_fallbacks > 0
        assert [r for r in seen if r is not None]  # a range was asked (and ignored) first
    else:  # whole chunks (loading all of a blosc chunk reads it whole): no range asked
        assert snap.range_requests == snap.whole_object_fallbacks == 0


@pytest.mark.parametrize("reader", READERS)
def test_frames_of_deep_blosc_chunks_are_cut_from_whole_objects(
    server, stores: Path, reader: str
) -> None:
    _reader(reader)
    url, seen = server
    ref = xr.open_zarr(stores / "blosc.zarr")["temp"]
    da = tse.open_dataset(f"{url}/blosc.zarr")["temp"]
    order = [5, 0, 11, 3, 15, 8]  # jumps: no pattern, so frames are parts read by range
    for t in order:
        xr.testing.assert_identical(da.isel(time=t).load(), ref.isel(time=t).load())
    snap = tse.stats()
    assert snap.errors == 0 and snap.part_reads > 0
    assert snap.whole_object_fallbacks >= 1
    # the host is remembered: after the first ignored range, every request is a whole GET
    ranged = [i for i, r in enumerate(seen) if r is not None]
    assert len(ranged) == 1, seen


@pytest.mark.parametrize("reader", READERS)
def test_the_host_is_remembered_across_datasets(server, stores: Path, reader: str) -> None:
    _reader(reader)
    url, seen = server
    ref = xr.open_zarr(stores / "sharded.zarr")["temp"]
    first = tse.open_dataset(f"{url}/sharded.zarr")["temp"]
    xr.testing.assert_identical(first.isel(time=0).load(), ref.isel(time=0).load())
    asked = sum(r is not None for r in seen)
    assert 1 <= asked <= 4  # the indexes of the frame's 2 x 2 shards, asked at once
    tse.close()  # a new engine and a new dataset: the host is known to ignore ranges
    again = tse.open_dataset(f"{url}/sharded.zarr")["temp"]
    xr.testing.assert_identical(again.isel(time=9).load(), ref.isel(time=9).load())
    assert sum(r is not None for r in seen) == asked  # none since
    assert tse.stats().whole_object_fallbacks > 0
    assert "whole-object fallbacks" in repr(tse.stats())
