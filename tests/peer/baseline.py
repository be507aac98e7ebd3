"""Run xarray's backend classes unchanged (xarray's own engines) and record which tests
do not pass here, with why, in ``tests/peer/xarray_own.json``.

    .venv/bin/python tests/peer/baseline.py [-n 2]

``test_peer_backends.py`` skips those tests (with xarray's outcome as the reason): the
contract is that every test passing with xarray's engine passes through tsexplore.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "own.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "peer",
               str(HERE / "own_classes.py"), f"--junitxml={xml}", *argv]
        subprocess.run(cmd, cwd=HERE.parents[1], check=False)
        tree = ET.parse(xml)
    not_passing: dict[str, dict[str, str]] = {}
    total = 0
    for case in tree.iter("testcase"):
        total += 1
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        for tag in ("failure", "error"):
            found = case.find(tag)
            if found is not None:
                why = (found.get("message") or "").strip().splitlines()
                not_passing[f"{cls}::{case.get('name')}"] = {
                    "outcome": "failed" if tag == "failure" else "errored",
                    "why": (why[0] if why else tag)[:300],
                }
    import xarray
    import zarr

    out = {"xarray": xarray.__version__, "zarr": zarr.__version__, "tests": total,
           "not_passing": dict(sorted(not_passing.items()))}
    (HERE / "xarray_own.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(not_passing)} of {total} tests do not pass with xarray's own engines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
