"""The transitions log: an Arrow IPC stream, append-only, tail-safe, read exactly.

``transitions.arrows`` is an Arrow IPC *stream* (the Arrow columnar format's streaming
layout; media type ``application/vnd.apache.arrow.stream``): a schema message, then one
record batch per writer flush, then, when the recording is closed, the end-of-stream marker.
Each batch's buffers are zstd-compressed (IPC body compression). Columns, as the CSV layout
before it: ``i`` (int64), ``t``, ``s_0..``, ``a_0..``, ``s_next_0..``, ``reward``,
``episode`` (float64, NaN where the source gives none).

S' is stored only where it is not the next row's S: a null ``s_next_j`` means "the next
row's ``s_j``", bit for bit (a loop's S' is its next S except at an episode's end). The last
row of every batch keeps its S', so each batch reads on its own. Every value is the float64
the loop produced: a replay is bit-identical.

Read it without IDT Desk (pyarrow, pandas or polars), filling S' from the next row::

    import pyarrow.ipc as ipc
    df = ipc.open_stream("run/transitions.arrows").read_pandas()
    for c in [c for c in df if c.startswith("s_next_")]:
        df[c] = df[c].fillna(df[c.replace("s_next_", "s_")].shift(-1))

(polars: ``pl.read_ipc_stream(path)``, then the same fill with ``shift(-1)``.)

A killed writer leaves whole batches and perhaps a torn last one; :class:`Frames` finds the
messages' ends from their framing alone (a length prefix, the metadata's body length), so a
torn last batch is dropped and said, a follower waits for its rest, and bytes that are no
Arrow message are named by their offset. Every batch is a writer's block of at most a
flush's rows; a batch claiming more rows than :data:`MAX_ROWS`, or a buffer that would
decompress to more than its rows hold, is refused before anything is decompressed (a crafted
file cannot make the reader allocate what it claims).

**A checksum on every block.** Each record batch carries, in its message's custom metadata
(``idt_desk_crc32``), the CRC-32 of the message's metadata and body (the checksum's own eight
digits read as zeros), so every byte of a block but its 8-byte frame is covered, its row
count and buffer offsets included. Arrow readers (pyarrow, pandas, polars) read the log as
before and ignore the key; every reader here checks it before it decodes a block, and a
block that fails is refused by name ("block 12 of transitions.arrows: checksum mismatch")
with the rows before it kept. Chosen over MCAP's and TFRecord's framing (a CRC beside each
record in a container of their own), which no Arrow reader opens, and over a side index,
which a torn write would leave behind the log. A log written before the checksum loads as
before and says its blocks cannot be verified.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idt_desk.recordings.files import TRANSITIONS, AppendFile, RecordingError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EOS", "MAX_ROWS", "NAME", "Frames", "TransitionLog", "decode_rows",
           "read_transitions", "transition_columns"]

#: The transitions log's file name (Arrow's registered extension for its stream format).
NAME = TRANSITIONS[2]

#: The end-of-stream marker a closing writer appends.
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"

#: Most rows one batch may claim (a writer's block is one flush: under a second of a loop).
MAX_ROWS = 1 << 22

#: Longest metadata a message may have (a batch of a few hundred columns takes a few kB).
MAX_METADATA = 1 << 20

#: Most rows a writer puts in one batch (a flush of a fast loop is several): a block stays
#: small enough to go out whole on a nearly full disk, and to decode on its own.
BLOCK_ROWS = 4096

#: Bytes of a log read at a time.
_CHUNK = 4 << 20

#: The checksum's key in a batch's custom metadata, and its value's first bytes: the value is
#: this marker and eight hex digits (found in the metadata's bytes by the marker, which the
#: key alone cannot be mistaken for: the key ends at the marker's "=").
CRC_KEY = "idt_desk_crc32"
_CRC_MARK = f"{CRC_KEY}=".encode()
_CRC_ZERO = b"00000000"
#: Whether writers seal their blocks with the checksum (False only for ``idt-desk bench
#: recording``'s same-run baseline of what the checksum costs).
SEAL = True

#: The zstd level: 1 compressed a recorded HalfCheetah run as well as 3 (185 B a transition)
#: at a fraction of the time.
_LEVEL = 1


def transition_columns(n_states: int, n_actions: int) -> list[str]:
    """The transitions' columns: ``i, t, s_0.., a_0.., s_next_0.., reward, episode``."""
    return ["i", "t", *[f"s_{j}" for j in range(n_states)],
            *[f"a_{j}" for j in range(n_actions)],
            *[f"s_next_{j}" for j in range(n_states)], "reward", "episode"]


