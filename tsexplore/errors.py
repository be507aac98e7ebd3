"""The tsexplore exception hierarchy.

Every error says what was received, what is allowed and what to do next.
"""

from __future__ import annotations


class TsExploreError(Exception):
    """Root of every error raised on purpose by tsexplore."""


class SourceError(TsExploreError):
    """A source could not be opened or described (unknown format, bad path, bad metadata)."""


class UnsupportedSourceError(SourceError, TypeError):
    """The object given to ``open_dataset`` is of a kind tsexplore cannot read."""


class SourceNotFoundError(UnsupportedSourceError, FileNotFoundError):
    """The path or URL given names nothing (a ``FileNotFoundError``, as xarray raises)."""


class GroupNotFoundError(SourceError, KeyError):
    """The group asked for is not in the store (a ``KeyError``, as xarray's zarr engine
    raises); the message lists the groups there are."""

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return str(self.args[0]) if self.args else ""


class StoreMetadataError(SourceError, ValueError):
    """A store's metadata cannot be read as asked (e.g. ``consolidated=True`` and none is
    there; a ``ValueError``, as xarray's zarr engine raises)."""


class UnknownFormatError(SourceError, ValueError):
    """The file's signature is not one of a format tsexplore reads (a ``ValueError``, as
    xarray's engines raise)."""


class ChunkReadError(TsExploreError):
    """Reading one chunk failed; the message names the source and the chunk index."""

    def __init__(self, message: str, *, source: str = "", index: tuple[int, ...] | None = None):
        super().__init__(message)
        self.source = source
        self.index = index


class MissingChunkError(ChunkReadError, KeyError):
    """A chunk that the array's metadata promises is absent from the store."""

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return str(self.args[0]) if self.args else ""


class CorruptChunkError(ChunkReadError):
    """A chunk's bytes are short, fail a checksum or decode to the wrong size."""


class UnsupportedFilterError(ChunkReadError):
    """A chunk is compressed with a filter that cannot be decoded here (its HDF5 plugin is
    not installed); the message names the filter and what to install."""


class ReadTimeoutError(ChunkReadError, TimeoutError):
    """A read (or a wait for one) took longer than its timeout."""


class RemoteReadError(ChunkReadError):
    """A remote store answered with an error that retries did not cure."""


class TruncatedFileError(ChunkReadError):
    """A memory-mapped file is shorter than its header says (it changed under us)."""


class RequestCancelledError(TsExploreError):
    """A request was superseded by a newer view generation or cancelled by its owner."""


class EngineClosedError(TsExploreError, RuntimeError):
    """The engine was closed while work was pending (or used after ``tse.close()``)."""


class WrongThreadError(TsExploreError, RuntimeError):
    """A blocking engine call was made on the engine's own I/O thread (it would wait on itself)."""


class NotStreamableError(TsExploreError, TypeError):
    """An xarray object is not a selection of a tsexplore source (computed, decoded, in memory)."""


class IndexingError(TsExploreError, IndexError):
    """An indexer is out of range or of an unsupported kind."""


class MissingDependencyError(TsExploreError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class ConfigError(TsExploreError, ValueError):
    """A setting or argument has a value outside what is allowed."""


class BackendUnavailableError(TsExploreError, RuntimeError):
    """A compute backend (e.g. CuPy on a GPU) was asked for but cannot run here."""


def missing_dependency(module: str, extra: str, purpose: str) -> MissingDependencyError:
    """Build the error for an optional dependency that is not importable."""
    return MissingDependencyError(
        f"{purpose} needs the optional package {module!r}, which is not installed. "
        f"Install it with: pip install 'tsexplore[{extra}]'"
    )


class TsExploreWarning(UserWarning):
    """Something worked but not as asked (e.g. a fallback); turned into errors in the tests."""


class TsExploreDeprecationWarning(TsExploreWarning, FutureWarning):
    """An argument or name that still works but will go: the message says what replaces it."""
