#!/usr/bin/env python3
"""Resident datasets end to end over gRPC on loopback, against baselines
measured in the same run:

  upload     PutDataset of SIZE float32 bytes (cuda backend) against
             AggregateStream of the same bytes to a --backend=null server,
             same client code, alternating rounds
  query      sum+max+hist:256 on a resident 1 GiB dataset: round trip p50
             and the server's own time (Execution.server_seconds) p50
  scan       64 concurrent clients querying datasets of 1 MiB..4 GiB with
             mixed ops for DURATION s: resident bytes scanned per second,
             failures
  cpu        a resident 1 GiB sum on a --backend=cpu server against
             numpy.sum of the same array in this process

usage: grpc_resident_bench.py TALLY_SERVER PROTO_DIR [--upload-gib=4] [--duration=10]
       (TALLY_PB2_DIR=folder with tally/v1/tally_pb2.py where protoc is missing)
"""
import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
from tally_test_server import TallyServer, load_messages  # noqa: E402

CHUNK = 4 << 20


class Calls:
    def __init__(self, server):
        pb, ch = server.pb, server.channel
        self.pb = pb
        self.put = ch.stream_unary("/tally.v1.Aggregator/PutDataset",
                                   request_serializer=pb.PutDatasetRequest.SerializeToString,
                                   response_deserializer=pb.PutDatasetResponse.FromString)
        self.query = ch.unary_unary("/tally.v1.Aggregator/AggregateDataset",
                                    request_serializer=pb.AggregateDatasetRequest.SerializeToString,
                                    response_deserializer=pb.AggregateResponse.FromString)
        self.stream = server.aggregate_stream

    def put_dataset(self, name, x):
        pb = self.pb
        data = memoryview(x).cast("B")

        def messages():
            yield pb.PutDatasetRequest(header=pb.PutDatasetRequest.Header(
                name=name, spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, length=x.size), replace=True))
            for at in range(0, len(data), CHUNK):
                yield pb.PutDatasetRequest(chunk=bytes(data[at:at + CHUNK]))
        return self.put(messages())

    def stream_array(self, x, ops):
        pb = self.pb
        data = memoryview(x).cast("B")

        def messages():
            yield pb.AggregateStreamRequest(header=pb.AggregateStreamRequest.Header(
                spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, length=x.size), aggregations=ops))
            for at in range(0, len(data), CHUNK):
                yield pb.AggregateStreamRequest(chunk=bytes(data[at:at + CHUNK]))
        return self.stream(messages())


