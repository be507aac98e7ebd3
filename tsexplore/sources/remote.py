"""Remote byte stores: fsspec filesystems, obstore, and any zarr ``Store`` object.

All three implement :class:`~.bytes.ByteStore` (bytes of an object by key and byte range,
``None`` when absent, transient failures retried and counted there):

- :class:`FsspecBytes`: any fsspec filesystem; async ones (http, s3, ...) on the engine's
  loop, one filesystem per loop, with their own retries off (s3fs, botocore);
- :class:`ObstoreBytes`: obstore's Rust client (its own connection pool) for ``http(s)://``
  and ``s3://``, its retries off;
- :class:`ZarrStoreBytes`: any ``zarr.abc.store.Store`` (icechunk sessions,
  ``ObjectStore``, ``FsspecStore``, ``MemoryStore``, references), whose coroutines the engine
  runs on zarr's own loop (``home = "zarr"``: the stores keep their sessions there).

:func:`byte_store_for` picks one for a path or URL (the ``reader`` of the source's options);
:func:`byte_store_for_zarr` wraps a zarr store.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..config import REMOTE_READERS
from ..errors import ConfigError, MissingDependencyError
from .bytes import Buffer, ByteRange, ByteStore, LocalFiles, RangeIgnored

#: obstore's own request timeout: a backstop behind tsexplore's per-attempt ``http_timeout``
OBSTORE_BACKSTOP = timedelta(seconds=600)

# -- fsspec -------------------------------------------------------------------------------------

_async_fs: dict[tuple[int, str, str], Any] = {}


def _fsspec_defaults(protocol: str, options: dict[str, Any]) -> dict[str, Any]:
    """Options that leave retries to tsexplore (one attempt per request in botocore)."""
    if protocol not in ("s3", "s3a"):
        return options
    out = dict(options)
    out.setdefault("max_concurrency", 1)  # else every whole-object read first asks its size
    kwargs = dict(out.get("config_kwargs") or {})
    kwargs.setdefault("retries", {"total_max_attempts": 1})
    kwargs.setdefault("max_pool_connections", 128)  # botocore's 10 would cap the reads in flight
    out["config_kwargs"] = kwargs
    return out


async def get_async_fs(protocol: str, storage_options: dict[str, Any]) -> Any:
    """One async fsspec filesystem per (loop, protocol, options), created on that loop."""
    import fsspec

    loop = asyncio.get_running_loop()
    key = (id(loop), protocol, repr(sorted(storage_options.items())))
    fs = _async_fs.get(key)
    if fs is None:
        try:
            fs = fsspec.filesystem(
                protocol, asynchronous=True, skip_instance_cache=True,
                **_fsspec_defaults(protocol, storage_options),
            )
        except ImportError as exc:
            raise MissingDependencyError(
                f"reading {protocol}:// URLs needs an fsspec implementation that is not "
                f"installed ({exc}); e.g. pip install s3fs for s3://"
            ) from exc
        if protocol in ("s3", "s3a"):
            fs.retries = 1  # one attempt per request: tsexplore retries (and counts) them
        if hasattr(fs, "set_session"):
            await fs.set_session()
        _async_fs[key] = fs
    return fs


async def close_async_fs() -> None:
    """Close the sessions that belong to the running loop (called by ``Engine.close``)."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _async_fs if k[0] == loop_id]:
        fs = _async_fs.pop(key)
        session = getattr(fs, "_session", None)
        if session is not None and not getattr(session, "closed", True):
            await session.close()
        s3 = getattr(fs, "_s3", None)
        if s3 is not None:
            try:
                await s3.__aexit__(None, None, None)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


