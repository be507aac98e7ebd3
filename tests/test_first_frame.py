"""The first frame a viewer shows does not wait for ``dask.array`` to import: xarray asks
whether indexed data is a dask array, which it cannot be before ``dask.array`` is imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = """
import sys
import numpy as np, zarr, xarray as xr
import tsexplore as tse
arr = zarr.create_array(sys.argv[1], shape=(8, 16, 16), chunks=(4, 8, 8), dtype="f4",
                        dimension_names=("time", "y", "x"))
arr[...] = np.arange(8 * 16 * 16, dtype="f4").reshape(8, 16, 16)
ds = tse.open_dataset(sys.argv[1])
assert (ds[list(ds.data_vars)[0]].isel(time=3).values == arr[3]).all()
print("dask.array imported:", "dask.array" in sys.modules)
import dask.array as da
from xarray.namedarray.pycompat import is_duck_dask_array
assert is_duck_dask_array(xr.DataArray(da.zeros((2, 2))).data)  # dask arrays are still seen
chunked = tse.open_dataset(sys.argv[1], chunks={})
assert is_duck_dask_array(chunked[list(chunked.data_vars)[0]].data)
print("ok")
"""


def test_the_first_frame_does_not_import_dask_array(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CODE, str(tmp_path / "c.zarr")], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "dask.array imported: False" in out.stdout and out.stdout.strip().endswith("ok"), out.stdout
