"""The tally CLI and tally-server binaries end to end: every input kind, JSON
checked against numpy, errors and exit codes, --help, and SIGTERM draining.

usage: cli_test.py TALLY_CLI TALLY_SERVER PROTO_ROOT
"""
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tally_test_server import NOT_SERVING, SERVING, TallyServer, load_messages  # noqa: E402

CLI = SERVER = None
pb = None


def run(*args, timeout=120):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


class Cli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = TallyServer(SERVER, pb, ["--backend=cpu"])
        cls.target = f"--target=127.0.0.1:{cls.server.port}"
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def aggregate_json(self, *args):
        r = run("aggregate", self.target, "--json", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_npy_file_matches_numpy(self):
        x = np.random.default_rng(1).standard_normal(54321).astype(np.float32)
        np.save(self.path("x.npy"), x)
        out = self.aggregate_json(self.path("x.npy"), "--ops=sum,min,max,argmax,std:1,hist:16:-2:2")
        res = out["results"]
        self.assertAlmostEqual(res[0]["values"][0], float(np.sum(x.astype(np.float64))), delta=1e-9)
        self.assertEqual(res[1]["values"][0], float(x.min()))
        self.assertEqual(res[2]["values"][0], float(x.max()))
        self.assertEqual(res[3]["values"][0], int(np.argmax(x)))
        self.assertAlmostEqual(res[4]["values"][0], float(np.std(x.astype(np.float64), ddof=1)), delta=1e-12)
        self.assertEqual(res[5]["histograms"][0]["counts"], np.histogram(x, 16, range=(-2, 2))[0].tolist())
        self.assertEqual(out["execution"]["elements"], x.size)
        self.assertEqual(out["execution"]["backend"], "cpu")

    def test_two_dimensional_npy_is_aggregated_per_row(self):
        m = np.arange(12 * 5, dtype=np.int64).reshape(12, 5) * 3 - 50
        np.save(self.path("m.npy"), m)
        res = self.aggregate_json(self.path("m.npy"), "--ops=sum,argmin")["results"]
        self.assertEqual(res[0]["values"], m.sum(axis=1).tolist())
        self.assertEqual(res[1]["values"], m.argmin(axis=1).tolist())

    def test_raw_file_with_dtype(self):
        x = np.random.default_rng(2).integers(0, 255, 100000, endpoint=True).astype(np.uint8)
        x.tofile(self.path("x.u8"))
        res = self.aggregate_json(f"--raw={self.path('x.u8')}", "--dtype=uint8", "--ops=sum,max,count")["results"]
        self.assertEqual(res[0]["values"], [int(x.sum(dtype=np.uint64))])
        self.assertEqual(res[1]["values"], [int(x.max())])
        self.assertEqual(res[2]["values"], [x.size])

    def test_large_random_array_is_streamed_and_agrees_with_unary(self):
        streamed = self.aggregate_json("--random=3M", "--seed=5", "--ops=sum,min,argmax", "--stream=always")
        unary = self.aggregate_json("--random=3M", "--seed=5", "--ops=sum,min,argmax", "--stream=never")
        self.assertEqual(streamed["results"], unary["results"])
        self.assertEqual(streamed["execution"]["transport"], "stream")
        auto = self.aggregate_json("--random=8M", "--seed=5", "--ops=count")
        self.assertEqual(auto["execution"]["transport"], "stream")  # 32 MB: over the threshold
        self.assertEqual(auto["results"][0]["values"], [8 << 20])

    def test_nan_is_valid_json(self):
        x = np.array([1.0, np.nan, 3.0])
        np.save(self.path("nan.npy"), x)
        res = self.aggregate_json(self.path("nan.npy"), "--ops=sum,argmax")["results"]
        self.assertEqual(res[0]["values"], ["nan"])
        self.assertEqual(res[1]["values"], [1])

    def test_text_output_is_readable(self):
        r = run("aggregate", self.target, "--random=1000", "--ops=sum,hist:4:-1:1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("sum", r.stdout)
        self.assertIn("histogram", r.stdout)

    def test_server_errors_exit_nonzero_with_the_message(self):
        np.save(self.path("empty.npy"), np.zeros(0, np.float32))
        r = run("aggregate", self.target, self.path("empty.npy"), "--ops=min")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("INVALID_ARGUMENT", r.stderr)
        self.assertIn("empty", r.stderr)
        r = run("aggregate", self.target, "--random=10", "--rows=3")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("row", r.stderr)

    def test_local_errors_are_clear(self):
        r = run("aggregate", self.target, "--random=10", "--ops=sum,frobnicate")
        self.assertEqual(r.returncode, 2)
        self.assertIn("frobnicate", r.stderr)
        r = run("aggregate", self.target, self.path("does-not-exist.npy"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("does-not-exist.npy", r.stderr)
        np.save(self.path("f.npy"), np.asfortranarray(np.ones((3, 4), np.float32)))
        r = run("aggregate", self.target, self.path("f.npy"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("fortran", r.stderr.lower())
        r = run("aggregate", "--target=127.0.0.1:1", "--random=10", "--timeout=5")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("UNAVAILABLE", r.stderr)

    def test_health(self):
        r = run("health", self.target)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("SERVING", r.stdout)
        r = run("health", "--target=127.0.0.1:1", "--timeout=2")
        self.assertNotEqual(r.returncode, 0)

    def test_help_explains_itself(self):
        for args in (["--help"], ["aggregate", "--help"], ["bench", "--help"]):
            r = run(*args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("tally", r.stdout + r.stderr)
        r = subprocess.run([SERVER, "--help"], capture_output=True, text=True)
        self.assertIn("--backend", r.stdout + r.stderr)
        self.assertIn("--max_message_bytes", r.stdout + r.stderr)
        self.assertIn("--drain_grace_seconds", r.stdout + r.stderr)

    def test_bench_against_the_null_backend(self):
        null = TallyServer(SERVER, pb, ["--backend=null"])
        try:
            r = run("bench", f"--target=127.0.0.1:{null.port}", "--clients=2", "--size=64K",
                    "--requests=40", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            report = json.loads(r.stdout)
            self.assertIn("latency", json.dumps(report))
        finally:
            null.stop()


class Drain(unittest.TestCase):
    def test_sigterm_finishes_the_call_in_flight_and_exits_zero(self):
        server = TallyServer(SERVER, pb, ["--backend=cpu", "--drain_grace_seconds=20"])
        x = np.random.default_rng(3).random(1 << 16, dtype=np.float32)
        data = x.tobytes()
        sent = []

        def messages():
            spec = pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, length=x.size)
            yield pb.AggregateStreamRequest(header=pb.AggregateStreamRequest.Header(
                spec=spec, aggregations=[pb.Aggregation(op=pb.OP_COUNT)]))
            yield pb.AggregateStreamRequest(chunk=data[:4096])
            sent.append(True)
            time.sleep(1.0)  # SIGTERM arrives while the call is open
            yield pb.AggregateStreamRequest(chunk=data[4096:])

        # New calls are refused once draining starts, so NOT_SERVING is seen
        # the way load balancers see it: on a health Watch opened before.
        statuses = server.watch_health("tally.v1.Aggregator")
        self.assertEqual(next(statuses), SERVING)
        future = server.aggregate_stream.future(messages(), timeout=30)
        while not sent:
            time.sleep(0.01)
        time.sleep(0.2)
        started = time.time()
        server.process.send_signal(signal.SIGTERM)
        self.assertEqual(next(statuses), NOT_SERVING)
        self.assertEqual(future.result().results[0].uint64s.values[0], x.size)
        out = server.stop()
        # It exits once the call in flight is done, not at the end of the grace.
        self.assertLess(time.time() - started, 10, out)
        self.assertEqual(server.process.returncode, 0, out)
        self.assertIn("draining", out)


if __name__ == "__main__":
    CLI, SERVER, proto_root = sys.argv[1], sys.argv[2], sys.argv[3]
    pb = load_messages(proto_root)
    unittest.main(argv=[sys.argv[0], "-v"])
