"""Tutorials 01 and 02 run top to bottom (nbclient, small data, a real kernel)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["01_explore.ipynb", "02_streaming_internals.ipynb"])
def test_notebook_runs(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TSEXPLORE_SAMPLE_SIZE", "small")
    monkeypatch.setenv("TSEXPLORE_DATA_DIR", str(tmp_path / "data"))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")
    if name.startswith("01"):
        assert (tmp_path / "data" / "cube.zarr").is_dir()  # small data went to the temp folder
        assert "PB," in text and "ticks" in text
    else:
        assert "prefetch=auto" in text and "hit ratio" in text
    assert os.environ["TSEXPLORE_SAMPLE_SIZE"] == "small"
