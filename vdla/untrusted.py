"""Reading files that may be hostile: the read limit, zip members by exact name, ``.npy`` members of an ``.npz``.

Every reader of a file that travels (a ``.vdla`` artifact, an ONNX model, a calibration or input ``.npz``) checks
what the file claims against one limit in bytes *before* it allocates: the file itself, each zip member's
declared size and all members together, each array's shape times its item size. The limit is the readers'
``max_bytes`` argument, else ``$VDLA_MAX_READ_BYTES``, else :func:`default_max_bytes`: the largest DRAM window
of the board presets (256 MiB), as much as an accelerator of those boards can hold.

A zip member is read by its exact name (never extracted to a path) from the archive's bytes: a member
compressed other than stored or deflated, encrypted, whose local header disagrees with the directory, that
inflates past its declared size, stops short of it or fails its CRC is refused. An ``.npy`` member's header is
parsed first and its array built from exactly the bytes it declares (numeric dtypes only, never a pickle).
Each error is the caller's own :class:`~vdla.errors.VdlaError` subclass, naming the file and the member.
"""

from __future__ import annotations

import functools
import io
import math
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vdla.config import ConfigError, board_presets
from vdla.errors import VdlaError

ENV = "VDLA_MAX_READ_BYTES"
NPY_MAGIC = b"\x93NUMPY"
NUMERIC_KINDS = "biufc"  # bool, signed, unsigned, float, complex: the arrays a reader takes
_LOCAL_HEADER = struct.Struct("<4s22sHH")  # signature, fixed fields, file name length, extra field length


@functools.cache
def default_max_bytes() -> int:
    """The largest DRAM window of the board presets (``dram_bytes``): the default read limit."""
    return max(c.dram_bytes for c in board_presets())


def max_read_bytes(given: int | None = None) -> int:
    """The read limit: ``given``, else ``$VDLA_MAX_READ_BYTES`` (an integer, 0x.. allowed), else the default."""
    if given is not None:
        return int(given)
    text = os.environ.get(ENV, "").strip()
    if not text:
        return default_max_bytes()
    try:
        value = int(text, 0)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"${ENV}={text!r}: the read limit must be a positive number of bytes")
    return value


def check_size(nbytes: int, limit: int, where: str, what: str, error: type[VdlaError]) -> None:
    """Refuse ``what`` of ``nbytes`` bytes (at ``where``) above ``limit``, before anything is allocated."""
    if nbytes > limit:
        raise error(
            f"{where}: {what} claims {nbytes} bytes, above the read limit of {limit} "
            f"(max_bytes, or ${ENV}; the default is the largest board DRAM, {default_max_bytes()})"
        )


def read_file(path: Path, limit: int, error: type[VdlaError]) -> bytes:
    """The bytes of ``path``, its size checked against ``limit`` first (FileNotFoundError passes through)."""
    try:
        check_size(path.stat().st_size, limit, str(path), "the file", error)
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise
    except OSError as e:  # a directory, no permission, ...
        raise error(f"{path}: cannot be read ({e})") from e
    check_size(len(data), limit, str(path), "the file", error)  # a file that grew, or a device
    return data