class FsspecBytes(ByteStore):
    """Any fsspec filesystem: async ones (http, s3, ...) on the engine's loop, one filesystem
    per loop; synchronous ones (``memory://``) block a read thread."""

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        import fsspec

        self.root = root.rstrip("/")
        self.where = self.root
        self.protocol = root.split("://", 1)[0] if "://" in root else "file"
        self.storage_options = dict(storage_options or {})
        cls = fsspec.get_filesystem_class(self.protocol)
        self.sync = not getattr(cls, "async_impl", False)

    def _sync_fs(self) -> Any:
        import fsspec

        return fsspec.filesystem(self.protocol, **self.storage_options)

    def get_ranges_sync(
        self, key: str, ranges: Sequence[ByteRange | None], ctx: Any = None, *, reuse: bool = False
    ) -> list[Buffer] | None:
        fs = self._sync_fs()
        out = []
        for rng in ranges:
            if ctx is not None:
                ctx.count("store_requests", 1)
            start, stop = _start_stop(rng)
            try:
                out.append(fs.cat_file(self.url(key), start=start, end=stop))
            except FileNotFoundError:
                return None
        return out

    async def _get(self, key: str, rng: ByteRange | None) -> Buffer | None:
        fs = await get_async_fs(self.protocol, self.storage_options)
        if rng is not None and self.protocol in ("http", "https"):
            return await _http_range(fs, self.url(key), rng)
        start, stop = _start_stop(rng)
        return await fs._cat_file(self.url(key), start=start, end=stop)


async def _http_range(fs: Any, url: str, rng: ByteRange) -> Buffer:
    """A byte range over fsspec's HTTP session, as its ``_cat_file`` asks for one, with the
    answer's status seen: a 200 is the whole object (the server ignores ``Range``)."""
    if not rng.is_suffix and rng.stop is not None and rng.stop <= rng.start:
        return b""
    kw = dict(fs.kwargs)
    headers = dict(kw.pop("headers", None) or {})
    headers["Range"] = rng.header()
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        out = await r.read()
        fs._raise_not_found_for_status(r, url)
        if r.status != 206:
            raise RangeIgnored(out)
    return out


def _start_stop(rng: ByteRange | None) -> tuple[int | None, int | None]:
    if rng is None:
        return None, None
    return rng.start, rng.stop


# -- obstore ------------------------------------------------------------------------------------


class ObstoreBytes(ByteStore):
    """An obstore store (its own Rust connection pool) under ``prefix``; obstore's own
    retries are off, so every retry is tsexplore's (counted, bounded, the same everywhere)."""

    def __init__(self, store: Any, prefix: str = "", where: str = "") -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    async def _get(self, key: str, rng: ByteRange | None) -> Buffer | None:
        import obstore

        path = self._path(key)
        if rng is not None and not rng.is_suffix and rng.stop is not None:
            if rng.stop <= rng.start:
                return b""
            return await obstore.get_range_async(self.store, path, start=rng.start, end=rng.stop)
        options: dict[str, Any] = {}
        if rng is not None:
            options["range"] = {"suffix": -rng.start} if rng.is_suffix else {"offset": rng.start}
        result = await obstore.get_async(self.store, path, options=options or None)  # type: ignore[arg-type]
        return await result.bytes_async()


