"""notebooks/06_remote_and_sharded.ipynb runs top to bottom (nbclient, small data, moto S3)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("moto.server")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "06_remote_and_sharded.ipynb"


@pytest.mark.slow
def test_remote_notebook_runs(tmp_path, run_notebook):
    outputs, text = run_notebook(NOTEBOOK)
    assert "sample size: small" in text
    assert (tmp_path / "data" / "cube_sharded.zarr").is_dir()
    assert "sharded decoder: tsexplore-sharded" in text
    assert "equals xarray's own reading" in text and "both match xarray" in text
    assert "byte ranges" in text and "shard indexes" in text
    assert "TensorStore" in text and "MB/s" in text
    assert "one 500 then the data: [500, 200]" in text and "retries 1" in text
    rich = [o for o in outputs if o.get("output_type") in ("display_data", "execute_result")]
    assert sum("application/vnd.holoviews_load.v0+json" in o.get("data", {})
               or "text/html" in o.get("data", {}) for o in rich) >= 2
