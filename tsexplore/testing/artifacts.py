"""Counts the test suites write to ``test-artifacts/``, added up over pytest-xdist workers.

A suite calls :func:`publish` at the end of its session with its counts (nested dicts of
numbers). Run alone, that writes ``test-artifacts/NAME``; under pytest-xdist each worker
writes its part (``test-artifacts/.parts/NAME.WORKER``) and the controller, which never
collects the suites (their conftests are not loaded there), adds the parts up with
:func:`merge_parts` (``tests/conftest.py`` calls it), so the file counts every test once.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

PARTS = ".parts"


def _worker(config: Any) -> str | None:
    info = getattr(config, "workerinput", None)
    return None if info is None else str(info.get("workerid", "worker"))


def publish(config: Any, name: str, counts: dict[str, Any]) -> Path:
    """Write ``counts`` as ``test-artifacts/NAME`` (or this worker's part of it)."""
    root = Path(config.rootpath) / "test-artifacts"
    worker = _worker(config)
    path = root / name if worker is None else root / PARTS / f"{name}.{worker}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(counts, indent=1, sort_keys=True))
    return path


def add(a: Any, b: Any) -> Any:
    """``a`` and ``b`` added up: numbers summed, dicts key by key, anything else kept from
    ``b`` (a status code: the worse of two is not a sum)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = add(out[k], v) if k in out else v
        return out
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a + b
    return b


def clear_parts(root: Path) -> None:
    """Forget the parts an earlier run left."""
    shutil.rmtree(Path(root) / "test-artifacts" / PARTS, ignore_errors=True)


def merge_parts(root: Path) -> list[Path]:
    """Add up the workers' parts into ``test-artifacts/NAME``; returns the files written."""
    folder = Path(root) / "test-artifacts" / PARTS
    if not folder.is_dir():
        return []
    merged: dict[str, Any] = {}
    for part in sorted(folder.iterdir()):
        name = part.name.rsplit(".", 1)[0]
        data = json.loads(part.read_text())
        merged[name] = add(merged[name], data) if name in merged else data
    written = []
    for name, data in merged.items():
        path = folder.parent / name
        path.write_text(json.dumps(data, indent=1, sort_keys=True))
        written.append(path)
    shutil.rmtree(folder, ignore_errors=True)
    return written
