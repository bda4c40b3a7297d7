"""Hostile clients against the tally-server process itself, for what only
the whole process shows: how it ends and what the kernel's limits do to it.

usage: hostile_process_test.py CASE TALLY_SERVER_BINARY PROTO_ROOT
  CASE is one of:
  sigterm_after_fifo  RegisterHostRegion of a FIFO in /dev/shm, from more
                      clients than there are request workers, is refused at
                      once; the server serves on, and SIGTERM ends it within
                      its drain grace.
  fd_exhaustion       a server with 256 file descriptors (soft and hard
                      limit) and 400 idle TCP connections: new connections
                      are refused while descriptors are short, the client
                      already connected is served, and once the idle ones
                      close a new connection is served at its usual latency
                      (gRPC's own listener stopped for good at the first
                      EMFILE).
  many_datasets       one-byte datasets uploaded one after another under a
                      1 MiB --max_dataset_bytes and --quota_dataset_bytes:
                      each is charged what it costs, so a few hundred fit
                      (75,000 did, for 338 MiB of RSS), and the server's RSS
                      stays within a few MiB of where it started.
"""
import os
import resource
import socket
import statistics
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tally_test_server import TallyServer, load_messages, rss_bytes  # noqa: E402

GRACE_SECONDS = 2


def good_request(pb):
    return pb.AggregateRequest(spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT32), data=b"\0\0\x80\x3f" * 1024,
                               aggregations=[pb.Aggregation(op=pb.OP_SUM)])


def served(server, pb, timeout=5):
    """One normal request: its latency in seconds, or None when it failed."""
    start = time.time()
    try:
        resp = server.aggregate(good_request(pb), timeout=timeout)
    except grpc.RpcError as e:
        print("a normal request failed:", e.code(), e.details())
        return None
    return time.time() - start if resp.results[0].doubles.values[0] == 1024 else None


def sigterm_after_fifo(binary, pb):
    fifo = f"/dev/shm/tally-fifo-process-{os.getpid()}"
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    server = TallyServer(binary, pb, ["--backend=cpu", "--threads=2", f"--drain_grace_seconds={GRACE_SECONDS}"])
    register = server.channel.unary_unary("/tally.v1.SharedMemory/RegisterHostRegion",
                                          request_serializer=pb.RegisterHostRegionRequest.SerializeToString,
                                          response_deserializer=pb.RegionInfo.FromString)
    failures = []
    codes = {}
    lock = threading.Lock()

    def call(i):
        try:
            register(pb.RegisterHostRegionRequest(name=f"fifo-{i}", shm_name=os.path.basename(fifo),
                                                  byte_size=4096), timeout=3)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        with lock:
            codes[code.name] = codes.get(code.name, 0) + 1

    try:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(80)]  # 64 request workers
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("registrations of a FIFO:", codes)
        if codes != {"FAILED_PRECONDITION": 80}:
            failures.append(f"registrations of a FIFO ended {codes}, expected 80 FAILED_PRECONDITION")
        latency = served(server, pb)
        if latency is None:
            failures.append("a normal request was not served after the FIFO registrations")
        else:
            print(f"a normal request after them: {latency * 1000:.1f} ms")
        start = time.time()
        server.process.send_signal(15)
        try:
            server.process.wait(timeout=GRACE_SECONDS + 3)
            print(f"SIGTERM: exited {server.process.returncode} after {time.time() - start:.1f} s")
            if server.process.returncode != 0:
                failures.append(f"exit status {server.process.returncode} after SIGTERM, expected 0")
        except Exception:  # noqa: BLE001  (subprocess.TimeoutExpired)
            failures.append(f"still running {GRACE_SECONDS + 3} s after SIGTERM (drain grace {GRACE_SECONDS} s)")
    finally:
        # Opening the write end frees any reader still blocked on the FIFO.
        try:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        finally:
            os.unlink(fifo)
        output = server.stop(9)
    if failures:
        print(output[-3000:])
    return failures


def latencies(server, pb, n=20):
    out = [served(server, pb) for _ in range(n)]
    return None if None in out else out


