"""Starts a tally-server on a free loopback port and gives a gRPC client for it.

Messages come from tally.proto compiled with protoc --python_out at test time
(python3-grpcio has no code generator for stubs, so calls go through grpc's
generic multi-callables with the message classes' own serializers).
"""
import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc


def load_messages(proto_root, out_dir=None):
    """Compiles tally/v1/tally.proto with protoc; returns the tally_pb2 module.

    Where protoc is missing (a GPU host with only Python), set TALLY_PB2_DIR to
    a folder holding an already generated tally/v1/tally_pb2.py.
    """
    out_dir = out_dir or os.environ.get("TALLY_PB2_DIR")
    if not out_dir:
        out_dir = tempfile.mkdtemp(prefix="tally-pb2-")
        # The module stays imported for the process's life; its folder goes with it.
        atexit.register(shutil.rmtree, out_dir, ignore_errors=True)
        subprocess.run(["protoc", f"--proto_path={proto_root}", f"--python_out={out_dir}",
                        "tally/v1/tally.proto"], check=True)
    sys.path.insert(0, out_dir)
    from tally.v1 import tally_pb2  # noqa: E402
    return tally_pb2


# grpc.health.v1 by hand: a generated health_pb2 would live in a package named
# grpc and shadow grpcio. HealthCheckRequest{service} is field 1 (a string);
# HealthCheckResponse{status} is field 1 (an enum): SERVING = 1.
SERVING, NOT_SERVING = 1, 2


def _health_request(service):
    data = service.encode()
    return (b"\x0a" + bytes([len(data)]) + data) if data else b""


def _health_status(payload):
    return payload[1] if len(payload) >= 2 and payload[0] == 0x08 else 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TallyServer:
    def __init__(self, binary, tally_pb2, extra_args=(), preexec_fn=None):
        """preexec_fn: run in the child before the server starts (e.g. to set its limits)."""
        self.port = free_port()
        self.process = subprocess.Popen(
            [binary, f"--listen=127.0.0.1:{self.port}", "--metrics_listen=", *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec_fn)
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}",
            options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
        self.pb = tally_pb2

        def method(kind, name, request, response):
            return kind(f"/tally.v1.Aggregator/{name}", request_serializer=request.SerializeToString,
                        response_deserializer=response.FromString)

        unary, stream = self.channel.unary_unary, self.channel.stream_unary
        self.aggregate = method(unary, "Aggregate", tally_pb2.AggregateRequest, tally_pb2.AggregateResponse)
        self.aggregate_stream = method(stream, "AggregateStream", tally_pb2.AggregateStreamRequest,
                                       tally_pb2.AggregateResponse)
        self.put_dataset = method(stream, "PutDataset", tally_pb2.PutDatasetRequest, tally_pb2.PutDatasetResponse)
        self.aggregate_dataset = method(unary, "AggregateDataset", tally_pb2.AggregateDatasetRequest,
                                        tally_pb2.AggregateResponse)
        self._health = self.channel.unary_unary("/grpc.health.v1.Health/Check")
        deadline = time.time() + 20
        # The port first, with plain connects: a gRPC channel that found
        # nothing listening backs off (about 5 s before it tried again),
        # which every server start here then waited out.
        while self.process.poll() is None and time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        while True:
            try:
                if self.health_status() == SERVING:
                    break
            except grpc.RpcError:
                pass
            if self.process.poll() is not None or time.time() > deadline:
                raise RuntimeError("tally-server did not start:\n" + self.stop())
            time.sleep(0.1)

    def health_status(self, service=""):
        return _health_status(self._health(_health_request(service), timeout=1))

    def watch_health(self, service=""):
        """grpc.health.v1 Watch: an iterator of serving statuses, as they change."""
        watch = self.channel.unary_stream("/grpc.health.v1.Health/Watch")
        return (_health_status(m) for m in watch(_health_request(service), timeout=60))

    def stop(self, sig=None):
        """Stops the server (SIGTERM by default); returns its output."""
        import signal
        if self.process.poll() is None:
            self.process.send_signal(sig or signal.SIGTERM)
        try:
            out, _ = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        self.channel.close()
        return out or ""


