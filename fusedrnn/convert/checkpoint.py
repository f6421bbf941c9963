"""Read TensorFlow checkpoints (the TensorBundle format) with NumPy only — no TensorFlow, no protobuf.

A checkpoint ``prefix`` is ``prefix.index`` plus the shards ``prefix.data-SSSSS-of-NNNNN``.

``.index`` is a LevelDB-style table (TF's ``lib/io/table``):

* footer (last 48 bytes): two block handles (varint64 offset, size: metaindex, index), zero
  padding to 40 bytes, then the magic ``0xdb4775248b80fb57`` (little-endian uint64);
* each block is followed by a 5-byte trailer: compression type (0 none, 1 snappy; TF writes its
  bundles uncompressed) and the masked CRC32C of block + type byte;
* a block holds entries ``varint32 shared, varint32 non_shared, varint32 value_len,
  key[shared:] bytes, value`` (keys prefix-compressed against the previous key), then the
  restart offsets (uint32 each) and their count (uint32);
* the index block maps separator keys to the handles of data blocks; the data blocks map
  ``""`` to a ``BundleHeaderProto`` (1 num_shards, 2 endianness, 3 version) and every tensor name to
  a ``BundleEntryProto`` (1 dtype, 2 shape, 3 shard_id, 4 offset, 5 size, 6 crc32c (masked),
  7 slices).

Tensor bytes are raw C-order little-endian elements at ``[offset, offset + size)`` of their shard;
strings are ``varint64`` lengths, a masked CRC32C (uint32) of the lengths (each checksummed as a
little-endian uint32), then the bytes.  Every
block and tensor checksum is verified; a corrupt or truncated file raises ``ValueError`` naming the
file and what is wrong.  ``bfloat16`` tensors are returned as float32 (exact: every bfloat16 is a
float32); strings as ``object`` arrays of ``bytes``.
"""

from __future__ import annotations

import os
import struct

import numpy as np

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
_MASK_DELTA = 0xA282EAD8
_DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8, 7: object,
           8: np.complex64, 9: np.int64, 10: np.bool_, 14: "bfloat16", 17: np.uint16, 18: np.complex128,
           19: np.float16, 22: np.uint32, 23: np.uint64}


# -- CRC32C (Castagnoli), vectorised over lanes with NumPy ------------------------------------------
def _make_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)
    return table


_TABLE = _make_table()
_TABLE_LIST = [int(v) for v in _TABLE]


def _zeros_operator(n: int) -> list:
    """Columns of the GF(2) matrix advancing a CRC register over ``n`` zero bytes."""
    def apply(columns, value):
        out = 0
        for bit in range(32):
            if value >> bit & 1:
                out ^= columns[bit]
        return out

    step = [_TABLE_LIST[(1 << bit) & 0xFF] ^ ((1 << bit) >> 8) for bit in range(32)]
    result = [1 << bit for bit in range(32)]
    while n:
        if n & 1:
            result = [apply(step, c) for c in result]
        step = [apply(step, c) for c in step]
        n >>= 1
    return result


def _apply_vec(columns: list, values: np.ndarray) -> np.ndarray:
    out = np.zeros_like(values)
    for bit in range(32):
        out ^= np.where((values >> np.uint32(bit)) & np.uint32(1), np.uint32(columns[bit]), np.uint32(0))
    return out


