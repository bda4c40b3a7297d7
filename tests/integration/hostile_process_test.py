"""Hostile clients against the tally-server process itself, for what only
the whole process shows: how it ends and what the kernel's limits do to it.

usage: hostile_process_test.py CASE TALLY_SERVER_BINARY PROTO_ROOT
  CASE is one of:
  sigterm_after_fifo  RegisterHostRegion of a FIFO in /dev/shm, from more
                      clients than there are request workers, is refused at
                      once; the server serves on, and SIGTERM ends it within
                      its drain grace.
"""
import os
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tally_test_server import TallyServer, load_messages  # noqa: E402

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


CASES = {"sigterm_after_fifo": sigterm_after_fifo}


def main():
    case, binary, proto_root = sys.argv[1], sys.argv[2], sys.argv[3]
    failures = CASES[case](binary, load_messages(proto_root))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