def fd_exhaustion(binary, pb):
    limit = 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))  # room for our own sockets

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    server = TallyServer(binary, pb, ["--backend=cpu", "--threads=2", "--min_free_file_descriptors=64"],
                         preexec_fn=low_limit)
    failures = []
    before = latencies(server, pb)
    if before is None:
        return ["a normal request failed before the attack"]
    idle = []
    try:
        for _ in range(400):
            try:
                idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=2))
            except OSError:
                pass
        time.sleep(1)
        # The server closed the connections it refused.
        refused = 0
        for s in idle:
            s.setblocking(False)
            try:
                refused += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                refused += 1
        print(f"{len(idle)} idle connections opened, {refused} refused by the server")
        if refused == 0:
            failures.append("no connection was refused with 256 file descriptors")
        during = latencies(server, pb, 5)
        if during is None:
            failures.append("the client connected before the attack was not served during it")
    finally:
        for s in idle:
            s.close()
    # New connections are served again once the idle ones have closed.
    after = None
    deadline = time.time() + 10
    while after is None and time.time() < deadline:
        fresh = TallyServer.__new__(TallyServer)
        fresh_channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        call = fresh_channel.unary_unary("/tally.v1.Aggregator/Aggregate",
                                         request_serializer=pb.AggregateRequest.SerializeToString,
                                         response_deserializer=pb.AggregateResponse.FromString)
        fresh.aggregate = call
        try:
            call(good_request(pb), timeout=2)
            after = latencies(fresh, pb)
        except grpc.RpcError:
            time.sleep(0.5)
        fresh_channel.close()
    output = server.stop()
    if after is None:
        failures.append("a new connection was not served within 10 s of the idle connections closing")
    else:
        b, a = statistics.median(before) * 1000, statistics.median(after) * 1000
        print(f"normal request latency, median: {b:.2f} ms before, {a:.2f} ms on a new connection after")
        if a > max(4 * b, 50):
            failures.append(f"latency after the attack {a:.2f} ms, before {b:.2f} ms")
    if "refusing new connections" not in output:
        failures.append("the server did not log that it refused connections")
    if "Failed accept4" in output:
        failures.append("gRPC's listener hit EMFILE")
    if failures:
        print(output[-3000:])
    return failures


def many_datasets(binary, pb):
    mib = 1 << 20
    server = TallyServer(binary, pb, ["--backend=cpu", "--threads=2", f"--max_dataset_bytes={mib}",
                                      f"--quota_dataset_bytes={mib}"])
    failures = []
    for _ in range(20):
        served(server, pb)
    base = rss_bytes(server.process.pid)
    made, codes = 0, {}
    start = time.time()
    for i in range(5000):
        header = pb.PutDatasetRequest(header=pb.PutDatasetRequest.Header(
            name=f"tiny-{i}", spec=pb.ArraySpec(dtype=pb.DTYPE_UINT8, length=1)))
        try:
            server.put_dataset(iter([header, pb.PutDatasetRequest(chunk=b"\1")]), timeout=10)
            made += 1
        except grpc.RpcError as e:
            codes[e.code().name] = codes.get(e.code().name, 0) + 1
    grown = rss_bytes(server.process.pid) - base
    print(f"5000 one-byte uploads in {time.time() - start:.1f} s: {made} accepted, refused {codes}; "
          f"RSS {base / mib:.1f} MiB before, +{grown / mib:.1f} MiB after")
    if made > mib // 4096:
        failures.append(f"{made} one-byte datasets fit under a 1 MiB budget")
    if set(codes) != {"RESOURCE_EXHAUSTED"}:
        failures.append(f"refusals {codes}, expected RESOURCE_EXHAUSTED only")
    if grown > 32 * mib:
        failures.append(f"RSS grew {grown / mib:.1f} MiB")
    if served(server, pb) is None:
        failures.append("a normal request failed after the uploads")
    output = server.stop()
    if failures:
        print(output[-3000:])
    return failures


CASES = {"sigterm_after_fifo": sigterm_after_fifo, "fd_exhaustion": fd_exhaustion, "many_datasets": many_datasets}


def main():
    case, binary, proto_root = sys.argv[1], sys.argv[2], sys.argv[3]
    failures = CASES[case](binary, load_messages(proto_root))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