def _register_scalar(register: int, data) -> int:
    table = _TABLE_LIST
    for byte in data:
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def crc32c(data, crc: int = 0) -> int:
    """CRC32C of ``data`` (bytes-like), continuing from ``crc`` (``crc32c(b + c) == crc32c(c, crc32c(b))``)."""
    data = memoryview(data).cast("B")
    register = crc ^ 0xFFFFFFFF
    n = len(data)
    if n < 8192:
        return _register_scalar(register, data) ^ 0xFFFFFFFF
    lanes = 1 << min(16, (n // 256).bit_length() - 1)
    width = n // lanes
    chunk = np.frombuffer(data, np.uint8, lanes * width).reshape(lanes, width).T.astype(np.uint32)
    regs = np.zeros(lanes, np.uint32)
    for column in chunk:
        regs = _TABLE[(regs ^ column) & np.uint32(0xFF)] ^ (regs >> np.uint32(8))
    span = width
    while regs.size > 1:
        regs = _apply_vec(_zeros_operator(span), regs[0::2]) ^ regs[1::2]
        span *= 2
    register = int(_apply_vec(_zeros_operator(span), np.array([register], np.uint32))[0]) ^ int(regs[0])
    return _register_scalar(register, data[lanes * width:]) ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


# -- protobuf wire format and the table ------------------------------------------------------------
class _Corrupt(Exception):
    pass


def _varint(data, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Corrupt("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data) -> dict:
    """Parse a protobuf message into {field number: [values]} (ints for varint/fixed, bytes otherwise)."""
    fields, pos = {}, 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            if pos + 8 > len(data):
                raise _Corrupt("truncated fixed64 field")
            value, pos = struct.unpack_from("<Q", data, pos)[0], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise _Corrupt("truncated length-delimited field")
            value, pos = bytes(data[pos:pos + size]), pos + size
        elif wire == 5:
            if pos + 4 > len(data):
                raise _Corrupt("truncated fixed32 field")
            value, pos = struct.unpack_from("<I", data, pos)[0], pos + 4
        else:
            raise _Corrupt(f"unsupported protobuf wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def _block(data: bytes, handle: tuple) -> bytes:
    offset, size = handle
    if offset + size + 5 > len(data):
        raise _Corrupt(f"block [{offset}, {offset + size}) + trailer runs past the end ({len(data)} bytes)")
    contents = data[offset:offset + size]
    kind = data[offset + size]
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    if mask_crc(crc32c(data[offset:offset + size + 1])) != stored:
        raise _Corrupt(f"block at offset {offset} fails its CRC32C check")
    if kind != 0:
        raise _Corrupt(f"block at offset {offset} uses compression type {kind} (TF writes bundles uncompressed; "
                       "only type 0 is supported)")
    return contents


def _entries(block: bytes):
    """(key, value) pairs of one table block."""
    if len(block) < 4:
        raise _Corrupt("block shorter than its restart count")
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise _Corrupt(f"block claims {restarts} restart points, more than fit")
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        size, pos = _varint(block, pos)
        if shared > len(key) or pos + unshared + size > end:
            raise _Corrupt("block entry runs past the block")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + size]
        pos += size


def _handle(value: bytes, pos: int = 0) -> tuple:
    offset, pos = _varint(value, pos)
    size, pos = _varint(value, pos)
    return (offset, size), pos


def _ordered_string(key: bytes, pos: int) -> tuple[str, int]:
    """OrderedCode string: 0x00 escaped as 00 ff, 0xff as ff 00, terminated by 00 01."""
    out = bytearray()
    while pos + 1 < len(key):
        byte, following = key[pos], key[pos + 1]
        if byte == 0x00 and following == 0x01:
            return out.decode("utf-8", "replace"), pos + 2
        if byte in (0x00, 0xFF):
            if following != (0xFF if byte == 0x00 else 0x00):
                raise _Corrupt("bad escape in a slice key")
            out.append(byte)
            pos += 2
        else:
            out.append(byte)
            pos += 1
    raise _Corrupt("unterminated name in a slice key")


def _ordered_signed(key: bytes, pos: int) -> tuple[int, int]:
    """OrderedCode ``WriteSignedNumIncreasing``: a length-prefixed (unary header bits), sign-folded
    big-endian integer (lengths 1..8 bytes)."""
    if pos >= len(key):
        raise _Corrupt("truncated slice key")
    negative = not key[pos] & 0x80
    first = key[pos] ^ (0xFF if negative else 0)
    if first == 0xFF:
        raise _Corrupt("slice extent out of range")
    length = 8 - (first ^ 0xFF).bit_length()
    if pos + length > len(key):
        raise _Corrupt("truncated slice key")
    value = -1 if negative else 0
    for byte in key[pos:pos + length]:
        value = (value << 8) | byte
    value ^= ((1 << length) - 1) << (7 * length)
    value &= (1 << 64) - 1
    return (value - (1 << 64) if value >> 63 else value), pos + length


def _decode_slice_key(key: bytes) -> tuple[str, tuple]:
    """``EncodeTensorNameSlice``: 0, the name, the rank, then (start, length) per dim (-1 = all)."""
    try:
        if key[:1] != b"\x00":
            raise _Corrupt("slice key does not start with 0")
        name, pos = _ordered_string(key, 1)
        size = key[pos] if pos < len(key) else 0
        rank, pos = int.from_bytes(key[pos + 1:pos + 1 + size], "big"), pos + 1 + size
        extents = []
        for _ in range(rank):
            start, pos = _ordered_signed(key, pos)
            length, pos = _ordered_signed(key, pos)
            extents.append((start, length))
    except IndexError:
        raise _Corrupt("truncated slice key") from None
    return name, tuple(extents)


def _index_path(prefix) -> str:
    prefix = os.fspath(prefix)
    if prefix.endswith(".index"):
        prefix = prefix[:-6]
    if os.path.isdir(prefix):
        state = os.path.join(prefix, "checkpoint")
        if not os.path.exists(state):
            raise ValueError(f"{prefix} is a directory without a 'checkpoint' file: pass the checkpoint prefix")
        with open(state, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model_checkpoint_path:"):
                    name = line.split(":", 1)[1].strip().strip('"')
                    return os.path.join(prefix, name) if not os.path.isabs(name) else name
        raise ValueError(f"{state} names no model_checkpoint_path")
    return prefix


class _Entry:
    __slots__ = ("dtype", "shape", "shard", "offset", "size", "crc", "sliced")


def _parse_entry(value: bytes) -> _Entry:
    fields = _fields(value)
    entry = _Entry()
    entry.dtype = fields.get(1, [0])[-1]
    shape = _fields(fields.get(2, [b""])[-1])
    if shape.get(3, [0])[-1]:
        raise _Corrupt("tensor of unknown rank")
    entry.shape = tuple(_fields(dim).get(1, [0])[-1] for dim in shape.get(2, []))
    if any(d >= 1 << 62 for d in entry.shape):
        raise _Corrupt(f"negative dimension in shape {entry.shape}")
    entry.shard = fields.get(3, [0])[-1]
    entry.offset = fields.get(4, [0])[-1]
    entry.size = fields.get(5, [0])[-1]
    entry.crc = fields.get(6, [None])[-1]
    entry.sliced = bool(fields.get(7))
    return entry


def _read_index(prefix: str):
    path = prefix + ".index"
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ValueError(f"cannot read TF checkpoint index {path}: {exc}") from None
    try:
        if len(data) < FOOTER_SIZE:
            raise _Corrupt(f"file is {len(data)} bytes, shorter than the {FOOTER_SIZE}-byte table footer")
        footer = data[-FOOTER_SIZE:]
        if struct.unpack_from("<Q", footer, 40)[0] != TABLE_MAGIC:
            raise _Corrupt("bad table magic number (not a TF checkpoint index, or truncated)")
        _, pos = _handle(footer)
        index_handle, _ = _handle(footer, pos)
        header, entries, slices = None, {}, {}
        for _, handle_bytes in _entries(_block(data, index_handle)):
            for key, value in _entries(_block(data, _handle(handle_bytes)[0])):
                if key == b"":
                    header = _fields(value)
                elif key[:1] == b"\x00":  # one slice of a partitioned tensor
                    name, extents = _decode_slice_key(key)
                    slices.setdefault(name, []).append((extents, value))
                else:
                    entries[key.decode("utf-8", "replace")] = value
        if header is None:
            raise _Corrupt("no BundleHeaderProto (empty key) in the table")
        return header, entries, slices
    except _Corrupt as exc:
        raise ValueError(f"corrupt TF checkpoint index {path}: {exc}") from None


def list_tf_checkpoint(prefix) -> dict:
    """``{name: (dtype name, shape)}`` of a checkpoint, without reading tensor data."""
    prefix = _index_path(prefix)
    _, entries, _ = _read_index(prefix)
    out = {}
    for name, value in sorted(entries.items()):
        try:
            entry = _parse_entry(value)
        except _Corrupt as exc:
            raise ValueError(f"corrupt TF checkpoint index {prefix}.index: entry {name!r}: {exc}") from None
        dtype = _DTYPES.get(entry.dtype)
        out[name] = (np.dtype(dtype).name if dtype not in (None, "bfloat16") else str(dtype or entry.dtype),
                     entry.shape)
    return out


def _decode_strings(raw: bytes, count: int, where: str) -> tuple[np.ndarray, int]:
    pos, lengths, crc = 0, [], 0
    try:
        for _ in range(count):
            length, pos = _varint(raw, pos)
            lengths.append(length)
            crc = crc32c(struct.pack("<I", length & 0xFFFFFFFF), crc)
    except _Corrupt as exc:
        raise ValueError(f"{where}: string lengths: {exc}") from None
    if pos + 4 + sum(lengths) != len(raw):
        raise ValueError(f"{where}: string tensor has {len(raw)} bytes, its lengths need {pos + 4 + sum(lengths)}")
    if struct.unpack_from("<I", raw, pos)[0] != mask_crc(crc):
        raise ValueError(f"{where}: string lengths fail their CRC32C check")
    crc = crc32c(raw[pos:pos + 4], crc)
    pos += 4
    out = np.empty(count, dtype=object)
    for k, length in enumerate(lengths):
        out[k] = bytes(raw[pos:pos + length])
        pos += length
    return out, crc32c(raw[pos - sum(lengths):pos], crc)


def read_tf_checkpoint(prefix, names=None, *, verify: bool = True) -> dict:
    """``{name: ndarray}`` of the tensors of a TF1 or TF2 checkpoint (module doc), bit-exact.

    ``prefix``: the path before ``.index`` (or the ``.index`` path, or a directory with a
    ``checkpoint`` file).  ``names``: read only these.  ``verify``: check every tensor's CRC32C.
    Partitioned tensors (TF1 partitioned variables, TF2 sharding policies that split a tensor) are
    reassembled from their slices (keys ``EncodeTensorNameSlice``: OrderedCode name + extents).
    """
    prefix = _index_path(prefix)
    header, entries, slices = _read_index(prefix)
    index_path = prefix + ".index"
    num_shards = header.get(1, [1])[-1]
    big_endian = header.get(2, [0])[-1] == 1
    if names is not None:
        missing = [n for n in names if n not in entries]
        if missing:
            raise KeyError(f"{prefix}: no tensors named {missing}; it has {sorted(entries)[:20]}")
        entries = {n: entries[n] for n in names}
    shards, out = {}, {}

    def parse(value: bytes, what: str) -> _Entry:
        try:
            return _parse_entry(value)
        except _Corrupt as exc:
            raise ValueError(f"corrupt TF checkpoint index {index_path}: {what}: {exc}") from None

    def read_array(entry: _Entry, where: str) -> np.ndarray:
        if entry.dtype not in _DTYPES:
            raise ValueError(f"{where} has TF DataType enum {entry.dtype}, which read_tf_checkpoint does not "
                             "decode (numeric, bool and string tensors are supported)")
        if not 0 <= entry.shard < num_shards:
            raise ValueError(f"{where} lives in shard {entry.shard}, but the header says {num_shards} shard(s)")
        if entry.shard not in shards:
            path = f"{prefix}.data-{entry.shard:05d}-of-{num_shards:05d}"
            try:
                shards[entry.shard] = open(path, "rb")
            except OSError as exc:
                raise ValueError(f"{where}: cannot open its data shard {path}: {exc}") from None
        data_file = shards[entry.shard]
        data_file.seek(0, os.SEEK_END)
        file_size = data_file.tell()
        if entry.offset + entry.size > file_size:
            raise ValueError(f"{where}: bytes [{entry.offset}, {entry.offset + entry.size}) run past the end of "
                             f"{data_file.name} ({file_size} bytes): truncated file")
        data_file.seek(entry.offset)
        raw = data_file.read(entry.size)
        count = int(np.prod(entry.shape, dtype=np.int64)) if entry.shape else 1
        kind = _DTYPES[entry.dtype]
        if kind is object:
            array, crc = _decode_strings(raw, count, where)
            array = array.reshape(entry.shape)
        else:
            base = np.dtype(np.uint16 if kind == "bfloat16" else kind)
            if entry.size != count * base.itemsize:
                raise ValueError(f"{where}: {entry.size} bytes stored, but shape {list(entry.shape)} of "
                                 f"{base.name} needs {count * base.itemsize}")
            crc = crc32c(raw) if verify else None
            array = np.frombuffer(raw, base.newbyteorder(">" if big_endian else "<")).astype(base).reshape(entry.shape)
            if kind == "bfloat16":
                array = (array.astype(np.uint32) << np.uint32(16)).view(np.float32)
            elif kind is np.bool_ and np.any(array.view(np.uint8) > 1):
                raise ValueError(f"{where}: bool tensor holds bytes other than 0 and 1")
        if verify and entry.crc is not None and mask_crc(crc) != entry.crc:
            raise ValueError(f"{where}: data fails its CRC32C check (corrupt shard {data_file.name})")
        return array

    def assemble(name: str, entry: _Entry, where: str) -> np.ndarray:
        """A partitioned tensor: its slices (own entries, keyed by name + extents) put in place."""
        parts = slices.get(name, [])
        result, covered = None, 0
        for extents, value in parts:
            part = read_array(parse(value, f"slice of {name!r}"), f"{where} (slice {list(extents)})")
            if len(extents) != len(entry.shape):
                raise ValueError(f"{where}: slice of rank {len(extents)} for a rank-{len(entry.shape)} tensor")
            region = tuple(slice(0, dim) if length == -1 else slice(start, start + length)
                           for (start, length), dim in zip(extents, entry.shape))
            if result is None:
                result = np.zeros(entry.shape, part.dtype)
            if result[region].shape != part.shape:
                raise ValueError(f"{where}: slice {list(extents)} of shape {list(part.shape)} does not fit "
                                 f"{list(entry.shape)}")
            result[region] = part
            covered += part.size
        if result is None or covered != result.size:
            raise ValueError(f"{where}: its slices cover {covered} of {int(np.prod(entry.shape))} elements")
        return result

    try:
        for name in sorted(entries):
            where = f"{prefix}: tensor {name!r}"
            entry = parse(entries[name], f"entry {name!r}")
            out[name] = assemble(name, entry, where) if entry.sliced else read_array(entry, where)
    finally:
        for handle in shards.values():
            handle.close()
    return out


def read_keras_weights(path) -> dict:
    """``{name: ndarray}`` of a Keras 3 ``.weights.h5`` file or ``.keras`` archive (its
    ``model.weights.h5``), names like ``layers/lstm/cell/vars/0`` — read with h5py, Keras not needed."""
    import io
    import zipfile
    from ._optional import require
    h5py = require("h5py", "fusedrnn.convert.read_keras_weights")
    path = os.fspath(path)
    source = path
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if "model.weights.h5" not in archive.namelist():
                raise ValueError(f"{path}: a .keras archive without model.weights.h5 (has {archive.namelist()})")
            source = io.BytesIO(archive.read("model.weights.h5"))
    out = {}
    try:
        with h5py.File(source, "r") as handle:
            handle.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset)
                              else None)
    except OSError as exc:
        raise ValueError(f"cannot read Keras weights {path}: {exc}") from None
    return out
