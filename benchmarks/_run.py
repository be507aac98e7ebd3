"""Child process: ``python -m benchmarks._run <module> <system> <json params>``.

Imports ``benchmarks.<module>`` (and, for a remote store, the HTTP/S3 clients), calls its
``run_system(system, params)`` while sampling RSS,
prints exactly one line ``@@BENCH-RESULT@@ {json}`` and exits at once (``os._exit``), so
lingering worker threads or processes of a peer can never hang the benchmark.

``TSEXPLORE_BENCH_CODE`` (set by an A/B run, ``python -m benchmarks ab``) names a folder
holding another version's ``tsexplore`` package: it goes first on ``sys.path`` before
anything imports tsexplore, and the result says which package the run imported
(``tsexplore_from``).
"""

from __future__ import annotations

import os
import sys

if os.environ.get("TSEXPLORE_BENCH_CODE"):  # before anything below can import tsexplore
    sys.path.insert(0, os.environ["TSEXPLORE_BENCH_CODE"])

import importlib  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

from .common import MARKER  # noqa: E402
from .runner import RssSampler  # noqa: E402

#: imported before a remote run of any system (lazy imports are not part of opening a store)
REMOTE_IMPORTS = ("fsspec.implementations.http", "aiohttp", "s3fs", "obstore", "obstore.store",
                  "xarray.backends.zarr")


def main(argv: list[str]) -> int:
    """Run one system once and print its result line."""
    if len(argv) != 3:
        print("usage: python -m benchmarks._run <module> <system> <json params>", file=sys.stderr)
        return 2
    module_name, system, params_json = argv
    params = json.loads(params_json)
    sampler = RssSampler()
    t0 = time.perf_counter()
    result: dict[str, Any]
    try:
        target = str(params.get("url") or params.get("path") or "")
        if "://" in target:  # the remote clients every system may use: imported, not timed
            for name in REMOTE_IMPORTS:
                try:
                    importlib.import_module(name)
                except ImportError:
                    pass
        module = importlib.import_module(f"benchmarks.{module_name}")
        result = dict(module.run_system(system, params, sampler))
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - report every failure as data
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()[-3000:]}
    result["child_s"] = time.perf_counter() - t0
    loaded = sys.modules.get("tsexplore")
    if loaded is not None:
        result["tsexplore_from"] = os.path.dirname(str(getattr(loaded, "__file__", "")))
    result.update(sampler.close())
    result["system"] = system
    sys.stderr.flush()
    print(MARKER + json.dumps(result, default=_jsonable), flush=True)
    return 0


def _jsonable(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(obj)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
