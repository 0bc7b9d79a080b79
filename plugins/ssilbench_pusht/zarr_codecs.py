"""The codecs a replay zarr may use, checked from its metadata before zarr reads any chunk.

A zarr array names the codecs that decode its chunks, and some run code: numcodecs'
``pickle`` filter unpickles each chunk, and numcodecs releases before 0.15.2 / 0.16.6 /
0.17.1 do so without asking (on Python 3.10 no fixed release exists). So every array's
metadata in the store (``.zarray``, ``zarr.json``, and the copies consolidated metadata
holds, which zarr 3 prefers) is read as JSON here first, and any dtype or codec outside an
allow-list of numeric types and pure decompressors refuses the file, whatever zarr and
numcodecs are installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.api import DatasetError

# Zarr v2 (numcodecs ids): compressors, and filters that only rearrange numbers.
V2_COMPRESSORS = frozenset({"blosc", "zstd", "lz4", "zlib", "gzip", "bz2", "lzma"})
V2_FILTERS = frozenset({"delta", "fixedscaleoffset", "quantize", "astype", "bitround", "shuffle"})
# Zarr v3 codec names, and numcodecs' v3 wrappers of the v2 ones above ("numcodecs.zlib").
V3_CODECS = frozenset({"bytes", "transpose", "blosc", "gzip", "zstd", "crc32c",
                       "sharding_indexed"})  # fmt: skip
V3_DATA_TYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                           "uint32", "uint64", "float16", "float32", "float64"})  # fmt: skip
_CONFIG_DTYPES = ("dtype", "astype", "encode_dtype", "decode_dtype")


def _refuse(path: Path, key: str, what: str) -> DatasetError:
    return DatasetError(
        f"{path}: the array '{key}' declares {what}, which ssilbench does not decode: only "
        f"numeric arrays with the codecs {', '.join(sorted(V2_COMPRESSORS | V2_FILTERS))} are "
        "read, since a codec such as pickle runs code stored in the file. Nothing was read "
        "from its chunks. Use the published replay (ssilbench data download pusht) or a "
        "copy written with numeric arrays and blosc compression.",
        path,
    )


def _v2_dtype_ok(dtype: Any) -> bool:
    try:
        parsed = np.dtype(dtype) if isinstance(dtype, str) else None
    except (TypeError, ValueError):
        return False
    return parsed is not None and parsed.kind in "biuf"


def _check_v2(path: Path, key: str, meta: dict[str, Any]) -> None:
    if not _v2_dtype_ok(meta.get("dtype")):
        raise _refuse(path, key, f"the dtype {meta.get('dtype')!r} (not a plain number)")
    compressor = meta.get("compressor")
    if compressor is not None:
        name = compressor.get("id") if isinstance(compressor, dict) else compressor
        if name not in V2_COMPRESSORS:
            raise _refuse(path, key, f"the compressor {name!r}")
    for item in meta.get("filters") or []:
        name = item.get("id") if isinstance(item, dict) else item
        if name not in V2_FILTERS:
            raise _refuse(path, key, f"the filter {name!r}")
        _check_config_dtypes(path, key, item)


def _check_config_dtypes(path: Path, key: str, config: dict[str, Any]) -> None:
    for field in _CONFIG_DTYPES:
        value = config.get(field)
        if value is not None and not _v2_dtype_ok(value):
            raise _refuse(path, key, f"a codec converting to {value!r}")


def _v3_codecs(codecs: Any) -> Iterator[dict[str, Any]]:
    """Every codec of a v3 codec list, those nested in sharding included."""
    for codec in codecs if isinstance(codecs, list) else [codecs]:
        codec = {"name": codec} if isinstance(codec, str) else codec
        yield codec
        config = (codec.get("configuration") or {}) if isinstance(codec, dict) else {}
        for nested in ("codecs", "index_codecs"):
            if nested in config:
                yield from _v3_codecs(config[nested])


def _check_v3(path: Path, key: str, meta: dict[str, Any]) -> None:
    if meta.get("data_type") not in V3_DATA_TYPES:
        raise _refuse(path, key, f"the data type {meta.get('data_type')!r}")
    for codec in _v3_codecs(meta.get("codecs", [])):
        name = codec.get("name") if isinstance(codec, dict) else None
        wrapped = name.removeprefix("numcodecs.") if isinstance(name, str) else None
        allowed = name in V3_CODECS or (
            isinstance(name, str) and name.startswith("numcodecs.")
            and wrapped in V2_COMPRESSORS | V2_FILTERS
        )  # fmt: skip
        if not allowed:
            raise _refuse(path, key, f"the codec {name!r}")
        _check_config_dtypes(path, key, codec.get("configuration") or {})


def _documents(path: Path, file: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(array key, zarr format, metadata) of each array ``file`` describes, consolidated
    copies included."""
    try:
        doc = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: {file.relative_to(path)} is not readable JSON ({exc}); "
                           "the store is damaged.", path) from None  # fmt: skip
    if not isinstance(doc, dict):
        raise DatasetError(f"{path}: {file.relative_to(path)} is not a JSON object.", path)
    where = file.parent.relative_to(path).as_posix()
    if file.name == ".zarray":
        yield where, "2", doc
    elif file.name == ".zmetadata":
        for name, meta in (doc.get("metadata") or {}).items():
            if str(name).endswith(".zarray") and isinstance(meta, dict):
                yield f"{where}/{name}".removesuffix("/.zarray"), "2", meta
    elif file.name == "zarr.json":
        if doc.get("node_type") == "array":
            yield where, "3", doc
        consolidated = (doc.get("consolidated_metadata") or {}).get("metadata") or {}
        for name, meta in consolidated.items():
            if isinstance(meta, dict) and meta.get("node_type") == "array":
                yield f"{where}/{name}", "3", meta


def _metadata_files(path: Path) -> Iterator[Path]:
    """Every metadata file under ``path``, through linked folders too (zarr follows them),
    each real folder once."""
    seen: set[str] = set()
    for folder, subfolders, files in os.walk(path, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders[:] = []
            continue
        seen.add(real)
        subfolders.sort()
        for name in sorted(files):
            if name in (".zarray", ".zmetadata", "zarr.json"):
                yield Path(folder) / name


def check_codecs(path: Path) -> None:
    """Refuse the zarr directory store ``path`` unless every array in it (read or not) is
    numeric and uses only allowed codecs; reads metadata only."""
    for file in _metadata_files(path):
        for key, version, meta in _documents(path, file):
            key = key.removeprefix("./").strip("/") or "."
            (_check_v2 if version == "2" else _check_v3)(path, key, meta)