def _schema(columns: Sequence[str]) -> Any:
    import pyarrow as pa

    fields = [pa.field(c, pa.int64() if c == "i" else pa.float64(),
                       nullable=c.startswith("s_next_")) for c in columns]
    return pa.schema(fields, metadata={"idt_desk": "transitions",
                                       "s_next": "null: the next row's s, bit for bit"})


class TransitionLog(AppendFile):
    """The transitions log being written: one compressed record batch per flush.

    A write that fails (a full disk) is cut back to the last whole message, as a text
    table is to its last whole line; the rest is written again later.
    """

    def __init__(self, path: Path, columns: Sequence[str], n_states: int,
                 n_actions: int) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self.columns = list(columns)
        self._pending: list[np.ndarray] = []
        self._s = slice(2, 2 + n_states)
        first = 2 + n_states + n_actions
        self._s_next = slice(first, first + n_states)
        self._schema = _schema(self.columns)
        self._sink = io.BytesIO()
        self._options = ipc.IpcWriteOptions(compression=pa.Codec("zstd", _LEVEL))
        self._writer: Any = None
        #: Offsets into :attr:`carry` where a message ends (a write keeps whole ones).
        self._ends: list[int] = []
        self._header_bytes = len(self._schema.serialize().to_pybytes())  # the stream
        # writer's own schema message, skipped: the log's header is the same schema with its
        # checksum (a flipped byte in a column's name or type is refused by it, in one line)
        self._seal = SEAL
        header = self._schema.serialize().to_pybytes() if not self._seal else _seal(
            self._schema.with_metadata(
                {**self._schema.metadata, CRC_KEY.encode(): _CRC_MARK + _CRC_ZERO}
            ).serialize().to_pybytes())
        self._ends.append(len(header))
        super().__init__(path, header)

    def append(self, block: np.ndarray) -> None:
        """Keep a block of rows (the CSV layout's columns) for the next take (copied)."""
        if block.size:
            self._pending.append(np.array(block, dtype=np.float64))

    def stage(self, taken: list[Any]) -> None:
        """Encode the taken blocks as one record batch onto :attr:`carry`."""
        if not taken:
            return
        rows = np.vstack(taken)
        parts = [self.carry]
        end = len(self.carry)
        for start in range(0, len(rows), BLOCK_ROWS):
            parts.append(self._encode(rows[start:start + BLOCK_ROWS]))
            end += len(parts[-1])
            self._ends.append(end)
        self.carry = b"".join(parts)  # once: a carry grown block by block was copied each time

    def _encode(self, rows: np.ndarray) -> bytes:
        """One record batch of ``rows``: its IPC message's bytes."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        cols = np.ascontiguousarray(rows.T)  # one pass; then each column is Arrow's as is
        bits = cols.view(np.int64)
        same = np.zeros(len(rows), dtype=bool)  # S' is the next row's S, bit for bit
        same[:-1] = (bits[self._s_next, :-1] == bits[self._s, 1:]).all(axis=0)
        arrays = []
        for j, name in enumerate(self.columns):
            col = cols[j]
            if name == "i":
                arrays.append(pa.array(col.astype(np.int64)))
            elif self._s_next.start <= j < self._s_next.stop and same.any():
                col[same] = 0.0  # under the nulls: compresses to nothing
                arrays.append(pa.array(col, mask=same))
            else:
                arrays.append(pa.array(col))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        skip = 0
        if self._writer is None:
            self._writer = ipc.new_stream(self._sink, self._schema, options=self._options)
            skip = self._header_bytes  # its schema message: written as the header
        if not self._seal:
            self._writer.write_batch(batch)
            data = self._sink.getbuffer()[skip:].tobytes()
            self._sink.seek(0)
            self._sink.truncate()
            return data
        self._writer.write_batch(
            batch, custom_metadata={CRC_KEY: (_CRC_MARK + _CRC_ZERO).decode()})
        data = _seal(self._sink.getbuffer()[skip:])
        self._sink.seek(0)
        self._sink.truncate()
        return data

    def whole(self, data: bytes, done: int) -> int:
        """Bytes of ``data`` up to the end of the last whole message within ``done``."""
        whole = max((e for e in self._ends if e <= done), default=0)
        self._ends = [e - whole for e in self._ends if e > whole]
        return whole

    def written(self) -> None:
        """The whole carry went out: no message end is pending."""
        self._ends = []

    def kept(self) -> int:
        """Whole messages the carry holds."""
        return len(self._ends)

    def close(self) -> None:
        """Write the end-of-stream marker (best effort: a reader needs none) and close."""
        if not self.carry:
            try:
                os.write(self.fd, EOS)
            except OSError:
                pass
        super().close()


def _seal(message: bytes | memoryview) -> bytes:
    """A message whose metadata holds the checksum placeholder, with its checksum written."""
    data = bytearray(message)
    at = _crc_at(data)
    data[at:at + 8] = b"%08x" % _crc(data, at)
    return bytes(data)


def _crc_at(message: bytes | bytearray) -> int:
    """Where a batch message's eight checksum digits are (-1: it has none)."""
    length = int.from_bytes(message[4:8], "little")
    k = message.find(_CRC_MARK, 8, 8 + length)
    return -1 if k < 0 else k + len(_CRC_MARK)