@dataclass
class ZipReader:
    """A zip archive held in memory (``data``), read member by member by exact name with a byte budget: the
    members read together may not pass ``limit``. ``where`` names the archive in errors."""

    data: bytes
    where: str
    limit: int
    error: type[VdlaError]
    spent: int = 0
    infos: dict[str, zipfile.ZipInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            with zipfile.ZipFile(io.BytesIO(self.data)) as z:
                infos = z.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, OSError, EOFError) as e:
            raise self.error(f"{self.where}: not a readable zip archive ({e})") from e
        for info in infos:
            if info.filename in self.infos:
                raise self.error(f"{self.where}: the member {info.filename!r} appears twice")
            self.infos[info.filename] = info

    def names(self) -> list[str]:
        return list(self.infos)

    def read(self, name: str) -> bytes:
        """The member ``name`` (exactly that name), checked as the module docstring says."""
        info = self.infos.get(name)
        where = f"{self.where}: member {name!r}"
        if info is None:
            raise self.error(f"{self.where}: no member {name!r} (members: {sorted(self.infos)[:8]})")
        check_size(info.file_size, self.limit - self.spent, where, "the member (with those read before)", self.error)
        if info.flag_bits & 0x1:
            raise self.error(f"{where}: encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise self.error(f"{where}: compression method {info.compress_type} (vdla reads stored or deflated)")
        out = self._inflate(info, self._raw(info, where), where)
        if zlib.crc32(out) != info.CRC:
            raise self.error(f"{where}: its CRC does not match its contents (corrupt)")
        self.spent += len(out)
        return out

    def _raw(self, info: zipfile.ZipInfo, where: str) -> bytes:
        """The member's stored (compressed) bytes, after a local header that agrees with the directory."""
        start = info.header_offset
        if start < 0 or start + _LOCAL_HEADER.size > len(self.data):
            raise self.error(f"{where}: its local header at {start} lies outside the archive")
        sig, _, n, m = _LOCAL_HEADER.unpack_from(self.data, start)
        if sig != b"PK\x03\x04":
            raise self.error(f"{where}: no local header at {start} (corrupt archive)")
        name = self.data[start + _LOCAL_HEADER.size : start + _LOCAL_HEADER.size + n]
        if name.decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace") != info.orig_filename:
            raise self.error(f"{where}: its local header names {name!r} (corrupt or overlapping archive)")
        begin = start + _LOCAL_HEADER.size + n + m
        if begin + info.compress_size > len(self.data):
            raise self.error(f"{where}: its {info.compress_size} stored bytes run past the end of the archive")
        return self.data[begin : begin + info.compress_size]

    def _inflate(self, info: zipfile.ZipInfo, raw: bytes, where: str) -> bytes:
        if info.compress_type == zipfile.ZIP_STORED:
            out = raw
        else:
            inflater = zlib.decompressobj(-15)
            try:
                out = inflater.decompress(raw, info.file_size + 1)
            except zlib.error as e:
                raise self.error(f"{where}: corrupt deflate stream ({e})") from e
            if len(out) > info.file_size:
                raise self.error(f"{where}: inflates past its declared size of {info.file_size} bytes")
            if not inflater.eof:
                raise self.error(f"{where}: its deflate stream stops short (truncated)")
        if len(out) > info.file_size:
            raise self.error(f"{where}: holds {len(out)} bytes, its declared size is {info.file_size}")
        if len(out) < info.file_size:
            raise self.error(f"{where}: holds {len(out)} bytes, its declared size is {info.file_size} (truncated)")
        return out


def npz_arrays(zr: ZipReader) -> dict[str, np.ndarray]:
    """Every ``NAME.npy`` member of an ``.npz`` archive as the array ``NAME`` (see :func:`npy_array`)."""
    arrays = {}
    for name in zr.names():
        if not name.endswith(".npy"):
            raise zr.error(f"{zr.where}: member {name!r} is not an .npy array")
        arrays[name[: -len(".npy")]] = npy_array(zr.read(name), f"{zr.where}: array {name[:-4]!r}", zr.limit, zr.error)
    return arrays


def npy_array(data: bytes, where: str, limit: int, error: type[VdlaError]) -> np.ndarray:
    """The array an ``.npy`` file's bytes hold: its header parsed and its claimed size checked against ``limit``
    before the array is built from exactly the bytes the header declares."""
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in read:
            raise ValueError(f"format version {version[0]}.{version[1]} (vdla reads 1.0 and 2.0)")
        shape, fortran, dtype = read[version](f)
    except (ValueError, TypeError, SyntaxError, RecursionError, KeyError) as e:
        raise error(f"{where}: not a readable .npy array ({e})") from e
    if dtype.kind not in NUMERIC_KINDS or dtype.hasobject or dtype.fields is not None or dtype.subdtype:
        raise error(f"{where}: dtype {dtype} is not a numeric array (vdla never reads pickled objects)")
    if any(d < 0 for d in shape):
        raise error(f"{where}: shape {list(shape)} has a negative dimension")
    count = math.prod(shape)
    check_size(count * dtype.itemsize, limit, where, f"the array {dtype}{list(shape)}", error)
    body = data[f.tell() :]
    if len(body) != count * dtype.itemsize:
        raise error(f"{where}: {dtype}{list(shape)} takes {count * dtype.itemsize} bytes, the file holds {len(body)}")
    flat = np.frombuffer(body, dtype, count)
    return flat.reshape(shape, order="F" if fortran else "C").copy(order="K")


def read_arrays(path: Path, where: str, limit: int, error: type[VdlaError]) -> np.ndarray | dict[str, np.ndarray]:
    """The array of an ``.npy`` file or the arrays of an ``.npz`` archive by name (told apart by content)."""
    data = read_file(path, limit, error)
    if data.startswith(NPY_MAGIC):
        return npy_array(data, where, limit, error)
    return npz_arrays(ZipReader(data, where, limit, error))