def obstore_for(root: str, storage_options: dict[str, Any]) -> ObstoreBytes | None:
    """An :class:`ObstoreBytes` for an ``http(s)://`` or ``s3://`` root, or None when
    obstore is missing or the options do not translate (fsspec reads those)."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        return None
    retry: Any = {"max_retries": 0, "retry_timeout": OBSTORE_BACKSTOP,
                  "backoff": {"init_backoff": timedelta(seconds=0.1),
                              "max_backoff": timedelta(seconds=1), "base": 2.0}}
    client: Any = {"timeout": OBSTORE_BACKSTOP, "allow_http": True}
    protocol, _, rest = root.partition("://")
    try:
        if protocol in ("http", "https"):
            if storage_options:
                return None
            from obstore.store import HTTPStore

            return ObstoreBytes(HTTPStore.from_url(root, client_options=client, retry_config=retry), "", root)
        if protocol in ("s3", "s3a"):
            config_ = _s3_config(storage_options)
            if config_ is None:
                return None
            from obstore.store import S3Store

            bucket, _, prefix = rest.partition("/")
            store = S3Store(bucket, config=config_, client_options=client, retry_config=retry)  # type: ignore[arg-type]
            return ObstoreBytes(store, prefix, root)
    except Exception:  # noqa: BLE001 - a configuration obstore cannot take: fsspec reads it
        return None
    return None


def _s3_config(options: dict[str, Any]) -> dict[str, Any] | None:
    """s3fs's ``storage_options`` as obstore's S3 configuration (None: not translatable)."""
    known = {"key", "secret", "token", "endpoint_url", "anon", "client_kwargs"}
    if set(options) - known:
        return None
    out: dict[str, Any] = {}
    if options.get("key"):
        out["access_key_id"] = options["key"]
    if options.get("secret"):
        out["secret_access_key"] = options["secret"]
    if options.get("token"):
        out["session_token"] = options["token"]
    if options.get("endpoint_url"):
        out["endpoint"] = options["endpoint_url"]
    if options.get("anon"):
        out["skip_signature"] = True
    client_kwargs = dict(options.get("client_kwargs") or {})
    region = client_kwargs.pop("region_name", None) or os.environ.get("AWS_REGION") or os.environ.get(
        "AWS_DEFAULT_REGION"
    )
    if client_kwargs:
        return None
    out["region"] = region or "us-east-1"
    return out


def byte_store_for(root: str, storage_options: dict[str, Any] | None = None, reader: str = "auto") -> ByteStore:
    """The byte store for a path or URL: local files, obstore (``reader``: ``"auto"`` takes
    it when installed and the options translate; ``"obstore"``) or fsspec (``"fsspec"``)."""
    if reader not in REMOTE_READERS:
        raise ConfigError(f"remote_reader must be one of {REMOTE_READERS}, got {reader!r}")
    options = dict(storage_options or {})
    if "://" not in root or root.startswith("file://"):
        return LocalFiles(root)
    if reader in ("auto", "obstore"):
        found = obstore_for(root.rstrip("/"), options)
        if found is not None:
            return found
        if reader == "obstore" and root.split("://", 1)[0] in ("http", "https", "s3", "s3a"):
            raise MissingDependencyError(
                "tse.config remote_reader='obstore' but obstore cannot read "
                f"{root!r} with these storage_options; pip install obstore, or set "
                "remote_reader='fsspec'"
            )
    return FsspecBytes(root, options)


# -- zarr stores --------------------------------------------------------------------------------


class ZarrStoreBytes(ByteStore):
    """Any ``zarr.abc.store.Store``; its requests run on zarr's own event loop (``home``),
    where the store's sessions live."""

    home = "zarr"

    def __init__(self, store: Any) -> None:
        self.store = store
        self.where = f"<{type(store).__name__}>"

    async def _get(self, key: str, rng: ByteRange | None) -> Buffer | None:
        from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
        from zarr.core.buffer import default_buffer_prototype

        request: Any = None
        if rng is not None:
            if rng.is_suffix:
                request = SuffixByteRequest(-rng.start)
            elif rng.stop is None:
                request = OffsetByteRequest(rng.start)
            elif rng.stop <= rng.start:
                return b""
            else:
                request = RangeByteRequest(rng.start, rng.stop)
        buf = await self.store.get(key, prototype=default_buffer_prototype(), byte_range=request)
        return None if buf is None else buf.as_numpy_array()


def byte_store_for_zarr(store: Any) -> ByteStore:
    """The byte store for a zarr ``Store`` object (a local one reads its files directly)."""
    from zarr.storage import LocalStore

    if isinstance(store, LocalStore):
        return LocalFiles(str(store.root))
    return ZarrStoreBytes(store)
