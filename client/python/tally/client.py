"""The tally client: numpy arrays in, numpy answers out, over
tally.v1.Aggregator."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import grpc
import numpy as np

from . import _values, _wire
from ._arrays import (FROM_WIRE, byte_view, check_dtype, prepare, prepare_offsets, prepare_validity,
                      refuse_pandas, result_values, split_masked, values_of, wire_dtype)
from ._groupby import GroupByFunctions
from ._numpy import NumpyFunctions
from ._pandas import PandasFunctions
from ._ops import TOPK_OPS, Op, OpLike, parse_ops, spelled_ops
from ._results import Results
from ._shared import SharedArray, PackedColumns
from .partial import Partial
from .v1 import tally_pb2 as pb
from .v1 import tally_pb2_grpc as pb_grpc

MiB = 1 << 20
Progress = Callable[[int, int], None]


class Error(Exception):
    """A call that failed: the gRPC status ``code`` (a grpc.StatusCode) and
    the server's ``message``, e.g. INVALID_ARGUMENT naming the field and
    the limit, DEADLINE_EXCEEDED, UNAVAILABLE."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple:
        # Picklable with its code, so it crosses process boundaries intact
        # (a Dask task's error reaches the client as this same Error).
        return (Error, (self.code, self.message))


@dataclass(frozen=True)
class DatasetInfo:
    """A resident dataset, as DescribeDataset reports it."""
    name: str
    dtype: np.dtype
    length: int
    bytes: int
    place: str         # "cuda:0"; sharded: each shard's place, comma-separated
    version: int
    created_unix_seconds: float
    expires_unix_seconds: float
    queries: int
    shards: int = 1
    row_length: int = 0  # the rows it was uploaded in (a 2-D array's columns); 0: flat

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape as uploaded: ``(length,)``, or ``(rows, row_length)``."""
        return (self.length // self.row_length, self.row_length) if self.row_length else (self.length,)

    @classmethod
    def from_proto(cls, d: "pb.DatasetInfo") -> "DatasetInfo":
        return cls(d.name, FROM_WIRE.get(d.dtype, np.dtype(object)), d.length, d.bytes, d.place, d.version,
                   d.created_unix_seconds, d.expires_unix_seconds, d.queries, max(d.shards, 1), d.row_length)


@dataclass(frozen=True)
class RegionInfo:
    """A registered shared-memory region, as the server reports it."""
    name: str
    kind: str          # "host" or "cuda"
    shm_name: str
    offset: int
    byte_size: int
    device: int
    place: str         # "pinned host", "host", "cuda:0"
    queries: int

    @classmethod
    def from_proto(cls, r: "pb.RegionInfo") -> "RegionInfo":
        kind = {pb.RegionInfo.KIND_HOST: "host", pb.RegionInfo.KIND_CUDA: "cuda"}.get(r.kind, "unknown")
        return cls(r.name, kind, r.shm_name, r.offset, r.byte_size, r.device, r.place, r.queries)


def _read(value: Union[None, str, bytes, os.PathLike]) -> Optional[bytes]:
    """PEM bytes, or the contents of the file a path names."""
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


def _is_local_target(target: str) -> bool:
    """Whether a gRPC target names this host: a unix socket, localhost, or
    a loopback address (127.0.0.0/8, ::1), with or without a scheme."""
    t = target.strip()
    if t.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if t.startswith(scheme):
            t = t[len(scheme):]
            break
    if t.startswith("["):
        host = t[1:t.find("]")] if "]" in t else t[1:]
    else:
        host = t.rsplit(":", 1)[0] if t.count(":") == 1 else t
    host = host.lower()
    return host in ("localhost", "::1", "0:0:0:0:0:0:0:1") or host.startswith("127.")


class Client(NumpyFunctions, PandasFunctions, GroupByFunctions):
    """A connection to a tally server.

    ``target`` is ``"host:port"`` (any gRPC target, e.g. ``dns:///tally:50051``
    with ``load_balancing="round_robin"`` to spread calls over every
    replica a name resolves to). ``timeout`` is every call's default
    deadline in seconds (None: no deadline); each call may set its own.

    Security (the server side of these is optional and may not be enabled
    on a given server): ``tls=True`` or any of ``ca``, ``cert``, ``key``
    makes a TLS channel with grpc.ssl_channel_credentials (``ca``: PEM root
    certificates; ``cert`` and ``key``: a client certificate chain and its
    private key for mutual TLS; each as bytes or a file path). ``token``
    is sent on every call as ``authorization: Bearer <token>`` metadata.

    Arrays larger than ``stream_threshold`` bytes are sent with
    AggregateStream in chunks of ``chunk_bytes``; smaller ones in one
    Aggregate message. Thread-safe: calls may run from many threads.

    ``shared_memory`` says how :meth:`groupby` sends a table whose columns
    come to at least ``stream_threshold`` bytes: None (the default) copies
    them into one POSIX shared-memory object that the server reads in place
    (registered as a host region for the call, then removed) when the
    target is on this host (``localhost``, a loopback address or a unix
    socket) and the server can open it, else inline in the request, as
    always for smaller tables; after a server could not open one, this
    client sends inline. True: through shared memory whatever the target,
    raising the server's error when it cannot; False: always inline. The
    answers are the same either way; a 1M-row table against a local server
    takes a tenth of the time.

    numpy's reductions are methods with numpy's signatures and answers
    (``c.sum(x, axis=0)``, ``c.std(x, ddof=1)``, ``c.histogram(x, 64)``:
    :class:`tally._numpy.NumpyFunctions`), one call each; :meth:`aggregate`
    answers many ops in one pass over the data.
    """

    def __init__(self, target: str, *, timeout: Optional[float] = None, tls: bool = False,
                 ca: Union[None, str, bytes, os.PathLike] = None, cert: Union[None, str, bytes, os.PathLike] = None,
                 key: Union[None, str, bytes, os.PathLike] = None, token: Optional[str] = None,
                 load_balancing: Optional[str] = None, stream_threshold: int = 4 * MiB,
                 chunk_bytes: int = 4 * MiB, options: Sequence[tuple[str, Any]] = (),
                 shared_memory: Optional[bool] = None) -> None:
        if (cert is None) != (key is None):
            raise ValueError("cert and key go together (a client certificate and its private key)")
        if chunk_bytes <= 0 or stream_threshold < 0:
            raise ValueError("chunk_bytes must be > 0 and stream_threshold >= 0")
        self.target = target
        self.timeout = timeout
        self.stream_threshold = stream_threshold
        self.shared_memory = shared_memory
        # None: not known yet whether the server can open this host's
        # shared-memory objects (shared_memory=None tries the first time).
        self._server_reads_shm: Optional[bool] = None if _is_local_target(target) else False
        self.chunk_bytes = chunk_bytes
        channel_options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        if load_balancing:
            channel_options.append(("grpc.lb_policy_name", load_balancing))
        channel_options.extend(options)
        self.credentials = self._channel_credentials(tls, ca, cert, key)
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        if self.credentials is not None:
            self._channel = grpc.secure_channel(target, self.credentials, options=channel_options)
        else:
            self._channel = grpc.insecure_channel(target, options=channel_options)
        self._stub = pb_grpc.AggregatorStub(self._channel)
        self._regions = pb_grpc.SharedMemoryStub(self._channel)

    @staticmethod
    def _channel_credentials(tls: bool, ca: Any, cert: Any, key: Any) -> Optional[grpc.ChannelCredentials]:
        if not (tls or ca is not None or cert is not None):
            return None
        return grpc.ssl_channel_credentials(root_certificates=_read(ca), private_key=_read(key),
                                            certificate_chain=_read(cert))

    def _pack_columns(self, arrays: list[np.ndarray], timeout: Optional[float]) -> Optional[PackedColumns]:
        """The arrays copied into one shared region for a call, or None
        where they go inline (``shared_memory`` above)."""
        if not arrays or self.shared_memory is False:
            return None
        if self.shared_memory is None and self._server_reads_shm is False:
            return None
        if sum(np.asarray(a).nbytes for a in arrays) < max(self.stream_threshold, 1):  # as sent: the same sizes
            return None
        try:
            packed = PackedColumns(self, arrays, timeout)
        except Error as e:
            if self.shared_memory:
                raise
            # The server cannot open it (another host or container, another
            # user, regions refused): inline from now on. Anything else (a
            # quota, a deadline) is this call's: inline this once.
            if e.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED,
                          grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT,
                          grpc.StatusCode.UNIMPLEMENTED):
                self._server_reads_shm = False
            return None
        except OSError:
            if self.shared_memory:
                raise
            self._server_reads_shm = False  # no shared memory on this host
            return None
        self._server_reads_shm = True
        return packed

    # -- Aggregation ---------------------------------------------------------

    def aggregate(self, array: Any, ops: Union[OpLike, Iterable[OpLike]], *, offsets: Any = None,
                  valid: Any = None, timeout: Optional[float] = None,
                  progress: Optional[Progress] = None) -> Results:
        """Aggregates ``array`` on the server and returns numpy's answers.

        ``array``: anything numpy.asarray takes, of dtype float16, float32,
        float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64 or
        bool, or ml_dtypes' bfloat16 where ml_dtypes is installed
        (:data:`tally.SUPPORTED_DTYPES`; TypeError for any other, naming it).
        1-D arrays are aggregated whole; a 2-D array row by row (numpy's
        axis=1), every answer then being an array with one entry per row. A
        C-contiguous little-endian array is sent as it lies; any other (a
        slice with strides, a transpose, big-endian data) is first copied
        into one that is.

        ``offsets``: cut a 1-D array into variable-length segments instead
        (segments + 1 integers, 0 first, the length last: segment s is
        ``array[offsets[s]:offsets[s + 1]]``); every answer then has one
        entry per segment, numpy's answer for that slice. An empty segment
        gives the empty array's answer (sum 0, mean NaN); min, max, minmax,
        argmin, argmax, ptp, quantile and their nan forms (not nanquantile)
        are refused for one, as numpy raises.

        ``valid``: which elements take part, array-like of bools of the
        array's shape (pandas: ``series.notna()``); a numpy.ma.MaskedArray
        brings its own (its mask inverted). Every op then answers as numpy
        does on ``array[valid]`` (row by row, segment by segment), except
        that argmin and argmax still count every element, as numpy.ma's do.
        A row with no valid elements gives the empty array's answer (sum 0,
        mean NaN); min, max, minmax, argmin, argmax, ptp and their nan forms
        are refused for one. The mask travels as a bitmap, one bit per
        element.

        ``ops``: strings as the CLI's ``--ops`` (``"sum"``, ``"std:1"``,
        ``"hist:256:-1:1"``, or several comma-separated), :class:`Op`
        objects, or a list of both. ValueError for a bad one. ``minmax``
        answers a ``(min, max)`` tuple (rows: an array of shape (rows, 2)).

        The functions with states of their own (tally.proto, OP_QUANTILE
        to OP_COUNT_DISTINCT) answer numpy's values:
        ``"quantile:0.5,0.99:hazen"`` (numpy.quantile, any of its 13
        methods; ``nanquantile`` likewise) one value per q, an array of
        len(q) (rows: shape (rows, len(q))), or a scalar (rows: one per
        row) for a scalar q (``"quantile:0.5"``, ``Op("quantile", q=0.5)``);
        ``median`` and ``nanmedian`` one value; ``"topk:K"`` and
        ``"bottomk:K"`` a ``(values, indices)`` pair of arrays, sorted
        (largest or smallest first, NaN first in topk and last in bottomk,
        ties to the smaller index), min(k, elements) long (rows: a list of
        pairs); ``"hll:PRECISION"`` and ``count_distinct`` a count;
        ``"ddsketch:ACCURACY[:Q,...]"`` quantiles within ACCURACY relative
        error of numpy's method="lower" over the non-NaN elements.
        quantile of no elements is refused (:class:`Error`,
        INVALID_ARGUMENT), as numpy raises; nanquantile, median and
        nanmedian of none answer NaN (on integer dtypes nanquantile is
        quantile, and refused). bool arrays are refused by quantile.

        Answers have the dtypes numpy's reductions return (see
        :func:`tally._values.value_dtype`); histograms are
        :class:`Histogram`, ``counts, edges = h`` as numpy.histogram.
        Arrays above ``stream_threshold`` bytes are streamed; ``progress``,
        if given, is called with (bytes sent, total bytes) as they go.
        Raises :class:`Error` for a failed call."""
        spelled = spelled_ops(ops)
        array, valid = split_masked(array, valid)
        a, row_length = prepare(array)
        cuts = None if offsets is None else prepare_offsets(offsets, a.ndim)
        bits = None if valid is None else prepare_validity(valid, a.shape)
        response = self._send(a, row_length, [self._wire_op(o) for _, o in spelled], timeout, progress, cuts, bits)
        return self._results(spelled, a.dtype, row_length != 0 or cuts is not None, response)

    def partial(self, array: Any, ops: Union[OpLike, Iterable[OpLike]], *, base_index: int = 0,
                offsets: Any = None, valid: Any = None, timeout: Optional[float] = None,
                progress: Optional[Progress] = None) -> list[Partial]:
        """The partial states of ``ops`` over ``array`` (one :class:`Partial`
        per op), to be merged with other parts' states and finished on the
        client (:func:`tally.merge`, :func:`tally.finish`). argmin/argmax
        and topk/bottomk indices in them are offset by ``base_index``: the
        position of this part's first element in the whole array (of each
        row's first element in the whole row, for a 2-D part). The states of
        quantile ... count_distinct are tally's own bytes, merged and
        finished by the package's native module (:mod:`tally.partial`).
        Arrays, ``offsets``, ``valid`` and ops as :meth:`aggregate`."""
        parsed = parse_ops(ops)
        array, valid = split_masked(array, valid)
        a, row_length = prepare(array)
        cuts = None if offsets is None else prepare_offsets(offsets, a.ndim)
        bits = None if valid is None else prepare_validity(valid, a.shape)
        wire = [self._wire_op(o, base_index) for o in parsed]
        response = self._send(a, row_length, wire, timeout, progress, cuts, bits)
        return [Partial.from_proto(o, r, row_length != 0 or cuts is not None) for o, r in zip(parsed, response.results)]

    # -- Resident datasets ---------------------------------------------------

    def put_dataset(self, name: str, array: Any, *, replace: bool = False, ttl: Optional[float] = None,
                    timeout: Optional[float] = None, progress: Optional[Progress] = None) -> DatasetInfo:
        """Uploads the 1-D or 2-D ``array`` as the resident dataset ``name``.
        ``replace`` replaces one of the same name atomically; ``ttl``
        removes it that many seconds after the upload.

        A 2-D array keeps its shape: the server records its row length,
        and :meth:`aggregate_dataset` then answers per row (numpy's
        ``axis=1``) unless it is given a ``row_length`` of its own
        (``row_length=0`` for one answer over every element). Larger
        arrays are refused (ValueError): reshape them to 2-D first."""
        refuse_pandas(array)
        a, row_length = prepare(array)
        header = pb.PutDatasetRequest(header=pb.PutDatasetRequest.Header(
            name=name, spec=pb.ArraySpec(dtype=wire_dtype(a.dtype), length=a.size, row_length=row_length),
            replace=replace, ttl_seconds=ttl or 0.0))

        def messages() -> Iterator[bytes]:
            yield header.SerializeToString()
            yield from self._chunks(a, pb.PutDatasetRequest.CHUNK_FIELD_NUMBER, progress)

        response = self._call(self._raw_method("stream_unary", "PutDataset", pb.PutDatasetResponse), messages(), timeout)
        return DatasetInfo.from_proto(response.dataset)

    def aggregate_dataset(self, name: str, ops: Union[OpLike, Iterable[OpLike]], *,
                          range: Optional[tuple[int, int]] = None, row_length: Optional[int] = None,
                          offsets: Any = None, valid: Any = None, timeout: Optional[float] = None) -> Results:
        """Aggregates the dataset ``name`` (elements ``range = (begin, end)``
        of it when given) as :meth:`aggregate` would the same elements,
        cut into rows of ``row_length`` when it is not 0, or into the
        segments of ``offsets`` (counted from the range's start), over the
        elements ``valid`` (1-D, one entry per element of the range) marks
        True. Without ``row_length`` or ``offsets``, a dataset uploaded from
        a 2-D array answers per row (numpy's ``axis=1``; a range must then
        hold whole rows), a flat one once. Asks DescribeDataset for the
        dataset's dtype and row length too: the answers follow them."""
        spelled = spelled_ops(ops)
        request = self._dataset_request(name, [self._wire_op(o) for _, o in spelled], range, row_length, offsets,
                                        valid)
        response = self._call(self._stub.AggregateDataset, request, timeout)
        info = self.describe_dataset(name, timeout=timeout)
        return self._results(spelled, info.dtype, self._per_row(info, row_length, offsets), response)

    def partial_dataset(self, name: str, ops: Union[OpLike, Iterable[OpLike]], *,
                        range: Optional[tuple[int, int]] = None, row_length: Optional[int] = None,
                        base_index: int = 0, offsets: Any = None, valid: Any = None,
                        timeout: Optional[float] = None) -> list[Partial]:
        """:meth:`partial` over a resident dataset (or a range of it), cut
        as :meth:`aggregate_dataset` cuts it."""
        parsed = parse_ops(ops)
        wire = [self._wire_op(o, base_index) for o in parsed]
        response = self._call(self._stub.AggregateDataset,
                              self._dataset_request(name, wire, range, row_length, offsets, valid), timeout)
        info = self.describe_dataset(name, timeout=timeout) if row_length is None and offsets is None else None
        per_row = self._per_row(info, row_length, offsets)
        return [Partial.from_proto(o, r, per_row) for o, r in zip(parsed, response.results)]

    def list_datasets(self, *, page_size: int = 0, timeout: Optional[float] = None) -> list[DatasetInfo]:
        """Every resident dataset, by name: the server's pages of
        ``page_size`` (0: its most, 1000) followed to the last, ``timeout``
        for each."""
        out: list[DatasetInfo] = []
        token = ""
        while True:
            response = self._call(self._stub.ListDatasets,
                                  pb.ListDatasetsRequest(page_size=page_size, page_token=token), timeout)
            out.extend(DatasetInfo.from_proto(d) for d in response.datasets)
            token = response.next_page_token
            if not token:
                return out

    def describe_dataset(self, name: str, *, timeout: Optional[float] = None) -> DatasetInfo:
        """One dataset; Error with NOT_FOUND for an unknown name."""
        return DatasetInfo.from_proto(self._call(self._stub.DescribeDataset,
                                                 pb.DescribeDatasetRequest(name=name), timeout))

    def delete_dataset(self, name: str, *, timeout: Optional[float] = None) -> DatasetInfo:
        """Removes a dataset and returns what it was; queries already
        reading it finish on it."""
        response = self._call(self._stub.DeleteDataset, pb.DeleteDatasetRequest(name=name), timeout)
        return DatasetInfo.from_proto(response.dataset)

    # -- Shared-memory regions -----------------------------------------------
    # For a client on the server's host: memory registered once, arrays in it
    # aggregated without being sent (tally.proto, "Shared memory").

    def share(self, array: Any, *, timeout: Optional[float] = None) -> "SharedArray":
        """Copies ``array`` once into a new POSIX shared-memory object and
        registers it with the server as a host region; the returned
        :class:`SharedArray` aggregates it there (no bytes on the wire), is
        a column :meth:`groupby` sends as a region, and, closed or left as a
        context manager, unregisters and removes it. The server must run on
        this host."""
        return SharedArray(self, array, timeout)

    def register_host_region(self, name: str, shm_name: str, byte_size: int, *, offset: int = 0,
                             timeout: Optional[float] = None) -> RegionInfo:
        """Registers ``byte_size`` bytes from ``offset`` of the shared-memory
        object ``shm_name`` (shm_open's name, e.g. ``/psm_1a2b``) as region
        ``name``."""
        request = pb.RegisterHostRegionRequest(name=name, shm_name=shm_name, offset=offset, byte_size=byte_size)
        return RegionInfo.from_proto(self._call(self._regions.RegisterHostRegion, request, timeout))

    def register_cuda_region(self, name: str, ipc_handle: bytes, byte_size: int, *, device: int = 0,
                             timeout: Optional[float] = None) -> RegionInfo:
        """Registers the first ``byte_size`` bytes of GPU memory exported
        with cudaIpcGetMemHandle (``ipc_handle``: its 64 bytes, e.g. CuPy's
        ``cupy.cuda.runtime.ipcGetMemHandle``) on GPU ``device``."""
        request = pb.RegisterCudaRegionRequest(name=name, ipc_handle=bytes(ipc_handle), device=device,
                                               byte_size=byte_size)
        return RegionInfo.from_proto(self._call(self._regions.RegisterCudaRegion, request, timeout))

    def unregister_region(self, name: str, *, timeout: Optional[float] = None) -> RegionInfo:
        """Removes the region; queries reading it finish on it."""
        response = self._call(self._regions.UnregisterRegion, pb.UnregisterRegionRequest(name=name), timeout)
        return RegionInfo.from_proto(response)

    def list_regions(self, *, timeout: Optional[float] = None) -> list[RegionInfo]:
        """Every registered region, by name."""
        response = self._call(self._regions.ListRegions, pb.ListRegionsRequest(), timeout)
        return [RegionInfo.from_proto(r) for r in response.regions]

    def aggregate_region(self, region: str, ops: Union[OpLike, Iterable[OpLike]], *, dtype: Any, length: int,
                         offset: int = 0, row_length: int = 0, timeout: Optional[float] = None) -> Results:
        """Aggregates ``length`` elements of ``dtype`` from byte ``offset``
        of ``region`` (rows of ``row_length`` when not 0), with
        :meth:`aggregate`'s answers."""
        spelled = spelled_ops(ops)
        d = check_dtype(np.dtype(dtype))
        request = pb.AggregateRegionRequest(
            region=region, offset=offset,
            spec=pb.ArraySpec(dtype=wire_dtype(d), length=length, row_length=row_length),
            aggregations=[self._wire_op(o) for _, o in spelled])
        response = self._call(self._regions.AggregateRegion, request, timeout)
        return self._results(spelled, d, row_length != 0, response)

    def partial_region(self, region: str, ops: Union[OpLike, Iterable[OpLike]], *, dtype: Any, length: int,
                       offset: int = 0, row_length: int = 0, base_index: int = 0,
                       timeout: Optional[float] = None) -> list[Partial]:
        """:meth:`partial` over elements that lie in a region, as
        :meth:`aggregate_region` takes them."""
        parsed = parse_ops(ops)
        d = check_dtype(np.dtype(dtype))
        request = pb.AggregateRegionRequest(
            region=region, offset=offset,
            spec=pb.ArraySpec(dtype=wire_dtype(d), length=length, row_length=row_length),
            aggregations=[self._wire_op(o, base_index) for o in parsed])
        response = self._call(self._regions.AggregateRegion, request, timeout)
        return [Partial.from_proto(o, r, row_length != 0) for o, r in zip(parsed, response.results)]

    def put_dataset_from_region(self, name: str, region: str, *, dtype: Any, length: int, offset: int = 0,
                                replace: bool = False, ttl: Optional[float] = None,
                                timeout: Optional[float] = None) -> DatasetInfo:
        """Uploads the resident dataset ``name`` from ``length`` elements of
        ``dtype`` at byte ``offset`` of ``region``: one copy, on the server."""
        d = check_dtype(np.dtype(dtype))
        request = pb.PutDatasetFromRegionRequest(
            dataset=pb.PutDatasetRequest.Header(name=name, spec=pb.ArraySpec(dtype=wire_dtype(d), length=length),
                                                replace=replace, ttl_seconds=ttl or 0.0),
            region=region, offset=offset)
        return DatasetInfo.from_proto(self._call(self._regions.PutDatasetFromRegion, request, timeout).dataset)

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- Internals -----------------------------------------------------------

    @staticmethod
    def _wire_op(op: Op, base_index: Optional[int] = None) -> "pb.Aggregation":
        if base_index is not None and op.kind == "minmax":
            raise ValueError("minmax has no partial state of its own; ask for the partial states of min and max")
        # Numbers as bytes: an answer of many rows or groups read as one
        # array (numpy.fromiter over a repeated field of 1M numbers: 0.28 s).
        a = pb.Aggregation(op=getattr(pb, "OP_" + op.kind.upper()), ddof=op.ddof, values_as_bytes=True)
        if op.kind == "histogram":
            a.histogram.bins, a.histogram.lo, a.histogram.hi = op.bins, op.lo, op.hi
        if op.q:
            a.q.extend(op.q)
        if op.method is not None:
            a.method = pb.QuantileMethod.Value("QUANTILE_METHOD_" + op.method.upper())
        if op.k is not None:
            a.k = op.k
        if op.precision is not None:
            a.precision = op.precision
        if op.relative_accuracy is not None:
            a.relative_accuracy = op.relative_accuracy
        if base_index is not None:
            if base_index < 0:
                raise ValueError(f"base_index must be >= 0, got {base_index}")
            a.partial.base_index = base_index
        return a

    @staticmethod
    def _dataset_request(name: str, wire: list, range: Optional[tuple[int, int]], row_length: Optional[int],
                         offsets: Any = None, valid: Any = None) -> "pb.AggregateDatasetRequest":
        request = pb.AggregateDatasetRequest(name=name, aggregations=wire)
        if row_length is not None:  # unset: the server cuts the dataset into the rows it was uploaded in
            request.row_length = row_length
        if offsets is not None:
            request.offsets = prepare_offsets(offsets)
        if valid is not None:
            v = np.asarray(valid)
            request.validity = prepare_validity(v, (v.size,))
        if range is not None:
            request.range.begin, request.range.end = range
        return request

    @staticmethod
    def _per_row(info: Optional[DatasetInfo], row_length: Optional[int], offsets: Any) -> bool:
        """Whether a dataset query answered per row (or segment): values
        alone do not say (one row of answers is one answer), the query and
        the dataset do."""
        if offsets is not None:
            return True
        return (row_length if row_length is not None else info.row_length) != 0

    def _chunks(self, a: np.ndarray, field: int, progress: Optional[Progress]) -> Iterator[bytes]:
        """The array's bytes as serialized stream messages, each a chunk of
        chunk_bytes in bytes field ``field`` (written around the bytes in one
        copy: _wire.chunk_message)."""
        view = byte_view(a)
        total = len(view)
        if progress:
            progress(0, total)
        for at in range(0, total, self.chunk_bytes):
            yield _wire.chunk_message(view[at:at + self.chunk_bytes], field)
            if progress:
                progress(min(at + self.chunk_bytes, total), total)

    def _raw_method(self, kind: str, method: str, response: Any) -> Callable:
        """The Aggregator service's ``method`` as a multi-callable of
        ``kind`` ("stream_unary", "unary_stream", "stream_stream") whose
        requests are serialized already (as _chunks writes them, or by the
        caller) and whose answers ``response`` parses (a message class, or
        a function of the bytes)."""
        calls = self.__dict__.setdefault("_raw_methods", {})
        if method not in calls:
            parse = getattr(response, "FromString", response)
            calls[method] = getattr(self._channel, kind)(f"/tally.v1.Aggregator/{method}",
                                                         response_deserializer=parse)
        return calls[method]

    def _send(self, a: np.ndarray, row_length: int, wire: list, timeout: Optional[float],
              progress: Optional[Progress], offsets: Optional[bytes] = None,
              validity: Optional[bytes] = None) -> "pb.AggregateResponse":
        spec = pb.ArraySpec(dtype=wire_dtype(a.dtype), length=a.size, row_length=row_length, offsets=offsets or b"",
                            validity=validity or b"")
        if a.nbytes <= self.stream_threshold:
            if progress:
                progress(0, a.nbytes)
            response = self._call(self._stub.Aggregate,
                                  pb.AggregateRequest(spec=spec, data=byte_view(a).tobytes(), aggregations=wire),
                                  timeout)
            if progress:
                progress(a.nbytes, a.nbytes)
            return response

        def messages() -> Iterator[bytes]:
            header = pb.AggregateStreamRequest.Header(spec=spec, aggregations=wire)
            yield pb.AggregateStreamRequest(header=header).SerializeToString()
            yield from self._chunks(a, pb.AggregateStreamRequest.CHUNK_FIELD_NUMBER, progress)

        return self._call(self._raw_method("stream_unary", "AggregateStream", pb.AggregateResponse), messages(), timeout)

    def _call(self, method: Callable, request: Any, timeout: Optional[float]) -> Any:
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise Error(e.code(), e.details() or "") from None

    @staticmethod
    def _results(spelled: list[tuple[str, Op]], dtype: np.dtype, segmented: bool,
                 response: "pb.AggregateResponse") -> Results:
        values = []
        for (_, op), r in zip(spelled, response.results):
            kind = r.WhichOneof("values")
            if kind == "histograms":
                hs = r.histograms.histograms
                counts = np.array([list(h.counts) for h in hs], dtype=np.uint64).reshape(len(hs), op.bins)
                values.append(_values.present_histogram(
                    op, dtype, counts, np.array([h.below for h in hs], dtype=np.uint64),
                    np.array([h.above for h in hs], dtype=np.uint64),
                    np.array([h.nan for h in hs], dtype=np.uint64), segmented))
            elif op.kind in TOPK_OPS:
                values.append(_values.present_topk(op, dtype, result_values(r), values_of(r.indices, np.int64),
                                                   values_of(r.lengths, np.uint64), segmented))
            else:
                values.append(_values.present(op, dtype, result_values(r), segmented))
        return Results([op for _, op in spelled], values, response.execution, [key for key, _ in spelled])
