"""A folder of images (PNG, JPEG, TIFF) as a lazy ``(frame, y, x, channel)`` array.

One image is one chunk along a new ``frame`` dim; the engine decodes images with Pillow on
its thread pool. All images must have the same size, or be resized to ``size=(height,
width)`` (bilinear). Colour images become ``uint8`` RGB (RGBA if any has transparency),
greyscale ones a single channel; 16-bit and float greyscale keep their type when all images
share it.

Two layouts are understood:

- images directly in the folder (sorted by name), or
- one sub-folder per class (``cats/``, ``dogs/``): then a ``label`` variable (``int64``,
  class number in sorted order of the sub-folders) comes with the images, and the attribute
  ``classes`` lists the class names.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, CorruptChunkError, SourceError
from .base import DEFAULT_OPTIONS, ChunkIndex, SourceGroup, SourceOptions, SyncChunkSource
from .memory import ArraySource

SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
_NATIVE_MODES = {"I;16": np.uint16, "I;16B": np.uint16, "I;16L": np.uint16, "I": np.int32, "F": np.float32}


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is a core dependency
        from ..errors import missing_dependency

        raise missing_dependency("pillow", "images", "opening a folder of images") from None
    return Image


def _normalize_size(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = (int(size), int(size))
    try:
        h, w = (int(s) for s in size)
    except (TypeError, ValueError):
        raise ConfigError(f"size must be an int or (height, width), got {size!r}") from None
    if h < 1 or w < 1:
        raise ConfigError(f"size must be positive, got {size!r}")
    return h, w


def _target_mode(modes: set[str], alpha: bool) -> str:
    if len(modes) == 1 and next(iter(modes)) in _NATIVE_MODES:
        return next(iter(modes))
    if modes <= {"L", "1"}:
        return "L"
    return "RGBA" if alpha else "RGB"


class ImageFolderSource(SyncChunkSource):
    """Images of one folder as a ``(frame, y, x, channel)`` source; one image per chunk."""

    def __init__(
        self,
        files: list[str],
        root: str,
        size: tuple[int, int] | None,
        mode: str,
        shape_hw: tuple[int, int],
        channels: int,
        dtype: Any,
        *,
        options: SourceOptions = DEFAULT_OPTIONS,
    ) -> None:
        self.options = options
        self.files = files
        self.root = root
        self.size = size
        self.mode = mode
        self.shape = (len(files), shape_hw[0], shape_hw[1], channels)
        self.chunks = (1, shape_hw[0], shape_hw[1], channels)
        self.dims = ("frame", "y", "x", "channel")
        self.dtype = np.dtype(dtype)
        self.fill_value = None
        self.attrs = {"source": root, "mode": mode}
        if size is not None:
            self.attrs["resized_to"] = list(size)
            self.attrs["resample"] = "bilinear"
        self.name = "image"
        self.path = root
        digest = hashlib.sha1()
        for f in files:
            st = os.stat(os.path.join(root, f))
            digest.update(f"{f}:{st.st_mtime_ns}:{st.st_size};".encode())
        digest.update(f"{size}{mode}".encode())
        self.token = f"images-{root}-{digest.hexdigest()[:16]}"

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        self.check_index(index)
        name = self.files[index[0]]
        path = os.path.join(self.root, name)
        image_mod = _pil()
        try:
            with image_mod.open(path) as im:
                im = im.convert(self.mode) if im.mode != self.mode else im
                if self.size is not None and im.size != (self.size[1], self.size[0]):
                    im = im.resize((self.size[1], self.size[0]), image_mod.Resampling.BILINEAR)
                arr = np.asarray(im, dtype=self.dtype)
        except OSError as exc:
            raise CorruptChunkError(
                f"cannot decode image {path!r} (frame {index[0]}): {exc}", source=self.token, index=index
            ) from exc
        if arr.ndim == 2:
            arr = arr[:, :, None]
        expected = self.chunks[1:]
        if arr.shape != expected:
            raise CorruptChunkError(
                f"image {path!r} (frame {index[0]}) decoded to shape {arr.shape}, expected "
                f"{expected}; it changed since the folder was opened, or pass size=(h, w)",
                source=self.token,
                index=index,
            )
        return np.ascontiguousarray(arr[None]), os.path.getsize(path)


def _list_images(root: str, pattern: str | None) -> tuple[list[str], list[int], list[str]]:
    def is_image(name: str) -> bool:
        if pattern is not None:
            return fnmatch.fnmatch(name, pattern)
        return name.lower().endswith(SUFFIXES)

    entries = sorted(os.listdir(root))
    direct = [n for n in entries if os.path.isfile(os.path.join(root, n)) and is_image(n)]
    if direct:
        return direct, [], []
    classes = [n for n in entries if os.path.isdir(os.path.join(root, n))]
    files: list[str] = []
    labels: list[int] = []
    used: list[str] = []
    for cls in classes:
        inner = sorted(
            n for n in os.listdir(os.path.join(root, cls))
            if os.path.isfile(os.path.join(root, cls, n)) and is_image(n)
        )
        if not inner:
            continue
        used.append(cls)
        files.extend(f"{cls}/{n}" for n in inner)
        labels.extend([len(used) - 1] * len(inner))
    return files, labels, used


def open_image_folder(
    path: str | os.PathLike[str],
    size: Any = None,
    pattern: str | None = None,
    options: SourceOptions = DEFAULT_OPTIONS,
) -> Any:
    """Sources for a folder of images: an ``image`` variable (and ``label`` for class folders).

    ``size``: ``(height, width)`` or an int to resize every image to (bilinear); without it
    all images must already share one size. ``pattern``: a glob on file names (default:
    every ``*.png``, ``*.jpg``, ``*.jpeg``, ``*.tif``, ``*.tiff``).
    """
    root = os.path.abspath(os.fspath(path))
    if not os.path.isdir(root):
        raise SourceError(f"{os.fspath(path)!r} is not a folder")
    target = _normalize_size(size)
    files, labels, classes = _list_images(root, pattern)
    if not files:
        raise SourceError(
            f"{root!r} holds no images matching {pattern or '*.png/*.jpg/*.jpeg/*.tif'} "
            "(directly or one level down, in class sub-folders)"
        )
    image_mod = _pil()
    sizes: dict[tuple[int, int], str] = {}
    modes: set[str] = set()
    alpha = False
    for name in files:
        try:
            with image_mod.open(os.path.join(root, name)) as im:  # reads the header only
                sizes.setdefault(im.size, name)
                modes.add(im.mode)
                alpha = alpha or "A" in im.mode or "transparency" in im.info
        except OSError as exc:
            raise SourceError(f"{os.path.join(root, name)!r} is not a readable image: {exc}") from exc
    if target is None and len(sizes) > 1:
        (w0, h0), first = next(iter(sizes.items()))
        (w1, h1), other = list(sizes.items())[1]
        raise SourceError(
            f"the images in {root!r} differ in size: {first!r} is {h0}x{w0} (height x width) but "
            f"{other!r} is {h1}x{w1} ({len(sizes)} sizes in all). Pass size=(height, width) "
            "to resize them all, e.g. tse.open_dataset(folder, size=(224, 224))"
        )
    if target is None:
        w, h = next(iter(sizes))
        target_hw = (h, w)
    else:
        target_hw = target
    mode = _target_mode(modes, alpha)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}.get(mode, 1)
    dtype = _NATIVE_MODES.get(mode, np.uint8)
    src = ImageFolderSource(files, root, target, mode, target_hw, channels, dtype, options=options)
    variables: dict[str, Any] = {"image": src}
    coords: dict[str, Any] = {
        "file": (("frame",), np.array(files, dtype=object), {}),
        "frame": (("frame",), np.arange(len(files)), {}),
    }
    attrs: dict[str, Any] = {"title": f"images of {Path(root).name}", "source": root}
    if classes:
        label = ArraySource(
            np.asarray(labels, dtype=np.int64), ("frame",), None, {}, "label", options=options
        )
        label.attrs = {"classes": list(classes)}
        variables["label"] = label
        attrs["classes"] = list(classes)
    return SourceGroup(variables, coords, attrs, coord_names={"file"})
