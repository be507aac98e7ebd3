"""notebooks/03_compute.ipynb runs top to bottom (nbclient, small data, a real kernel)."""

from __future__ import annotations

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
