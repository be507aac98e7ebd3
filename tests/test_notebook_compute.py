"""notebooks/03_compute.ipynb runs top to bottom (nbclient, small data, a real kernel); its
plots link nothing outside the notebook (no CDN: it must look the same offline) and each map
has a colour scale of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_compute.ipynb"


@pytest.mark.slow
def test_compute_notebook_runs(tmp_path, run_notebook):
    outputs, text = run_notebook(NOTEBOOK)
    assert "sample size: small" in text
    assert (tmp_path / "data" / "cube.zarr").is_dir()  # small data went to the temp folder
    assert "matches xarray" in text
    assert "GB/s" in text and "tse.reduce" in text
    assert "<ReductionJob tse.reduce var over time done" in text
    assert "workers reporting: 2" in text
    assert "std on the GPU" in text or 'backend="auto" fell back to NumPy' in text
    # the plots were produced (holoviews/bokeh output bundles)
    rich = [o for o in outputs if o.get("output_type") in ("display_data", "execute_result")]
    assert (
        sum(
            "application/vnd.holoviews_load.v0+json" in o.get("data", {})
            or "text/html" in o.get("data", {})
            for o in rich
        )
        >= 4
    )

    # offline: no stylesheet or script from a CDN (Panel's came from cdn.holoviz.org)
    shown = json.dumps([o.get("data", {}) for o in rich])
    assert "cdn.holoviz.org" not in shown
    # the mean and the std maps: a colour range each (the std's is not the mean's)
    ranges = []
    for o in rich:
        html = "".join(o.get("data", {}).get("text/html", ""))
        if "std over time" in html:
            for m in re.finditer("LinearColorMapper", html):
                found = dict(re.findall(r'(low|high)[\\"]*:([-0-9.e]+)', html[m.start():m.start() + 4000])[:2])
                ranges.append((float(found["low"]), float(found["high"])))
    assert len(ranges) == 2, ranges
    (mlo, mhi), (slo, shi) = ranges
    assert mhi > 10 and shi < 5 and (mlo, mhi) != (slo, shi), ranges  # degC: the mean ~15-30, the std ~0.5-2