def ops_of(pb, *names):
    out = []
    for n in names:
        if n.startswith("hist"):
            _, bins, lo, hi = n.split(":")
            out.append(pb.Aggregation(op=pb.OP_HISTOGRAM,
                                      histogram=pb.HistogramSpec(bins=int(bins), lo=float(lo), hi=float(hi))))
        elif n == "std1":
            out.append(pb.Aggregation(op=pb.OP_STDDEV, ddof=1))
        else:
            out.append(pb.Aggregation(op=getattr(pb, "OP_" + n.upper())))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("proto")
    ap.add_argument("--upload-gib", type=float, default=4.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    pb = load_messages(args.proto)
    rng = np.random.default_rng()
    big = rng.uniform(-1.2, 1.2, int(args.upload_gib * (1 << 30)) // 4).astype(np.float32)
    gib1 = big[: (1 << 30) // 4]
    rows = []

    # Upload against the null backend's stream, alternating.
    null = TallyServer(args.server, pb, ["--backend=null"])
    cuda = TallyServer(args.server, pb, ["--backend=cuda"])
    try:
        nc, cc = Calls(null), Calls(cuda)
        stream_rates, put_rates = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            nc.stream_array(big, ops_of(pb, "sum"))
            stream_rates.append(big.nbytes / (time.perf_counter() - t0) / 1e9)
            t0 = time.perf_counter()
            cc.put_dataset("big", big)
            put_rates.append(big.nbytes / (time.perf_counter() - t0) / 1e9)
        s, p = statistics.median(stream_rates), statistics.median(put_rates)
        rows.append(("upload %.0f GiB (cuda PutDataset / null AggregateStream)" % args.upload_gib,
                     f"{p:.2f} / {s:.2f} GB/s", f"{p / s:.3f}x", "target >= 0.9x"))
        null.stop()

        # One query on 1 GiB.
        cc.put_dataset("g1", gib1)
        q = pb.AggregateDatasetRequest(name="g1", aggregations=ops_of(pb, "sum", "max", "hist:256:-1:1"))
        for _ in range(20):
            cc.query(q)
        rtt, server = [], []
        for _ in range(300):
            t0 = time.perf_counter()
            r = cc.query(q)
            rtt.append(time.perf_counter() - t0)
            server.append(r.execution.server_seconds)
        want = float(np.sum(gib1, dtype=np.float64))
        got = r.results[0].doubles.values[0]
        assert abs(got - want) <= 1e-9 * abs(want) + 1e-6, (got, want)
        assert r.results[1].doubles.values[0] == float(gib1.max())
        counts, _ = np.histogram(gib1, 256, range=(-1, 1))
        assert list(r.results[2].histograms.histograms[0].counts) == counts.tolist()
        rows.append(("1 GiB sum+max+hist:256 round trip p50", f"{statistics.median(rtt) * 1e3:.3f} ms", "",
                     "target <= 0.6 ms"))
        rows.append(("1 GiB sum+max+hist:256 server time p50", f"{statistics.median(server) * 1e3:.3f} ms",
                     f"{(1 << 30) / statistics.median(server) / 1e9:.0f} GB/s", "vs the kernel pass"))

        # 64 clients over datasets of 1 MiB .. 4 GiB.
        sizes = [1 << 20, 16 << 20, 256 << 20, 1 << 30, 4 << 30]
        sizes = [b for b in sizes if b <= big.nbytes]
        for b in sizes:
            cc.put_dataset(f"s{b}", big[: b // 4])
        mixes = [ops_of(pb, "sum"), ops_of(pb, "min", "max", "argmax"), ops_of(pb, "mean", "std1"),
                 ops_of(pb, "sum", "max", "hist:256:-1:1")]
        scanned, done, failed = [0] * 64, [0] * 64, [0] * 64
        stop = time.perf_counter() + args.duration

        def client(i):
            k = i
            while time.perf_counter() < stop:
                b = sizes[k % len(sizes)]
                req = pb.AggregateDatasetRequest(name=f"s{b}", aggregations=mixes[(k // len(sizes)) % len(mixes)])
                k += 7
                try:
                    cc.query(req, timeout=30)
                    scanned[i] += b
                    done[i] += 1
                except Exception:  # counted, not hidden
                    failed[i] += 1
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        secs = time.perf_counter() - t0
        rows.append(("64 clients, datasets 1 MiB..%d GiB, mixed ops" % (sizes[-1] >> 30),
                     f"{sum(scanned) / secs / 1e9:.0f} GB/s", f"{sum(done)} queries, {sum(failed)} failed",
                     "target >= 2000 GB/s, 0 failed"))
    finally:
        cuda.stop()
        null.stop()

    cpu = TallyServer(args.server, pb, ["--backend=cpu"])
    try:
        c = Calls(cpu)
        c.put_dataset("g1", gib1)
        q = pb.AggregateDatasetRequest(name="g1", aggregations=ops_of(pb, "sum"))
        tally_s, numpy_s = [], []
        for _ in range(7):
            tally_s.append(c.query(q).execution.server_seconds)
            t0 = time.perf_counter()
            np.sum(gib1)
            numpy_s.append(time.perf_counter() - t0)
        ts, ns = statistics.median(tally_s), statistics.median(numpy_s)
        rows.append(("cpu backend resident 1 GiB sum / numpy.sum", f"{ts * 1e3:.1f} / {ns * 1e3:.1f} ms",
                     f"{ns / ts:.2f}x numpy", "target >= 1.5x"))
    finally:
        cpu.stop()

    print()
    for r in rows:
        print(" | ".join(r))


if __name__ == "__main__":
    main()
