"""numpy arrays as tally sends them: the dtypes it aggregates, and the
little-endian C-order bytes of 1-D and 2-D arrays."""
from __future__ import annotations

from typing import Any

import numpy as np

from .v1 import tally_pb2 as pb

# The dtypes tally aggregates, with their wire names.
SUPPORTED = {
    np.dtype(np.float32): pb.DTYPE_FLOAT32,
    np.dtype(np.float64): pb.DTYPE_FLOAT64,
    np.dtype(np.int32): pb.DTYPE_INT32,
    np.dtype(np.int64): pb.DTYPE_INT64,
    np.dtype(np.uint32): pb.DTYPE_UINT32,
    np.dtype(np.uint8): pb.DTYPE_UINT8,
    np.dtype(np.int8): pb.DTYPE_INT8,
    np.dtype(np.int16): pb.DTYPE_INT16,
    np.dtype(np.uint16): pb.DTYPE_UINT16,
    np.dtype(np.uint64): pb.DTYPE_UINT64,
    np.dtype(np.bool_): pb.DTYPE_BOOL,
    np.dtype(np.float16): pb.DTYPE_FLOAT16,
}
try:  # numpy has no bfloat16; ml_dtypes' is the one tally follows.
    import ml_dtypes

    SUPPORTED[np.dtype(ml_dtypes.bfloat16)] = pb.DTYPE_BFLOAT16
except ImportError:
    pass
SUPPORTED_NAMES = ", ".join(d.name for d in SUPPORTED)
FROM_WIRE = {v: k for k, v in SUPPORTED.items()}


def check_dtype(dtype: Any) -> np.dtype:
    """The native-order dtype for ``dtype``; TypeError when tally does not
    aggregate it (complex, object, datetime, strings, ...)."""
    dt = np.dtype(dtype)
    native = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    if native not in SUPPORTED:
        raise TypeError(f"tally cannot aggregate dtype {dt} ({dt.str}); supported: {SUPPORTED_NAMES}")
    return native


