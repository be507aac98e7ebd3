"""Benchmarks: tsexplore and its peers side by side, each system in its own cold process.

Run ``python -m benchmarks <name> [options]`` (``--help`` lists the options). Names:

- ``play``: frames requested at 30 fps; per-frame latency p50 / p95 / max.
- ``scrub``: frames as fast as possible; frames/s and latency.
- ``jump``: 200 random frames, cold; per-frame latency p50 / p95.
- ``profile``: one pixel's whole time series, cold; milliseconds.
- ``soak``: random slider jumps through the view controller, then play; prefetch guesses used.
- ``memory``: cache high water under 8 reader threads; opening a 10^15-element array.
- ``scan``: mean over time of the whole cube; GB/s of decoded data, peak RSS.
- ``patches``: shuffled 16x64x64 windows in batches of 32; samples/s, peak RSS.
- ``ui``: slider-to-pixels latency in a real browser (see ``benchmarks/ui.py``).
- ``ncremote``: one NetCDF4 file over HTTP at 20 ms/request: tsexplore vs h5netcdf + fsspec
  vs a kerchunk reference read by zarr.
- ``all``: play, scrub, jump, profile, scan and patches, one after the other.
- ``figures``: issue 30's table -- scrub, play, jump, scan, sharded scrub on every cube.
- ``ab OLD``: tsexplore at git ref OLD against this working tree, alternating in one run.
- ``cubes``: write the cubes (own, noisy, zstd, v2lz4) and check naive against zarr on each.

``--cube own|noisy|zstd|v2lz4`` picks the data (:mod:`.cubes`); ``--cube a,b`` or ``all``
runs a benchmark once per cube and prints one combined table.

Every system runs in its own subprocess (``python -m benchmarks._run``) after the store's
pages are dropped from the page cache; the parent collects one JSON line per run, takes
medians over ``--repeat`` runs, prints a table and writes ``benchmarks/results/*.json``.
"""
