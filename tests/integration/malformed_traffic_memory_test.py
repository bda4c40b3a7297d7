"""tally-server's memory under malformed traffic: unary messages just over
--max_message_bytes, messages over gRPC's own limit, stream headers that
declare huge arrays, and group-by tables that end after their first chunk,
sent for a bounded time. The server's RSS must level
off below its documented bound (a baseline, plus gRPC's receive quota,
--max_inflight_bytes + 4 x --max_message_bytes, plus what the allocator
keeps for reuse), and come back down once the traffic stops.

usage: malformed_traffic_memory_test.py TALLY_SERVER_BINARY PROTO_ROOT
           [--seconds=S] [--max_message_bytes=B] [--max_inflight_bytes=B]
           [--just_over_clients=N] [--over_grpc_clients=N] [--over_grpc_bytes=B]
           [--header_clients=N] [--table_header_clients=N]
With no options it runs the suite's short case; docs/performance.md runs
it longer, with the default limits, and prints the RSS it saw.
"""
import os
import statistics
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tally_test_server import TallyServer, load_messages, rss_bytes  # noqa: E402

MiB = 1 << 20
warm_up_seconds = 3.0


def transport_limit(max_message_bytes):
    """server/frontend/server.cc TransportLimit."""
    return min(max(2 * max_message_bytes, max_message_bytes + 16 * MiB), 2**31 - 1)


