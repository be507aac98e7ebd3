"""Any zarr Store, Group or Array, and references: the same conformance suite as paths.

``tse.open_dataset(store)`` reads metadata through zarr and chunk bytes through the store's
own async ``get`` (byte ranges for shards), decoded by tsexplore. Stores: zarr's
``MemoryStore``, ``FsspecStore`` and ``ObjectStore`` (over obstore), icechunk session
stores (real chunks and virtual ones pointing into files), kerchunk ``reference://`` URLs,
and S3 through moto's server for the URL path (s3fs and obstore). The truth is the NumPy
data the test wrote, as in ``test_sources_conformance``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from test_sources_conformance import (  # the suite next door (tests/ is on sys.path)
    Case,
    SourceConformance,
    _zarr_case,
    write_zarr,
    zarr_expected,
)

import tsexplore as tse
from tsexplore.errors import SourceError
from tsexplore.xarray import sources_of

pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata:UserWarning",
    "ignore::xarray.SerializationWarning",
    "ignore:.*Numcodecs codecs are not in the Zarr version 3:UserWarning",
)

CODECS = ["zstd", "sharding", "sharding-start"]


def _store_case(store: Any, codec: str, consolidate: bool = True, reopen: Any = None) -> Case:
    """Write the suite's group into ``store``; open ``reopen()`` (default: the store)."""
    data = write_zarr(store, 3, codec, consolidate=consolidate)
    target = reopen() if reopen is not None else store
    return Case(
        open=lambda: tse.open_dataset(target),
        expected=zarr_expected(data, 3, codec),
        raw=data,
        path=target,
        fallback=False,
    )


class TestMemoryStore(SourceConformance):
    @pytest.fixture(params=CODECS, scope="class")
    @classmethod
    def case(cls, request: pytest.FixtureRequest) -> Case:
        return _store_case(zarr.storage.MemoryStore(), request.param)

    @pytest.mark.parametrize("codec", [c for c in CODECS if c.startswith("sharding")])
    def test_sharded_reads_are_ranges(self, codec: str) -> None:
        ds = _store_case(zarr.storage.MemoryStore(), codec).open()
        (src,) = sources_of(ds["v"])
        assert src.decoder == "tsexplore-sharded"
        _ = ds["v"].values
        snap = tse.stats()
        assert snap.index_reads >= 1 and snap.range_requests >= snap.index_reads
        assert snap.store_requests == snap.range_requests


class TestZarrGroupAndArray(SourceConformance):
    """A ``zarr.Group`` object (its store: a LocalStore, read as files)."""

    @pytest.fixture(params=CODECS, scope="class")
    @classmethod
    def case(cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
        path = str(tmp_path_factory.mktemp("group") / "g.zarr")
        write_zarr(path, 3, request.param)
        group = zarr.open_group(path, mode="r")
        case = _zarr_case(path, path, 3, request.param)
        case.open = lambda: tse.open_dataset(group)
        case.path = group
        return case

    def test_a_lone_array(self, tmp_path: Path) -> None:
        path = str(tmp_path / "a.zarr")
        write_zarr(path, 3, "sharding")
        arr = zarr.open_group(path, mode="r")["v"]
        ds = tse.open_dataset(arr)
        np.testing.assert_array_equal(ds["v"].values, arr[...])
        assert ds["v"].dims == ("time", "y", "x")
        (src,) = sources_of(ds["v"])
        assert src.decoder == "tsexplore-sharded"


#: these start moto's server (through ``request.getfixturevalue``, which the fixture-based
#: ``s3`` mark of tests/conftest.py cannot see): marked here
S3_PARAMS = [pytest.param(kind, marks=pytest.mark.s3) for kind in ("fsspec-s3", "obstore-s3")]


class TestFsspecAndObjectStores(SourceConformance):
    # a store per test: with one store per class, a full run once left an engine read thread
    # waiting after the S3 cases (fsspec's and obstore's clients keep state from the event
    # loop they first ran on; the cause is not proven)
    @pytest.fixture(params=["fsspec-memory", "obstore-memory", *S3_PARAMS])
    def case(self, request: pytest.FixtureRequest) -> Case:
        kind = request.param
        codec = "sharding"
        if kind == "fsspec-memory":
            store: Any = zarr.storage.FsspecStore.from_url(f"memory://st-{uuid.uuid4().hex[:8]}")
        elif kind == "obstore-memory":
            import obstore.store

            store = zarr.storage.ObjectStore(obstore.store.MemoryStore())
        else:
            moto = request.getfixturevalue("moto_s3")
            url = moto.url(f"stores-{uuid.uuid4().hex[:8]}.zarr")
            if kind == "fsspec-s3":
                store = zarr.storage.FsspecStore.from_url(url, storage_options=moto.storage_options())
            else:
                from obstore.store import S3Store

                bucket, _, prefix = url[len("s3://") :].partition("/")
                store = zarr.storage.ObjectStore(S3Store(
                    bucket, prefix=prefix, endpoint=moto.endpoint, access_key_id="tsexplore-test-key",
                    secret_access_key="tsexplore-test-secret", region="us-east-1",
                    client_options={"allow_http": True},
                ))
        return _store_case(store, codec)

    def test_pickled_source_reads_the_same(
        self, ds: xr.Dataset, case: Case, request: pytest.FixtureRequest
    ) -> None:
        if "obstore-memory" in request.node.name:
            # obstore's MemoryStore lives in this process only: a clear error, not a TypeError
            # from deep inside pickle
            import pickle

            with pytest.raises(SourceError, match="lives in this process only"):
                pickle.dumps(sources_of(ds["v"])[0])
            return
        super().test_pickled_source_reads_the_same(ds, case)


class TestIcechunk(SourceConformance):
    @pytest.fixture(params=CODECS, scope="class")
    @classmethod
    def case(cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
        icechunk = pytest.importorskip("icechunk")
        # on disk, so that a pickled session store (a dask worker's) finds the same repository
        repo = icechunk.Repository.create(
            icechunk.local_filesystem_storage(str(tmp_path_factory.mktemp("icechunk") / "repo")))
        session = repo.writable_session("main")
        case = _store_case(
            session.store, request.param, consolidate=False,
            reopen=lambda: (session.commit("write"), repo.readonly_session("main").store)[1],
        )
        return case


def _virtual_repo(tmp_path: Path, codec: str) -> tuple[Any, dict[str, np.ndarray]]:
    """An icechunk repository whose chunks are virtual references into a local Zarr store."""
    icechunk = pytest.importorskip("icechunk")
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    local = tmp_path / "chunks.zarr"
    data = write_zarr(str(local), 3, codec, consolidate=False)
    prefix = f"file://{tmp_path}/"
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(str(tmp_path)))
    )
    repo = icechunk.Repository.create(
        icechunk.local_filesystem_storage(str(tmp_path / "repo")), config,
        authorize_virtual_chunk_access={prefix: None},
    )
    session = repo.writable_session("main")
    files = sorted((p for p in local.rglob("*") if p.is_file()), key=lambda p: p.name != "zarr.json")
    for path in files:  # metadata first (copied), then the chunks (references)
        key = path.relative_to(local).as_posix()
        if path.name == "zarr.json":
            buffer = default_buffer_prototype().buffer.from_bytes(path.read_bytes())
            sync(session.store.set(key, buffer))
        else:
            session.store.set_virtual_ref(
                key, f"file://{path}", offset=0, length=path.stat().st_size
            )
    session.commit("virtual")
    return repo, data


