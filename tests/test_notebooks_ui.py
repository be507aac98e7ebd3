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
def test_notebook_runs(name, tmp_path, run_notebook):
    outputs, text = run_notebook(NOTEBOOKS / name)
    if name.startswith("01"):
        assert (tmp_path / "data" / "cube.zarr").is_dir()  # small data went to the temp folder
        assert "PB," in text and "ticks" in text
        assert "channels ['DAPI', 'GFP', 'RFP']" in text  # the composite, its histogram and ROI ran
    else:
        assert "prefetch=auto" in text and "hit ratio" in text
    assert os.environ["TSEXPLORE_SAMPLE_SIZE"] == "small"
