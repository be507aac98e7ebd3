"""notebooks/04_ml_loading.ipynb runs top to bottom (nbclient, small data, a real kernel)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
# the notebook's kernel imports them; this process only needs to know they are installed
for _module, _extra in (("torch", "torch"), ("tensorflow", "tf")):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"{_module} is not installed (tsexplore[{_extra}])", allow_module_level=True)

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "04_ml_loading.ipynb"


@pytest.mark.slow
def test_ml_notebook_runs(tmp_path, run_notebook):
    outputs, text = run_notebook(NOTEBOOK)
    assert "sample size: small" in text
    assert "a batch matches zarr slicing window by window" in text
    assert re.search(r"tse\.batches: [\d,]+ samples/s", text)
    assert "epoch 1:" in text and "keras loss per epoch" in text
    assert "['cold', 'warm']" in text and "epoch 7: accuracy" in text
    assert text.count("hit ratio") >= 5 and "num_workers=2" in text
    assert (tmp_path / "data" / "sst_images" / "warm").is_dir()
    rich = [o for o in outputs if o.get("output_type") in ("display_data", "execute_result")]
    assert any("application/vnd.holoviews_load.v0+json" in o.get("data", {}) or "text/html" in o.get("data", {})
               for o in rich)
