"""Arrays in POSIX shared memory registered with the server as host regions
(:meth:`tally.Client.share`): aggregated there, read by the client through a
read-only numpy view, and located in their region for GroupBy's columns."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

import numpy as np

from ._arrays import byte_view, prepare
from ._ops import OpLike
from ._results import Results
from .partial import Partial
from .v1 import tally_pb2 as pb

if TYPE_CHECKING:
    from .client import Client


class _Mapping:
    """The shared-memory object's mapping as the base object of every numpy
    view of it (numpy keeps it alive through ``__array_interface__``), so
    that it is unmapped with the last of them: a view held past
    :meth:`SharedArray.close` (by the caller, or by a traceback's frames)
    neither dangles nor makes the close fail with BufferError, as
    SharedMemory.close does while its buffer is exported."""

    def __init__(self, memory: Any, nbytes: int) -> None:
        self._memory = memory
        self._bytes = np.frombuffer(memory.buf, dtype=np.uint8, count=nbytes)  # the one export of memory.buf

    @property
    def __array_interface__(self) -> dict:
        return {"version": 3, "shape": self._bytes.shape, "typestr": "|u1", "data": (self._bytes.ctypes.data, True)}

    def __del__(self) -> None:
        self._bytes = None
        self._memory.close()


# Linux's MADV_POPULATE_WRITE (5.14 and later; Python 3.11's mmap does not
# name it): the object's pages made and mapped in one call rather than one
# fault each as the copy first touches them. A 32 MB copy into a new object
# took 100 ms with faults and 50 ms populated first on a 2-vCPU VM, where a
# copy into memory already touched takes 2.
_MADV_POPULATE_WRITE = 23


def _populate(memory: Any) -> None:
    try:
        memory._mmap.madvise(_MADV_POPULATE_WRITE)
    except (AttributeError, OSError, ValueError):
        pass  # an older kernel or another mmap: the copy faults the pages in


class _RegisteredMemory:
    """A new POSIX shared-memory object of ``nbytes`` bytes, filled by
    ``fill`` (given a writable uint8 view of it, valid during the call) and
    registered with the server as a host region named as the object:
    SharedArray's and PackedColumns' common part. :meth:`close`
    unregisters it and removes the object."""

    def __init__(self, client: "Client", nbytes: int, fill: Any, timeout: Optional[float]) -> None:
        from multiprocessing import shared_memory

        self._client = client
        self._memory = shared_memory.SharedMemory(create=True, size=max(nbytes, 1))
        self._mapping: Optional[_Mapping] = _Mapping(self._memory, nbytes)
        try:
            _populate(self._memory)
            # No view of the memory outlives the fill in this frame (a
            # failed registration's traceback would hold one, and the
            # memory could not be closed while it did).
            fill(self._mapping._bytes)
            self.region = self._memory.name
            self.info = client.register_host_region(self.region, "/" + self._memory.name, nbytes, timeout=timeout)
        except BaseException:
            self._release()
            raise

    def close(self) -> None:
        """Unregisters the region and removes the object (its memory is
        unmapped now, or with the last view of it still held)."""
        if self._mapping is None:
            return
        try:
            self._client.unregister_region(self.region)
        finally:
            self._release()

    def _release(self) -> None:
        self._mapping = None
        self._memory.unlink()


class SharedArray(_RegisteredMemory):
    """An array in a POSIX shared-memory object registered with the server as
    a host region (:meth:`Client.share`): :meth:`aggregate` sends only the
    request, and :meth:`Client.groupby` takes it as a column, which the
    server reads in place. Unregistered and removed by :meth:`close` (or at
    the end of a ``with`` block).

    ``region``: the region's name (also the object's); ``dtype``,
    ``length`` (elements) and ``row_length`` (0: 1-D; else a 2-D array's
    row length) describe the array as it lies there, little-endian, in C
    order, from byte 0; :attr:`values` reads it."""

    def __init__(self, client: "Client", array: Any, timeout: Optional[float]) -> None:
        a, self.row_length = prepare(array)
        self.dtype, self.length = a.dtype, a.size
        self._shape = a.shape

        def fill(memory: np.ndarray) -> None:
            memory[:] = byte_view(a)

        super().__init__(client, a.nbytes, fill, timeout)

    @property
    def values(self) -> np.ndarray:
        """The array as it lies in the shared memory (the bytes the server
        reads), of its shape: not copied, read-only. A view stays readable
        after :meth:`close`, the memory being unmapped with the last view;
        ValueError once the SharedArray is closed."""
        if self._mapping is None:
            raise ValueError(f"SharedArray {self.region!r} is closed")
        return np.asarray(self._mapping).view(self.dtype).reshape(self._shape)

    def region_column(self, a: np.ndarray) -> Optional["pb.RegionColumn"]:
        """Where the elements of ``a`` lie in the region (GroupBy's
        Column.region), if ``a`` is a view of :attr:`values` that holds
        them exactly as they would be sent: C-contiguous, little-endian,
        aligned to its element size. None for any other array (a copy, a
        strided view, a closed SharedArray)."""
        if self._mapping is None or not isinstance(a, np.ndarray) or not a.flags.c_contiguous \
                or a.dtype.byteorder == ">" or a.dtype.itemsize == 0:
            return None
        base = self._mapping._bytes
        offset = a.ctypes.data - base.ctypes.data
        if offset < 0 or offset + a.nbytes > base.nbytes or offset % a.dtype.itemsize:
            return None
        return pb.RegionColumn(name=self.region, offset=offset, length=a.size)

    def aggregate(self, ops: Union[OpLike, Iterable[OpLike]], *, timeout: Optional[float] = None) -> Results:
        """The array's aggregations, as :meth:`Client.aggregate` gives them."""
        return self._client.aggregate_region(self.region, ops, dtype=self.dtype, length=self.length,
                                             row_length=self.row_length, timeout=timeout)

    def partial(self, ops: Union[OpLike, Iterable[OpLike]], *, base_index: int = 0,
                timeout: Optional[float] = None) -> list[Partial]:
        """The array's partial states, as :meth:`Client.partial` gives them."""
        return self._client.partial_region(self.region, ops, dtype=self.dtype, length=self.length,
                                           row_length=self.row_length, base_index=base_index, timeout=timeout)

    def __enter__(self) -> "SharedArray":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PackedColumns(_RegisteredMemory):
    """Columns copied into one new shared-memory object, registered with the
    server as one host region for the length of one call, so that GroupBy
    reads them in place instead of from the message: the columns go as
    region columns (Column.region). An inline frame's trip (the request's
    serialisation here, gRPC's send, the server's parse, each a copy of
    every column) was 90% of a 1M-row group-by against a local cpu server;
    this costs one copy and two small calls. Each column starts on a
    64-byte boundary. :meth:`close` unregisters the region and removes the
    object."""

    _ALIGN = 64

    def __init__(self, client: "Client", arrays: list[np.ndarray], timeout: Optional[float]) -> None:
        self._at: dict[int, tuple[int, int]] = {}  # id(array) -> (byte offset, elements)
        prepared, end = [], 0
        for x in arrays:
            a, _ = prepare(x)
            prepared.append((a, end))
            self._at[id(x)] = (end, a.size)
            end += -(-a.nbytes // self._ALIGN) * self._ALIGN

        def fill(memory: np.ndarray) -> None:
            for a, at in prepared:
                memory[at:at + a.nbytes] = byte_view(a)

        super().__init__(client, end, fill, timeout)
        self._arrays = arrays  # kept alive: the ids above name them

    def region_column(self, x: np.ndarray) -> Optional["pb.RegionColumn"]:
        """Where the copy of ``x`` (one of the arrays given) lies; None for
        any other array."""
        at = self._at.get(id(x))
        return None if at is None else pb.RegionColumn(name=self.region, offset=at[0], length=at[1])
