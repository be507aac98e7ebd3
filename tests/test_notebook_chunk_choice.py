"""notebooks/05_chunk_choice.ipynb runs top to bottom (nbclient, small data, a real kernel)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "05_chunk_choice.ipynb"


@pytest.mark.slow
def test_chunk_choice_notebook_runs(tmp_path, run_notebook):
    outputs, text = run_notebook(NOTEBOOK)
    assert "sample size: small" in text
    for pattern in ("scrub", "profile", "patches"):
        assert re.search(rf"{pattern}: .+ wins \([\d.]+ ms per access", text), pattern
    assert "the rechunked copy is identical to the source" in text
    assert re.search(r"a pixel's series: [\d.]+ ms before, [\d.]+ ms after rechunking", text)
    assert (tmp_path / "data" / "cube_profile.zarr").is_dir()
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert sum("tse.advise" in h and "<table" in h for h in html) == 3  # the three Advice tables
    plots = [o for o in outputs if "application/vnd.holoviews_load.v0+json" in o.get("data", {})
             or "application/vnd.holoviews_exec.v0+json" in o.get("data", {})]
    assert len(plots) >= 4  # three advice charts and the before/after bars