def is_float(dtype: np.dtype) -> bool:
    """Whether tally treats ``dtype`` as floating point (ml_dtypes' bfloat16
    is a float whose numpy kind is not "f")."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def wire_dtype(dtype: np.dtype) -> int:
    return SUPPORTED[check_dtype(dtype)]


def refuse_pandas(array: Any) -> None:
    """TypeError for the pandas objects numpy would turn into something
    else than their user means: a DataFrame (numpy's rows are pandas'
    records, not its columns) and extension dtypes (nullable, category,
    datetime with a time zone: numpy makes them objects)."""
    if not type(array).__module__.startswith("pandas"):
        return
    if getattr(array, "ndim", 1) == 2:
        raise TypeError("a pandas DataFrame is aggregated per column, not per row: use Client.agg(df, func) "
                        "for pandas' answers, or aggregate one column at a time")
    dtype = getattr(array, "dtype", None)
    if dtype is not None and not isinstance(dtype, np.dtype):
        raise TypeError(f"tally cannot aggregate pandas dtype {dtype} as a numpy array: use Client.agg(series, "
                        f"func), which takes nullable, category and datetime columns, or convert it with "
                        f".to_numpy(dtype=..., na_value=...)")


def prepare(array: Any) -> tuple[np.ndarray, int]:
    """The array as tally sends it, and its row length (0: not segmented).

    1-D arrays are aggregated whole, 2-D arrays row by row. An array that is
    not C-contiguous or not little-endian is copied into one that is; a
    contiguous little-endian array is sent as it lies, without a copy.
    """
    refuse_pandas(array)
    a = np.asarray(array)
    dtype = check_dtype(a.dtype)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim > 2:
        raise ValueError(f"tally aggregates 1-D arrays (whole) and 2-D arrays (by row), not {a.ndim}-D")
    if a.ndim == 2 and a.shape[1] == 0 and a.shape[0] > 0:
        raise ValueError("a 2-D array with rows of no elements has nothing to aggregate per row")
    little = dtype.newbyteorder("<")
    if a.dtype != little or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=little)
    return a, (a.shape[1] if a.ndim == 2 else 0)


def prepare_offsets(offsets: Any, ndim: int = 1) -> bytes:
    """Variable-length segments' offsets as the wire takes them: int64
    little-endian. ``offsets`` is a 1-D sequence of integers (numpy's
    ``add.reduceat`` indices with the length appended, Arrow's list
    offsets): segment s is ``a[offsets[s]:offsets[s + 1]]`` of the
    ``ndim``-dimensional array ``a`` they cut (1-D only). Whether they
    start at 0, never decrease and end at the length the server checks,
    naming the entry at fault."""
    o = np.asarray(offsets)
    if ndim != 1:
        raise ValueError(f"offsets cut a 1-D array into segments, not a {ndim}-D one")
    if o.ndim != 1 or o.size == 0:
        raise ValueError("offsets must be a 1-D sequence of at least one integer (segments + 1 entries)")
    if o.dtype.kind not in "iu":
        raise TypeError(f"offsets must be integers, not {o.dtype}")
    if o.dtype.kind == "u" and o.size and int(o.max()) > np.iinfo(np.int64).max:
        raise ValueError("offsets must fit in int64")
    return np.ascontiguousarray(o, dtype="<i8").tobytes()


def split_masked(array: Any, valid: Any) -> tuple[Any, Any]:
    """The data and the validity of ``array``: a numpy.ma.MaskedArray's
    mask, inverted, is its validity (True = valid); ``valid`` given as well
    is refused, since the two could disagree."""
    if isinstance(array, np.ma.MaskedArray):
        if valid is not None:
            raise ValueError("give a masked array or valid=, not both")
        mask = np.ma.getmaskarray(array)
        return np.ma.getdata(array), ~mask
    return array, valid


def prepare_validity(valid: Any, shape: tuple[int, ...]) -> bytes:
    """A validity mask as the wire takes it: Arrow's bitmap, bit i % 8 of
    byte i / 8 (least significant first) for element i of the array in C
    order, 1 = valid. ``valid`` is array-like of bools (nonzero numbers
    count as True) of the array's ``shape``."""
    v = np.asarray(valid)
    if v.shape != tuple(shape) and not (v.ndim == 0 and tuple(shape) == (1,)):
        raise ValueError(f"valid= has shape {v.shape}, but the array has shape {tuple(shape)}")
    if v.dtype.kind not in "biu":
        raise TypeError(f"valid= must hold bools, not {v.dtype}")
    return np.packbits(v.reshape(-1) != 0, bitorder="little").tobytes()


def byte_view(a: np.ndarray) -> memoryview:
    """The array's bytes, uncopied."""
    return memoryview(a.reshape(-1).view(np.uint8))


# The number fields of AggregationResult's `values` oneof, and their dtypes.
_RESULT_DTYPES = {"doubles": np.float64, "int64s": np.int64, "uint64s": np.uint64}


def from_repeated(values: Any, dtype: Any) -> np.ndarray:
    """A protobuf repeated scalar field as a numpy array. np.fromiter with
    the field's length: 1.8x np.array over the field (2M int64: 60 against
    106 ms with python3-protobuf's C++ implementation)."""
    return np.fromiter(values, dtype=dtype, count=len(values))


def values_of(message: Any, dtype: Any) -> np.ndarray:
    """A DoubleValues, Int64Values or UInt64Values message's numbers: its
    `data` bytes where the server sent them so (Aggregation.values_as_bytes:
    read as one array, 1M float64 in about a millisecond), else its repeated
    `values`."""
    if message.data:
        return np.frombuffer(message.data, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    return from_repeated(message.values, dtype)


def result_values(r: Any) -> np.ndarray:
    """An AggregationResult's numbers (its `values` oneof: float64, int64 or
    uint64); an empty float64 array when it holds none."""
    kind = r.WhichOneof("values")
    if kind not in _RESULT_DTYPES:
        return np.empty(0)
    return values_of(getattr(r, kind), _RESULT_DTYPES[kind])