def _crc(message: bytes | bytearray, at: int) -> int:
    """CRC-32 of a message's metadata and body, its checksum's digits (at ``at``) as zeros."""
    view = memoryview(message)
    crc = zlib.crc32(view[8:at])
    crc = zlib.crc32(_CRC_ZERO, crc)
    return zlib.crc32(view[at + 8:], crc)


def _u(fmt: str, buf: bytes, pos: int) -> Any:
    """``struct.unpack_from`` inside ``buf`` only (a crafted offset raises ValueError)."""
    if pos < 0 or pos + struct.calcsize(fmt) > len(buf):
        raise ValueError(f"offset {pos} outside the message's metadata")
    return struct.unpack_from(fmt, buf, pos)[0]


def _at(buf: bytes, table: int, index: int) -> int | None:
    """Where field ``index`` of a flatbuffer table is (Arrow's message metadata), or None."""
    vtable = table - _u("<i", buf, table)
    slot = 4 + 2 * index
    if slot + 2 > _u("<H", buf, vtable):
        return None
    offset = _u("<H", buf, vtable + slot)
    return table + offset if offset else None


def _field(buf: bytes, table: int, index: int, fmt: str, default: int) -> int:
    """A scalar field of a flatbuffer table, or its default."""
    pos = _at(buf, table, index)
    return default if pos is None else _u(fmt, buf, pos)