def main():
    binary, proto_root = sys.argv[1], sys.argv[2]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[3:] if a.startswith("--"))
    seconds = float(opts.get("seconds", 15))
    max_message = int(opts.get("max_message_bytes", 8 * MiB))
    max_inflight = int(opts.get("max_inflight_bytes", 64 * MiB))
    quota = max_inflight + 2 * transport_limit(max_message) if max_inflight else 0
    clients = {kind: int(opts.get(f"{kind}_clients", n)) for kind, n in (("just_over", 3), ("over_grpc", 1),
                                                                         ("header", 2), ("table_header", 1))}
    pb = load_messages(proto_root)
    server = TallyServer(binary, pb, ["--backend=cpu", "--threads=2", f"--max_message_bytes={max_message}",
                                      f"--max_inflight_bytes={max_inflight}"])
    pid = server.process.pid
    ident = lambda b: b  # noqa: E731  (messages are serialized once, up front)

    good = pb.AggregateRequest(spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT32), data=b"\0\0\x80\x3f" * 1024,
                               aggregations=[pb.Aggregation(op=pb.OP_SUM)])
    for _ in range(20):
        server.aggregate(good, timeout=10)
    time.sleep(1)
    base = rss_bytes(pid)

    def unary(size):
        return pb.AggregateRequest(spec=pb.ArraySpec(dtype=pb.DTYPE_UINT8), data=b"\1" * size,
                                   aggregations=[pb.Aggregation(op=pb.OP_SUM)]).SerializeToString()
    just_over = unary(max_message + MiB)  # answered by the service: stream it
    # Refused by gRPC, once read.
    over_grpc = unary(int(opts.get("over_grpc_bytes", transport_limit(max_message) + 16 * MiB)))
    header = pb.AggregateStreamRequest(header=pb.AggregateStreamRequest.Header(
        spec=pb.ArraySpec(dtype=pb.DTYPE_UINT8, length=2**62, row_length=2**38),
        aggregations=[pb.Aggregation(op=pb.OP_VARIANCE)])).SerializeToString()
    chunk = pb.AggregateStreamRequest(chunk=b"\7" * 4000).SerializeToString()
    # A group-by table of half the budget (18 bytes and 20 of working
    # memory a row), then one chunk and the end: its memory is taken at the
    # chunk and freed when the stream ends early.
    table = pb.GroupByRequest(columns=[pb.Column(name="k", dtype=pb.DTYPE_INT64),
                                       pb.Column(name="v", dtype=pb.DTYPE_FLOAT64),
                                       pb.Column(name="w", dtype=pb.DTYPE_INT16)],
                              keys=["k"], aggregations=[pb.GroupAggregation(column="v",
                                                                           aggregation=pb.Aggregation(op=pb.OP_SUM))])
    table_header = pb.GroupByStreamRequest(header=pb.GroupByStreamRequest.Header(
        request=table, rows=max(1, max_inflight // 2 // 38))).SerializeToString()
    table_chunk = pb.GroupByStreamRequest(column=1, chunk=b"\7" * 4000).SerializeToString()

    stop = time.time() + seconds
    lock = threading.Lock()
    outcomes = {}

    def record(kind, code):
        with lock:
            outcomes.setdefault(kind, {}).setdefault(code.name, 0)
            outcomes[kind][code.name] += 1

    def send_unary(message, kind):
        channel = grpc.insecure_channel(f"127.0.0.1:{server.port}", options=[("grpc.max_send_message_length", -1)])
        call = channel.unary_unary("/tally.v1.Aggregator/Aggregate", request_serializer=ident,
                                   response_deserializer=ident)
        while time.time() < stop:
            try:
                call(message, timeout=30)
                record(kind, grpc.StatusCode.OK)
            except grpc.RpcError as e:
                record(kind, e.code())
        channel.close()

    def send_streams(method, streaming, messages, kind):
        """Streams of `messages` on `method` until the time is up; each
        call's answer read whole (`streaming`: several messages)."""
        channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        opened = channel.stream_stream if streaming else channel.stream_unary
        call = opened(f"/tally.v1.Aggregator/{method}", request_serializer=ident, response_deserializer=ident)
        while time.time() < stop:
            try:
                answer = call(iter(messages), timeout=30)
                if streaming:
                    list(answer)
                record(kind, grpc.StatusCode.OK)
            except grpc.RpcError as e:
                record(kind, e.code())
        channel.close()

    threads = [threading.Thread(target=send_unary, args=(just_over, "just over"))
               for _ in range(clients["just_over"])]
    threads += [threading.Thread(target=send_unary, args=(over_grpc, "over gRPC's limit"))
                for _ in range(clients["over_grpc"])]
    threads += [threading.Thread(target=send_streams, args=("AggregateStream", False, [header, chunk], "header"))
                for _ in range(clients["header"])]
    threads += [threading.Thread(target=send_streams,
                                 args=("GroupByStream", True, [table_header, table_chunk], "table header"))
                for _ in range(clients["table_header"])]
    for t in threads:
        t.start()
    samples = []  # (seconds since start, rss)
    t0 = time.time()
    while any(t.is_alive() for t in threads):
        if server.process.poll() is not None:
            print("FAIL: tally-server exited with status", server.process.returncode, "\n" + server.stop())
            return 1
        samples.append((time.time() - t0, rss_bytes(pid)))
        time.sleep(0.25)
    for t in threads:
        t.join()
    settling = []
    for _ in range(20):
        time.sleep(0.25)
        settling.append(rss_bytes(pid))
    after = settling[-1]
    print("RSS after the traffic, every 0.25 s, MiB:", " ".join(str(r // MiB) for r in settling))
    server.aggregate(good, timeout=10)  # still serving

    rss = [r for _, r in samples]
    peak = max(rss)
    # The first seconds are the allocator filling its arenas and gRPC's
    # buffers reaching their working size (a ramp from base to the plateau,
    # seen in every run); a leak is a level that keeps moving after that.
    # Under a loaded CI host the ramp took up to 2 s, and counting it in the
    # first third made a flat plateau read as rising.
    steady = [r for t, r in samples if t >= min(warm_up_seconds, seconds / 3)] or rss
    third = max(1, len(steady) // 3)
    # A leak moves the typical level; one message of the maximum size in
    # flight at a sample moves only that sample. So the thirds are compared
    # by their medians, and the peak is held to the bound.
    first, last = statistics.median(steady[:third]), statistics.median(steady[-third:])
    # gRPC's receive quota bounds the messages it holds (best effort: it
    # resets streams once over it); jemalloc keeps what was freed in the last
    # second or so for reuse (dirty_decay_ms, server/allocator.cc).
    bound = base + quota + 128 * MiB
    print(f"traffic for {seconds:.0f} s: {outcomes}")
    print(f"RSS: base {base / MiB:.0f} MiB; peak {peak / MiB:.0f} MiB (bound {bound / MiB:.0f}: base + receive "
          f"quota {quota / MiB:.0f} + 128); after {warm_up_seconds:.0f} s of warm-up, first third's median {first / MiB:.0f}, last third's {last / MiB:.0f}; "
          f"{after / MiB:.0f} MiB after the traffic")
    print("RSS every 0.25 s, MiB:", " ".join(str(r // MiB) for r in rss))
    server.stop()

    failures = []
    for kind, option, allowed in (("just over", "just_over", {"RESOURCE_EXHAUSTED"}),
                                  ("over gRPC's limit", "over_grpc", {"RESOURCE_EXHAUSTED"}),
                                  ("header", "header", {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}),
                                  ("table header", "table_header", {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"})):
        seen = dict(outcomes.get(kind, {}))
        # The server answers each of these calls while the client may still
        # be sending (a header it refuses, a message it will not take in
        # whole), then resets the stream (RST_STREAM, NO_ERROR); a client
        # that reads the reset before the trailers reports UNAVAILABLE
        # (grpc/grpc#21418). A few in a thousand under load are that race
        # (one "just over" call of 520 on a 2-core CI run); more would be
        # the server dropping calls. One is allowed however few the calls
        # (a loaded run sends some 60 "over gRPC's limit" calls, where 0.5%
        # would allow none: one such run failed on a single reset).
        reset = seen.pop("UNAVAILABLE", 0)
        if reset > max(1, sum(seen.values()) * 5 // 1000):
            failures.append(f"{kind}: {reset} UNAVAILABLE of {reset + sum(seen.values())}, over 0.5%")
        if clients[option] and (sum(seen.values()) < 3 or not set(seen) <= allowed):
            failures.append(f"{kind}: {seen}, expected only {sorted(allowed)}")
    if last > first + 32 * MiB:
        failures.append("RSS still rising: the last third's median is over the first third's by more than 32 MiB")
    if quota and peak > bound:
        failures.append("RSS peaked over base + receive quota + 128 MiB")
    if after > base + 32 * MiB:
        failures.append("RSS did not come back within 32 MiB of the base 5 s after the traffic")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
