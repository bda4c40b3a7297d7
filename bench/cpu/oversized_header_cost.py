#!/usr/bin/python3
"""What an AggregateStream that declares far more than it sends costs a
tally-server on the CPU backend: a header declaring 2^62 uint8 elements in
2^24 rows (one op: variance, sum or argmax), then a 4000-byte chunk, then the
end of the stream, which the server answers INVALID_ARGUMENT ("the stream
ended early"). Prints the wall time per call and the server's CPU time per
call, beside a small well-formed request's. Run with Debian's interpreter,
which has grpcio:

    /usr/bin/python3 bench/cpu/oversized_header_cost.py build/server/tally-server proto [--calls 300]
"""
import argparse
import os
import statistics
import sys
import time

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from tally_test_server import TallyServer, load_messages  # noqa: E402


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("server")
    parser.add_argument("proto")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    pb = load_messages(args.proto)
    server = TallyServer(args.server, pb, ["--backend=cpu"])
    pid = server.process.pid

    def timed(run):
        walls = []
        cpu0 = cpu_seconds(pid)
        for i in range(args.calls):
            t0 = time.perf_counter()
            run(i)
            walls.append(time.perf_counter() - t0)
        return walls, (cpu_seconds(pid) - cpu0) / args.calls

    good = pb.AggregateRequest(spec=pb.ArraySpec(dtype=pb.DTYPE_UINT8, row_length=1), data=bytes(8),
                               aggregations=[pb.Aggregation(op=pb.OP_VARIANCE)])
    ops = (pb.OP_VARIANCE, pb.OP_SUM, pb.OP_ARGMAX)

    def oversized(i):
        header = pb.AggregateStreamRequest(header=pb.AggregateStreamRequest.Header(
            spec=pb.ArraySpec(dtype=pb.DTYPE_UINT8, length=2**62, row_length=2**38),
            aggregations=[pb.Aggregation(op=ops[i % 3])]))
        try:
            server.aggregate_stream(iter([header, pb.AggregateStreamRequest(chunk=bytes(4000))]), timeout=60)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "ended early" in e.details(), e

    for _ in range(20):
        server.aggregate(good, timeout=10)
    for label, run in (("8 uint8 elements in 8 rows, unary", lambda i: server.aggregate(good, timeout=10)),
                       ("header declaring 2^62 elements in 2^24 rows + 4000 bytes", oversized)):
        walls, cpu = timed(run)
        print(f"{label}: wall median {statistics.median(walls) * 1e3:.2f} ms (min {min(walls) * 1e3:.2f}, "
              f"max {max(walls) * 1e3:.2f}); server CPU {cpu * 1e3:.2f} ms per call, {args.calls} calls")
    server.stop()


if __name__ == "__main__":
    main()