class TestIcechunkVirtual(SourceConformance):
    @pytest.fixture(params=["zstd", "sharding"], scope="class")
    @classmethod
    def case(cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
        repo, data = _virtual_repo(tmp_path_factory.mktemp("virtual"), request.param)
        store = repo.readonly_session("main").store
        return Case(lambda: tse.open_dataset(store), zarr_expected(data, 3, request.param), data,
                    store, fallback=False)


def _references(local: Path) -> dict[str, Any]:
    """Kerchunk-style references to a local Zarr v2 store: metadata inline, chunks by
    (file, offset, length) -- here whole files, with a prefix of junk before each to make
    the offsets real."""
    refs: dict[str, Any] = {}
    blobs = local.parent / "blobs.bin"
    with open(blobs, "wb") as out:
        for path in sorted(local.rglob("*")):
            if not path.is_file():
                continue
            key = path.relative_to(local).as_posix()
            if path.name.startswith("."):
                refs[key] = path.read_text()
                continue
            out.write(b"junk" * 3)
            offset = out.tell()
            body = path.read_bytes()
            out.write(body)
            refs[key] = [str(blobs), offset, len(body)]
    return {"version": 1, "refs": refs}


class TestKerchunkReferences(SourceConformance):
    @pytest.fixture(params=["zstd", "blosc"], scope="class")
    @classmethod
    def case(cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
        tmp_path = tmp_path_factory.mktemp("kerchunk")
        local = tmp_path / "v2.zarr"
        data = write_zarr(str(local), 2, request.param)
        refs = _references(local)
        (tmp_path / "refs.json").write_text(json.dumps(refs))
        options = {"fo": str(tmp_path / "refs.json"), "remote_protocol": "file"}
        return Case(
            lambda: tse.open_dataset("reference://", storage_options=options),
            zarr_expected(data, 2, request.param), data, "reference://",
            xr_kwargs={"storage_options": options}, fallback=False,
        )


class TestS3URLs(SourceConformance):
    """``s3://`` URLs on moto: metadata through zarr/s3fs, chunks through s3fs or obstore."""

    @pytest.fixture(scope="class")
    @classmethod
    def s3_root(cls, moto_s3: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
        root = tmp_path_factory.mktemp("s3-conformance")
        for codec in ("blosc", "sharding", "sharding-start"):
            write_zarr(str(root / f"v3-{codec}.zarr"), 3, codec)
        write_zarr(str(root / "v2-zstd.zarr"), 2, "zstd")
        prefix = f"conf-{uuid.uuid4().hex[:6]}"
        moto_s3.upload(root, prefix)
        return root, moto_s3.url(prefix)

    @pytest.fixture(params=[(r, f, c) for r in ("fsspec", "obstore")
                            for f, c in ((3, "blosc"), (3, "sharding"), (3, "sharding-start"),
                                         (2, "zstd"))],
                    ids=lambda p: f"{p[0]}-v{p[1]}-{p[2]}")
    def case(self, request: pytest.FixtureRequest, s3_root: tuple[Path, str], moto_s3: Any) -> Case:
        reader, fmt, codec = request.param
        tse.config.set(remote_reader=reader)
        root, base = s3_root
        url = f"{base}/v{fmt}-{codec}.zarr"
        options = moto_s3.storage_options()
        case = _zarr_case(root, url, fmt, codec)
        case.open = lambda: tse.open_dataset(url, storage_options=options)
        case.xr_kwargs = {"storage_options": options}
        return case

    def test_the_reader_is_the_one_asked_for(self, ds: xr.Dataset, case: Case) -> None:
        (src,) = sources_of(ds["v"])
        expected = "ObstoreBytes" if tse.config.get().remote_reader == "obstore" else "FsspecBytes"
        assert type(src.store).__name__ == expected
