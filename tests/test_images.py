"""Image folders: values equal Pillow's own decode of each file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import tsexplore as tse
from tsexplore.errors import ConfigError, SourceError
from tsexplore.sources.images import open_image_folder


def write(path: Path, array: np.ndarray, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, **kw)
    return path


@pytest.fixture
def rgb_folder(tmp_path: Path) -> tuple[Path, list[Path]]:
    rng = np.random.default_rng(1)
    files = []
    for i in range(5):
        arr = rng.integers(0, 256, (24, 40, 3), dtype=np.uint8)
        files.append(write(tmp_path / "imgs" / f"img_{i:02d}.png", arr))
    files.append(write(tmp_path / "imgs" / "photo.jpg", rng.integers(0, 256, (24, 40, 3), dtype=np.uint8), quality=90))
    (tmp_path / "imgs" / "notes.txt").write_text("not an image")
    return tmp_path / "imgs", sorted(files)


def test_values_equal_pillow_decode(rgb_folder):
    folder, files = rgb_folder
    ds = tse.open_dataset(folder, prefetch="off")
    img = ds["image"]
    # one image is one chunk: a frame reads one file
    before = tse.stats()
    _ = img.isel(frame=3).values
    assert (tse.stats() - before).reads == 1
    assert img.dims == ("frame", "y", "x", "channel") and img.shape == (6, 24, 40, 3)
    assert img.dtype == np.uint8
    assert list(ds["file"].values) == [f.name for f in files]
    for i, f in enumerate(files):
        with Image.open(f) as im:
            np.testing.assert_array_equal(img[i].values, np.asarray(im.convert("RGB")))


def test_resize_matches_pillow_bilinear(rgb_folder):
    folder, files = rgb_folder
    ds = tse.open_dataset(folder, size=(16, 20))
    assert ds["image"].shape == (6, 16, 20, 3)
    for i, f in enumerate(files):
        with Image.open(f) as im:
            ref = np.asarray(im.convert("RGB").resize((20, 16), Image.Resampling.BILINEAR))
        np.testing.assert_array_equal(ds["image"][i].values, ref)
    assert ds["image"].attrs["resized_to"] == [16, 20]
    assert tse.open_dataset(folder, size=8)["image"].shape == (6, 8, 8, 3)


def test_different_sizes_need_size(tmp_path):
    write(tmp_path / "a.png", np.zeros((10, 12), dtype=np.uint8))
    write(tmp_path / "b.png", np.zeros((11, 12), dtype=np.uint8))
    with pytest.raises(SourceError, match=r"differ in size.*size=\(height, width\)"):
        tse.open_dataset(tmp_path)
    ds = tse.open_dataset(tmp_path, size=(10, 12))
    assert ds["image"].shape == (2, 10, 12, 1)


def test_greyscale_alpha_and_16_bit(tmp_path):
    grey = np.arange(12 * 9, dtype=np.uint8).reshape(12, 9)
    write(tmp_path / "g" / "a.png", grey)
    ds = tse.open_dataset(tmp_path / "g")
    assert ds["image"].shape == (1, 12, 9, 1)
    np.testing.assert_array_equal(ds["image"][0, :, :, 0].values, grey)

    rgba = np.random.default_rng(2).integers(0, 256, (8, 8, 4), dtype=np.uint8)
    write(tmp_path / "m" / "a.png", rgba)
    write(tmp_path / "m" / "b.png", rgba[:, :, :3].copy())
    ds = tse.open_dataset(tmp_path / "m")
    assert ds["image"].shape == (2, 8, 8, 4)
    np.testing.assert_array_equal(ds["image"][0].values, rgba)
    with Image.open(tmp_path / "m" / "b.png") as im:
        np.testing.assert_array_equal(ds["image"][1].values, np.asarray(im.convert("RGBA")))

    deep = (np.arange(6 * 7, dtype=np.uint16).reshape(6, 7) * 1000).astype(np.uint16)
    (tmp_path / "d").mkdir()
    Image.fromarray(deep).save(tmp_path / "d" / "a.png")
    ds = tse.open_dataset(tmp_path / "d")
    assert ds["image"].dtype == np.uint16
    np.testing.assert_array_equal(ds["image"][0, :, :, 0].values, deep)


def test_class_subfolders_give_labels_and_batch(tmp_path):
    rng = np.random.default_rng(3)
    arrays = {}
    for cls in ("cat", "dog"):
        for i in range(3):
            arr = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
            write(tmp_path / cls / f"{i}.png", arr)
            arrays[f"{cls}/{i}.png"] = (arr, ("cat", "dog").index(cls))
    ds = tse.open_dataset(tmp_path)
    assert ds.attrs["classes"] == ["cat", "dog"]
    assert list(ds["label"].values) == [0, 0, 0, 1, 1, 1]
    b = tse.batches(ds, sample={"frame": 1}, batch_size=4, squeeze=True, return_index=True)
    seen = 0
    for batch in b:
        assert batch["image"].shape[1:] == (12, 12, 3)
        for img, lab, idx in zip(batch["image"], batch["label"], batch["index"]):
            name = str(ds["file"].values[idx[0]])
            np.testing.assert_array_equal(img, arrays[name][0])
            assert lab == arrays[name][1]
            seen += 1
    assert seen == 6


def test_pattern_and_bad_inputs(tmp_path, rgb_folder):
    folder, files = rgb_folder
    group = open_image_folder(folder, pattern="*.jpg")
    assert group.variables["image"].shape == (1, 24, 40, 3)
    with pytest.raises(SourceError, match="no images"):
        open_image_folder(folder, pattern="*.gif")
    with pytest.raises(ConfigError, match="size"):
        open_image_folder(folder, size=(0, 4))
    with pytest.raises(ConfigError, match="not one"):
        tse.open_dataset(np.zeros((3, 3)), size=4)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.png").write_bytes(b"not a png")
    with pytest.raises(SourceError, match="not a readable image"):
        tse.open_dataset(tmp_path / "bad")
