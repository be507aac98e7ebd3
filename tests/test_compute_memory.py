"""Peak memory of a streaming reduction over a dataset four times the cache budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import tsexplore as tse
    from tsexplore.sources import SyntheticSource

    budget = int(sys.argv[1])
    src = SyntheticSource((128, 512, 512), (4, 256, 256), "float32")   # 128 MiB, 1 MiB chunks
    tse.config.set(cache_bytes=budget)
    ds = tse.open_dataset(src)
    statm = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    base = statm()
    out = tse.reduce(ds["data"], sys.argv[2], dim="time", progress=False)
    # VmHWM belongs to this process image (ru_maxrss would include the forking parent's RSS)
    status = open("/proc/self/status").read().splitlines()
    peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    snap = tse.stats()
    # spot-check the answer against NumPy in float64 on two columns
    col = src.evaluate((slice(0, 128), slice(100, 102), slice(300, 301))).astype(np.float64)
    ref = getattr(np, sys.argv[2])(col, axis=0)[:, 0]
    np.testing.assert_allclose(out.values[100:102, 300], ref, rtol=1e-6)
    print(json.dumps(dict(base=base, peak=peak, data=src.nchunks * src.chunk_nbytes(),
                          high_water=snap.cache_high_water, reads=snap.reads, nchunks=src.nchunks)))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("op", ["mean", "std"])
def test_peak_rss_within_budget_plus_300mb(tmp_path, op):
    budget = 32 * 2**20
    script = tmp_path / "rss.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TSEXPLORE_SAMPLE_SIZE="small")
    proc = subprocess.run(
        [sys.executable, str(script), str(budget), op],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    assert m["data"] >= 4 * budget
    assert m["reads"] == m["nchunks"]
    assert m["high_water"] <= budget
    assert m["peak"] <= budget + 300 * 2**20, m
    # and the growth during the run is the cache plus a few chunks in flight, not the data
    assert m["peak"] - m["base"] <= budget + 150 * 2**20, m
