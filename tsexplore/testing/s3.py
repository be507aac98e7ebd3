"""A real S3 API on 127.0.0.1: moto's server in a thread, for tests, benchmarks and notebooks.

No client is mocked: s3fs, obstore, zarr and TensorStore talk HTTP to it as to any S3
endpoint. Moto cannot inject faults or model a link, so :meth:`MotoS3.proxy` puts a
:class:`~tsexplore.testing.http.StoreServer` in front of it (latency, bandwidth, 500s,
stalls, bodies cut short), passing requests and answers through unchanged.

>>> with MotoS3() as s3:
...     url = s3.upload("data/cube.zarr", "cube.zarr")        # s3://tsexplore/cube.zarr
...     ds = tse.open_dataset(url, storage_options=s3.storage_options())
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from .http import StoreServer

KEY, SECRET, REGION = "tsexplore-test-key", "tsexplore-test-secret", "us-east-1"


class MotoS3:
    """``moto[server]``'s ``ThreadedMotoServer`` on a free port with one bucket."""

    def __init__(self, bucket: str = "tsexplore") -> None:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:  # pragma: no cover - moto is in the test extra
            from ..errors import missing_dependency

            raise missing_dependency("moto", "test", "a local S3 server") from exc
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.bucket = bucket
        self._client = self.client()
        self._client.create_bucket(Bucket=bucket)
        self._proxies: list[StoreServer] = []

    def client(self, endpoint: str | None = None) -> Any:
        """A boto3 S3 client for this server (or for a proxy in front of it)."""
        import boto3

        return boto3.client(
            "s3", endpoint_url=endpoint or self.endpoint, aws_access_key_id=KEY,
            aws_secret_access_key=SECRET, region_name=REGION,
        )

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """s3fs ``storage_options`` for ``tse.open_dataset`` / zarr (obstore takes them too)."""
        return {"key": KEY, "secret": SECRET, "endpoint_url": endpoint or self.endpoint,
                "client_kwargs": {"region_name": REGION}}

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def upload(self, folder: str | os.PathLike[str], prefix: str) -> str:
        """Copy every file under ``folder`` to ``s3://bucket/prefix/``; returns that URL."""
        root = Path(folder)
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}"
                self._client.upload_file(str(path), self.bucket, key)
        return self.url(prefix)

    def proxy(self, latency: float = 0.0, bandwidth: float = 0.0) -> StoreServer:
        """A fault-injecting :class:`StoreServer` in front of this server (closed with it);
        point clients at its ``url`` (``storage_options(proxy.url)``)."""
        server = StoreServer(upstream=self.endpoint, latency=latency, bandwidth=bandwidth)
        self._proxies.append(server)
        return server

    def close(self) -> None:
        for proxy in self._proxies:
            proxy.close()
        self._proxies.clear()
        self._server.stop()

    def __enter__(self) -> MotoS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
