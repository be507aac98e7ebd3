"""notebooks/05_chunk_choice.ipynb runs top to bottom (nbclient, small data, a real kernel)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "05_chunk_choice.ipynb"


@pytest.mark.slow
def test_chunk_choice_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TSEXPLORE_SAMPLE_SIZE", "small")
    monkeypatch.setenv("TSEXPLORE_DATA_DIR", str(tmp_path / "data"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors
    text = "\n".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
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