def _message_info(meta: bytes) -> tuple[int, int, int, list[tuple[int, int]], bool]:
    """A message's (header type, body length, rows, buffers, compressed) from its metadata.

    Arrow's ``Message`` table: ``version`` (0), ``header_type`` (1), ``header`` (2),
    ``bodyLength`` (3); a ``RecordBatch`` header's ``length`` (0) is its rows, ``buffers``
    (2) its buffers' (offset, length) in the body, ``compression`` (3) whether they are
    compressed (each then led by its length decompressed, an int64).
    """
    root = _u("<I", meta, 0)
    kind = _field(meta, root, 1, "<B", 0)
    body = _field(meta, root, 3, "<q", 0)
    rows, buffers, compressed = 0, [], False
    header = _at(meta, root, 2) if kind == 3 else None  # a RecordBatch
    if header is not None and (ref := _u("<I", meta, header)):  # relative to its position
        table = header + ref
        rows = _field(meta, table, 0, "<q", 0)
        if (pos := _at(meta, table, 2)) is not None:
            vector = pos + _u("<I", meta, pos)
            n = _u("<I", meta, vector)
            if 16 * n > len(meta):
                raise ValueError(f"{n:,} buffers in a message of {len(meta):,} bytes")
            buffers = [(_u("<q", meta, vector + 4 + 16 * k), _u("<q", meta, vector + 12 + 16 * k))
                       for k in range(n)]
        compressed = _at(meta, table, 3) is not None
    return kind, body, rows, buffers, compressed