def rss_bytes(pid):
    """The process's resident memory in bytes (VmRSS of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class LoadTally:
    """What a load run counts, from any client thread: answers equal to the
    reference, failed calls, wrong answers, calls the server shed (busy:
    RESOURCE_EXHAUSTED, retried), the work the right answers did (rows,
    elements: `unit`), and each answer against the first of its case, bit
    for bit (the same request gives the same bits)."""

    def __init__(self, unit):
        self.unit = unit
        self.counts = {"ok": 0, "failed": 0, "wrong": 0, "busy": 0, "work": 0}
        self.errors = []
        self._first = {}
        self._lock = threading.Lock()

    def busy(self):
        with self._lock:
            self.counts["busy"] += 1

    def failed(self, what):
        with self._lock:
            self.counts["failed"] += 1
            self.errors.append(what)

    def answered(self, case, why, bits, work):
        """`why`: None where the answer is the reference's, else what
        differs; `bits`: the answer's bytes."""
        with self._lock:
            seen = self._first.setdefault(case, bits)
            if why is None and seen != bits:
                why = "not the bits of the case's first answer"
            if why is None:
                self.counts["ok"] += 1
                self.counts["work"] += work
            else:
                self.counts["wrong"] += 1
                self.errors.append(f"{case}: {why}")

    def report(self, backend, clients, cases, seconds, peak):
        """Prints the first errors and the totals; 1 on any failure or
        wrong answer, else 0."""
        c = self.counts
        for e in self.errors[:10]:
            print("  " + e)
        print(f"{backend}: {clients} clients, {cases} cases, {seconds:.1f} s: {c['ok']} ok, {c['failed']} failed, "
              f"{c['wrong']} wrong, {c['busy']} busy (retried), {c['work'] / seconds / 1e6:.1f} M {self.unit}/s, "
              f"server peak RSS {peak / 2**30:.2f} GiB")
        return 1 if c["failed"] or c["wrong"] else 0


def native_states():
    """Whether the client's native module (tally._states, which merges and
    finishes the holistic functions' and sketches' partial states) is
    there: it is built only where pybind11 is."""
    try:
        import tally._states  # noqa: F401 (whether it is there)
    except ImportError:
        return False
    return True


def load_arguments(description, proto_root):
    """The options every load script takes (--server, --backend, --clients,
    --seconds, --proto, --server_args), on a parser for its own."""
    import argparse
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--proto", default=proto_root)
    p.add_argument("--server_args", default="", help="extra tally-server flags, space-separated")
    return p


def start_load_server(args, pb, *flags):
    """A tally-server for a load script: its --backend, no health port,
    `flags`, then its --server_args."""
    extra = [f"--backend={args.backend}", "--health_listen=", *flags] + args.server_args.split()
    return TallyServer(args.server, pb, [a for a in extra if a])


def run_load(server, clients, client, stop):
    """Runs client(i) for i in range(clients), each in a thread of its own
    until the monotonic time `stop`, while watching the server's resident
    memory; returns the seconds it all took and the peak RSS in bytes."""
    peak = [0]

    def watch():
        while time.monotonic() < stop:
            peak[0] = max(peak[0], rss_bytes(server.process.pid))
            time.sleep(0.5)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    threads.append(threading.Thread(target=watch))
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0, peak[0]


def client_test_main(module_globals):
    """A ClientTestCase module's entry point: TALLY_SERVER_BINARY
    [--backend=B] from the command line into the module's SERVER_BINARY and
    BACKEND, its seed printed, then its tests."""
    module_globals["SERVER_BINARY"] = sys.argv[1]
    for arg in sys.argv[2:]:
        if arg.startswith("--backend="):
            module_globals["BACKEND"] = arg.split("=", 1)[1]
    print(f"TALLY_TEST_SEED={module_globals['SEED']}", flush=True)
    unittest.main(argv=[sys.argv[0]], verbosity=2)


class ClientTestCase(unittest.TestCase):
    """A tally-server for the test class, a tally.Client on it (`client`, at
    `target`) and a seeded generator per test (`rng`). The test module names
    them in its globals SERVER_BINARY, BACKEND and SEED (set from its command
    line before unittest.main) and its `tally_pb2`."""

    @classmethod
    def setUpClass(cls):
        import tally  # the package under test, on the tests' PYTHONPATH only
        module = sys.modules[cls.__module__]
        cls.server = TallyServer(module.SERVER_BINARY, module.tally_pb2, [f"--backend={module.BACKEND}"])
        cls.target = f"127.0.0.1:{cls.server.port}"
        cls.client = tally.Client(cls.target, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        import numpy as np
        self.rng = np.random.default_rng([sys.modules[type(self).__module__].SEED, hash(self.id()) % (2**32)])


def readme_python_block(heading, port):
    """The first ```python block after the README line `heading` (the whole
    line), its client pointed at 127.0.0.1:`port`: the README's examples
    run as tests."""
    readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")).read()
    section = readme[readme.index(heading + "\n"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("\n```\n")]
    return code.replace('"localhost:50051"', repr(f"127.0.0.1:{port}"))
