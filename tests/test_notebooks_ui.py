"""Tutorial 02 runs top to bottom (nbclient, small data, a real kernel).

Tutorial 01 is run top to bottom in JupyterLab by tests/test_browser.py, which checks the same
printed text and fails on any cell's error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.slow
def test_streaming_internals_notebook_runs(tmp_path, run_notebook):
    outputs, text = run_notebook(NOTEBOOKS / "02_streaming_internals.ipynb")
    assert "prefetch=auto" in text and "hit ratio" in text
    assert os.environ["TSEXPLORE_SAMPLE_SIZE"] == "small"