class Frames:
    """The whole messages of a growing Arrow IPC stream, found from their framing alone.

    :meth:`feed` takes the stream's next bytes and returns those of the whole messages they
    complete (record batches); the schema message is kept in :attr:`schema_bytes`. A message
    not yet whole waits in :attr:`partial`. Bytes that cannot begin a message raise
    RecordingError naming their offset.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.schema_bytes = b""
        self.partial = b""
        self.offset = 0  # of :attr:`partial`'s first byte in the file
        self.ended = False  # the end-of-stream marker was read
        self.rows = 0
        #: Record batches taken so far, and how many of them carried no checksum (a log
        #: written before checksums: loaded as before, said to be unverified).
        self.blocks = 0
        self.unverified = 0
        #: Why the stream is read no further (a block whose checksum failed; None: it is
        #: not): the blocks before it are kept, nothing from it on is taken.
        self.broken: str | None = None

    def feed(self, data: bytes) -> bytes:
        """The whole record-batch messages ``data`` completes (concatenated).

        Damage before the first batch (the schema) raises RecordingError; damage in a batch
        (its checksum, its framing, its metadata, its claims) stops the stream there: the
        batches before it are returned, :attr:`broken` says which block and why, and nothing
        from it on is ever taken.
        """
        if self.broken is not None:
            return b""
        buf = self.partial + data if self.partial else data
        out = []
        pos = 0
        while len(buf) - pos >= 8 and not self.ended:
            start = self.offset + pos
            try:
                end = self._message(buf, pos, start, out)
            except RecordingError as exc:
                if not self.schema_bytes:
                    raise
                self.broken = (f"block {self.blocks + 1:,} of {Path(self.where).name} "
                               f"(byte {start:,}): {str(exc).split(': ', 2)[-1]}: the "
                               f"{self.rows:,} rows before it are kept, nothing after")
                pos = len(buf)  # nothing of it or after it is taken
                break
            if end is None:
                break  # not whole yet
            pos = end
        self.partial = b"" if self.broken is not None else buf[pos:]
        self.offset += pos
        if self.ended and self.partial:
            if not self.schema_bytes:
                raise RecordingError(f"{self.where}: byte {self.offset:,}: garbage bytes "
                                     "after the end-of-stream marker")
            self.broken = (f"{Path(self.where).name} (byte {self.offset:,}): garbage bytes "
                           f"after the end-of-stream marker: the {self.rows:,} rows before "
                           "it are kept")
            self.partial = b""
        return b"".join(out)

    def _message(self, buf: bytes, pos: int, start: int, out: list[bytes]) -> int | None:
        """Take the message at ``pos`` of ``buf`` (a batch onto ``out``); where it ends.

        None: it is not whole yet. Raises RecordingError for anything that is not a
        recording's message: garbage, a checksum that fails, a claim no writer makes.
        """
        marker, length = struct.unpack_from("<Ii", buf, pos)
        if marker != 0xFFFFFFFF or not 0 <= length <= MAX_METADATA or length % 8:
            raise RecordingError(f"{self.where}: byte {start:,}: garbage bytes "
                                 f"{buf[pos:pos + 4]!r}... (not an Arrow IPC message, as a "
                                 "transitions log holds)")
        if length == 0:
            self.ended = True
            return pos + 8
        if len(buf) - pos < 8 + length:
            return None
        try:
            kind, body, rows, buffers, packed = _message_info(buf[pos + 8:pos + 8 + length])
        except (ValueError, struct.error) as exc:
            raise RecordingError(f"{self.where}: byte {start:,}: a message whose metadata "
                                 f"cannot be read ({exc})") from None
        if body < 0 or body % 8 or not 0 <= rows <= MAX_ROWS:
            raise RecordingError(f"{self.where}: byte {start:,}: a message claiming "
                                 f"{body:,} bytes and {rows:,} rows: not a recording's")
        end = pos + 8 + length + body
        if len(buf) < end:
            return None
        message = buf[pos:end]
        at = _crc_at(message)
        if at >= 0 and message[at:at + 8] != b"%08x" % _crc(message, at):
            raise RecordingError(f"{self.where}: byte {start:,}: checksum mismatch")
        if kind == 1:
            if self.schema_bytes:
                raise RecordingError(f"{self.where}: byte {start:,}: a second schema")
            self.schema_bytes = message
        elif kind == 3:
            if not self.schema_bytes:
                raise RecordingError(f"{self.where}: byte {start:,}: a batch before the "
                                     "schema")
            self._check_sizes(message, 8 + length, body, rows, buffers, packed, start)
            out.append(message)
            self.rows += rows
            self.blocks += 1
            self.unverified += at < 0
        else:
            raise RecordingError(f"{self.where}: byte {start:,}: an Arrow message of type "
                                 f"{kind}, not a record batch")
        return end

    def _check_sizes(self, message: bytes, body_at: int, body: int, rows: int,
                     buffers: list[tuple[int, int]], packed: bool, start: int) -> None:
        """Refuse a batch whose buffers claim more than its rows hold, before decoding it.

        A float64 or int64 column of ``rows`` values takes 8 bytes a row, its validity bitmap
        less: a buffer that would decompress (or read) to more is a crafted one (two claiming
        8 GiB each grew a reader past 6 GB).
        """
        most = 8 * max(rows, 1) + 64  # Arrow pads buffers to 64 bytes
        for offset, size in buffers:
            if offset < 0 or size < 0 or offset + size > body:
                raise RecordingError(f"{self.where}: byte {start:,}: a buffer outside its "
                                     "block's body")
            claimed = size
            if packed and size >= 8:
                claimed = int.from_bytes(message[body_at + offset:body_at + offset + 8],
                                         "little", signed=True)
                if claimed == -1:  # stored as is
                    claimed = size - 8
            if not 0 <= claimed <= most:
                raise RecordingError(f"{self.where}: byte {start:,}: a buffer claiming "
                                     f"{claimed:,} bytes for {rows:,} rows: not a "
                                     "recording's (refused before it was decompressed)")


def decode_rows(frames: Frames, messages: bytes,
                columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows of whole batch messages as the CSV layout's table (S' filled in).

    ``columns``: the columns the recording's config asks for (None: the schema's own).

    Raises
    ------
    RecordingError
        The batches do not decode (a corrupt buffer), or their columns are not
        ``columns``, or a null S' has no next row in its batch.
    """
    import pyarrow as pa
    import pyarrow.ipc as ipc

    try:
        table = ipc.open_stream(pa.py_buffer(frames.schema_bytes + messages)).read_all()
        table.validate()
    except Exception as exc:  # pyarrow's, and what a crafted schema raises (a UnicodeError)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RecordingError(f"{frames.where}: a batch that cannot be decoded ({first})") \
            from None
    columns = table.column_names if columns is None else list(columns)
    if table.column_names != columns:
        raise RecordingError(f"{frames.where}: columns {table.column_names} are not the "
                             f"recording's {list(columns)}")
    for name, kind in zip(table.column_names, table.schema.types, strict=True):
        want = pa.int64() if name == "i" else pa.float64()
        if kind != want:  # a string, int32, bool or list column where a writer puts floats
            raise RecordingError(f"{frames.where}: column {name} holds {kind}, not {want} as "
                                 "a transitions log's")
    df = table.to_pandas()
    nxt = [c for c in columns if c.startswith("s_next_")]
    if nxt and table.num_rows:
        null = table.column(nxt[0]).is_null().to_numpy(zero_copy_only=False)
        for c in nxt[1:]:
            if not np.array_equal(table.column(c).is_null().to_numpy(zero_copy_only=False),
                                  null):
                raise RecordingError(f"{frames.where}: S' is null in some columns of a row "
                                     "but not all")
        if null.any():
            if null[-1]:
                raise RecordingError(f"{frames.where}: the last row's S' is null (no next "
                                     "row to take it from)")
            rows = np.flatnonzero(null)
            s = df[[c.replace("s_next_", "s_", 1) for c in nxt]].to_numpy(np.float64)
            values = df[nxt].to_numpy(np.float64, copy=True)
            values[rows] = s[rows + 1]
            df[nxt] = values
    return df


