#!/usr/bin/env python3
"""Writes the seed corpora in corpus/<harness>/: a few valid and a few
malformed inputs each, small, so that the fuzzers start from the shapes real
requests and files have. The fuzzers' own discoveries are not committed.
Usage: tests/fuzz/make_seeds.py   (rewrites the seed_* files)"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v, pad=0):
    out = bytearray()
    while v >= 0x80 or pad > 0:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
        if v == 0 and pad > 0:
            out += b"\x80" * (pad - 1)
            break
    out.append(v)
    return bytes(out)


def tag(field, wire_type, pad=0):
    return varint(field << 3 | wire_type, pad)


def ld(field, payload):
    return tag(field, 2) + varint(len(payload)) + payload


def vint(field, v):
    return tag(field, 0) + varint(v)


def f64(field, v):
    return tag(field, 1) + struct.pack("<d", v)


def spec(dtype, length=None, row_length=0):
    s = vint(1, dtype)
    if length is not None:
        s += vint(2, length)
    if row_length:
        s += vint(3, row_length)
    return s


def agg(op, ddof=None, hist=None):
    a = vint(1, op)
    if ddof is not None:
        a += f64(2, ddof)
    if hist:
        bins, lo, hi = hist
        a += ld(3, vint(1, bins) + f64(2, lo) + f64(3, hi))
    return a


FLOAT32, FLOAT64, INT32, INT64, UINT32, UINT8 = 1, 2, 3, 4, 5, 6
SUM, MIN, MAX, MEAN, COUNT, SUMSQ, VAR, STD, ARGMIN, ARGMAX, HIST = range(1, 12)
NANSUM, NANMEAN, NANMIN, NANMAX, NANARGMIN, NANARGMAX, NANVAR, NANSTD, NANCOUNT = range(12, 21)
PROD, COUNT_NONZERO, ANY, ALL, PTP = range(21, 26)

data16 = struct.pack("<4f", 1.5, -2.0, 3.25, float("nan"))


def unary():
    a = ld(3, agg(SUM)) + ld(3, agg(MEAN)) + ld(3, agg(HIST, hist=(10, -1.0, 1.0)))
    return {
        "sum_mean_hist": ld(1, spec(FLOAT32)) + ld(2, data16) + a,
        "rows_var": ld(1, spec(FLOAT32, 4, 2)) + ld(2, data16) + ld(3, agg(VAR, ddof=1.0)) + ld(3, agg(ARGMAX)),
        "data_twice_unknown": ld(2, b"abcd") + ld(1, spec(UINT8)) + vint(9, 7) + ld(2, b"xy") + ld(3, agg(COUNT)),
        "padded_varints": tag(1, 2, pad=3) + varint(2, pad=2) + vint(1, INT64) + tag(2, 2, pad=4) + varint(8) +
        bytes(8) + ld(3, agg(MIN)),
        "empty": b"",
        "truncated": ld(1, spec(FLOAT64)) + tag(2, 2) + varint(100) + b"short",
        "group": tag(5, 3) + vint(1, 1) + tag(5, 4) + ld(3, agg(SUM)),
        "hist_too_wide": ld(1, spec(FLOAT64)) + ld(2, bytes(8)) + ld(3, agg(HIST, hist=(4, -1e308, 1e308))),
        "nan_ops_rows": ld(1, spec(FLOAT32, 4, 2)) + ld(2, data16) + ld(3, agg(NANSUM)) +
        ld(3, agg(NANVAR, ddof=1.0)) + ld(3, agg(NANARGMAX)) + ld(3, agg(NANCOUNT)),
        "prod_logical_ptp": ld(1, spec(FLOAT32)) + ld(2, data16) + ld(3, agg(PROD)) + ld(3, agg(COUNT_NONZERO)) +
        ld(3, agg(ANY)) + ld(3, agg(ALL)) + ld(3, agg(PTP)),
    }


def stream():
    header = ld(1, spec(FLOAT32, 4) + ld(2, agg(SUM)) + ld(2, agg(STD, ddof=0.5)))
    return {
        "header": header,
        "header_rows_hist": ld(1, spec(INT32, 6, 3) + ld(2, agg(HIST, hist=(4, 0.0, 8.0)))),
        "chunk": ld(2, data16),
        "header_then_chunk": header + ld(2, b"\x00\x01"),
        "chunk_then_header": ld(2, b"\x00\x01") + header,
        "unknown_fields": vint(3, 1) + tag(4, 5) + b"\x01\x02\x03\x04" + ld(2, b"z"),
        "bad_header": ld(1, b"\x0a\x05"),
    }


def plan():
    # Byte streams for plan_fuzzer.cc's ByteReader: dtype, length, row
    # length, data size, then aggregations.
    return {
        "float32_sum": bytes([0, 1, 1, 8, 0, 1, 32, 1, 0, 1, 0, 0]),
        "rows_hist": bytes([0, 3, 1, 12, 4, 0, 2, 0, 11, 0, 1, 10, 0, 0, 0, 4]),
        "stream_var": bytes([0, 2, 1, 100, 0, 0, 3, 0, 7, 1, 0, 2, 0, 0, 8, 0, 0, 9, 0]),
        "huge_length": bytes([0, 4, 1, 0xFF]) + b"\xff" * 8 + bytes([0, 0, 1, 0, 1, 0]),
        # A histogram whose edges are finite but whose width is not.
        "hist_too_wide": bytes([0, 1, 1, 5, 0, 0, 1, 0, 11, 0, 1, 10, 0xFF]) + struct.pack("<d", -1e308) +
        bytes([0xFF]) + struct.pack("<d", 1e308) + bytes([0]),
    }


def npy_file(major, header, data):
    prefix = 8 + (2 if major == 1 else 4)
    h = header.encode()
    total = (prefix + len(h) + 1 + 63) // 64 * 64
    h += b" " * (total - prefix - len(h) - 1) + b"\n"
    n = struct.pack("<H" if major == 1 else "<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + n + h + data


def npy():
    return {
        "v1_f4_1d": npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", data16),
        "v2_f8_2d": npy_file(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1), }", bytes(16)),
        "v3_u1_empty": npy_file(3, "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 0), }", b""),
        "v1_i8_long": npy_file(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1L,), }", bytes(8)),
        "fortran": npy_file(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (1, 1), }", bytes(4)),
        "big_endian": npy_file(1, "{'descr': '>u4', 'fortran_order': False, 'shape': (1,), }", bytes(4)),
        "truncated": npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (9,), }", data16),
        # 2^61 elements fit in 64 bits; their 2^64 bytes do not.
        "bytes_overflow": npy_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
                                   b""),
    }


def write(harness, seeds, cut_byte=False):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    for name, body in seeds.items():
        if cut_byte:  # the first byte says how the message is cut into slices
            for how in (0, 1, 2, 3):
                with open(os.path.join(d, f"seed_{name}_cut{how}"), "wb") as f:
                    f.write(bytes([how]) + body)
        else:
            with open(os.path.join(d, f"seed_{name}"), "wb") as f:
                f.write(body)


write("raw_aggregate_request", unary(), cut_byte=True)
write("raw_stream_request", stream(), cut_byte=True)
write("plan", plan())
write("npy_header", npy())
