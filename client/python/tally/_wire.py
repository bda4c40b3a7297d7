"""The few steps of protobuf's wire format the package walks itself: a
message's fields found in its bytes, so that a large sub-message (a group-
by page's partial states) is handed on as the bytes it arrived in instead
of being serialized again (python3-protobuf took 31 ms to re-serialize a
page's states of 10,000 groups); and a stream's chunk message written
around its bytes in one copy (python3-protobuf copies them into the
message, then again into its serialization).
"""
from __future__ import annotations

from typing import Iterator, Optional


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise ValueError("protobuf bytes end inside a varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 70:
            raise ValueError("protobuf varint longer than 10 bytes")


def fields(data: memoryview) -> Iterator[tuple[int, Optional[memoryview]]]:
    """Each field of a message's bytes, in order: its number, and its bytes
    where it is length-delimited (None for a number)."""
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            _, at = _varint(data, at)
            yield number, None
        elif wire_type == 1:
            at += 8
            yield number, None
        elif wire_type == 2:
            n, at = _varint(data, at)
            if at + n > len(data):
                raise ValueError("protobuf field past the end of its message")
            yield number, data[at:at + n]
            at += n
        elif wire_type == 5:
            at += 4
            yield number, None
        else:
            raise ValueError(f"protobuf wire type {wire_type}")


def nth_field(data: memoryview, number: int, n: int) -> Optional[memoryview]:
    """The bytes of the n-th (from 0) occurrence of length-delimited field
    ``number``; None where there are fewer."""
    seen = 0
    for got, value in fields(data):
        if got == number and value is not None:
            if seen == n:
                return value
            seen += 1
    return None


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def chunk_message(data: memoryview, bytes_field: int, numbers: tuple[tuple[int, int], ...] = ()) -> bytes:
    """A serialized message of number fields ``numbers`` ((field, value)
    pairs, varints; zeros left out, as protobuf leaves them) and bytes field
    ``bytes_field`` holding ``data``: the bytes copied once."""
    head = b"".join(_varint_bytes(field << 3) + _varint_bytes(value) for field, value in numbers if value)
    return b"".join((head, _varint_bytes(bytes_field << 3 | 2), _varint_bytes(len(data)), data))