def read_transitions(path: Path, columns: Sequence[str] | None, issues: list[str],
                     notes: list[str] | None = None) -> pd.DataFrame:
    """A recording's transitions log read whole; a torn last batch dropped and said.

    ``columns``: the columns the recording's config asks for (None: the schema's own). A
    block whose checksum fails is said in ``issues``, with the rows before it kept; blocks
    without one (a log written before checksums) in ``notes`` (None: ``issues``).

    Raises
    ------
    RecordingError
        The file is larger than half the memory available, or holds bytes that are not a
        transitions log (named by offset), or a batch that does not decode.
    """
    import psutil

    where = str(path)
    size = path.stat().st_size
    free = psutil.virtual_memory().available
    if size > free // 4:  # decompressed, a log takes about twice its size, and a table more
        raise RecordingError(f"{where}: {size / 2**30:.1f} GiB, more than a quarter of the "
                             f"memory available ({free / 2**30:.1f} GiB): too large to read")
    frames = Frames(where)
    chunks = []
    with open(path, "rb") as f:  # a chunk at a time: garbage is refused where it starts
        while frames.broken is None and (chunk := f.read(_CHUNK)):
            chunks.append(frames.feed(chunk))
            if frames.rows * max(len(columns or ()), 64) * 8 > free // 2:
                raise RecordingError(f"{where}: claims {frames.rows:,} rows, more than the "
                                     "memory available holds")
    if not frames.schema_bytes:
        raise RecordingError(f"{where}: empty (not even its schema)")
    if frames.broken is not None and not frames.rows:
        # Nothing whole before the damage: refused, naming it (a log of zeros after its schema).
        raise RecordingError(f"{where}: {frames.broken.split(': the ', 1)[0]}")
    if frames.broken is not None:
        issues.append(frames.broken)
    elif frames.partial:
        issues.append(f"dropped a partly written last batch ({len(frames.partial):,} bytes "
                      f"from byte {frames.offset:,})")
    if frames.unverified:
        (issues if notes is None else notes).append(
            f"{frames.unverified:,} of its {frames.blocks:,} blocks carry no checksum "
            "(written before checksums): they cannot be verified")
    messages = b"".join(chunks)
    del chunks
    return decode_rows(frames, messages, columns)
