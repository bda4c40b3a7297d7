"""The tally CLI and tally-server binaries end to end: every input kind, JSON
checked against numpy, errors and exit codes, --help, SIGTERM draining, and
resident datasets (put, aggregate --dataset, datasets, rm, bench's resident
and upload modes).

usage: cli_test.py TALLY_CLI TALLY_SERVER PROTO_ROOT
"""
import json
import math
import os
import re
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

# float16 elements that take over a second to generate (three on a 2026
# laptop core), the progress bar's quiet period.
PROGRESS_ELEMENTS = "128Mi"


def run(*args, timeout=120):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


class ServerCase(unittest.TestCase):
    """A CPU server started with SERVER_ARGS for the class, and a scratch folder."""
    SERVER_ARGS = ["--backend=cpu"]

    @classmethod
    def setUpClass(cls):
        cls.server = TallyServer(SERVER, pb, cls.SERVER_ARGS)
        cls.target = f"--target=127.0.0.1:{cls.server.port}"
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()


class Cli(ServerCase):

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

    def test_offsets_npy_cuts_variable_length_segments(self):
        x = np.random.default_rng(3).integers(-100, 100, 1000).astype(np.int32)
        off = np.array([0, 0, 1, 400, 400, 1000], np.uint32)  # any integer dtype
        np.save(self.path("v.npy"), x)
        np.save(self.path("off.npy"), off)
        out = self.aggregate_json(self.path("v.npy"), f"--offsets={self.path('off.npy')}", "--ops=sum,count")
        self.assertEqual(out["results"][0]["values"], [int(x[a:b].sum()) for a, b in zip(off[:-1], off[1:])])
        self.assertEqual(out["results"][1]["values"], np.diff(off).tolist())
        self.assertEqual(out["execution"]["rows"], 5)
        np.save(self.path("bad.npy"), np.array([0, 500, 499, 1000]))
        r = run("aggregate", self.target, self.path("v.npy"), f"--offsets={self.path('bad.npy')}")
        self.assertEqual(r.returncode, 1)
        self.assertIn("spec.offsets[2] = 499", r.stderr)
        r = run("aggregate", self.target, self.path("v.npy"), f"--offsets={self.path('v.npy')}", "--rows=10")
        self.assertEqual(r.returncode, 2)
        self.assertIn("not both", r.stderr)

    def test_valid_npy_masks_elements_and_minmax_pairs(self):
        x = np.random.default_rng(4).standard_normal(1000)
        valid = np.random.default_rng(5).random(1000) < 0.5
        np.save(self.path("x.npy"), x)
        np.save(self.path("valid.npy"), valid)
        out = self.aggregate_json(self.path("x.npy"), f"--valid={self.path('valid.npy')}", "--ops=count,minmax,argmax")
        res = out["results"]
        self.assertEqual(res[0]["values"], [int(valid.sum())])
        self.assertEqual(res[1]["values"], [float(x[valid].min()), float(x[valid].max())])
        self.assertEqual(res[2]["values"], [int(np.ma.masked_array(x, ~valid).argmax())])
        text = run("aggregate", self.target, self.path("x.npy"), "--ops=minmax", "--rows=100")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("minmax [10 rows]", text.stdout)
        np.save(self.path("short.npy"), valid[:-1])
        r = run("aggregate", self.target, self.path("x.npy"), f"--valid={self.path('short.npy')}")
        self.assertEqual(r.returncode, 1)
        self.assertIn("has 999 entries for an array of 1000 elements", r.stderr)

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
        self.assertEqual(auto["results"][0]["values"], [8_000_000])  # M is a million, as in every flag

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

    def groupby_json(self, *args):
        r = run("groupby", self.target, "--json", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_groupby_npz_and_npy_columns_match_a_reference(self):
        rng = np.random.default_rng(7)
        n = 30000
        k = rng.integers(-3, 40, n).astype(np.int16)
        c = rng.choice(np.array([2.5, -0.0, 0.0, np.nan]), n)
        v = rng.standard_normal(n)
        v[::13] = np.nan
        for save in (np.savez, np.savez_compressed):
            save(self.path("t.npz"), k=k, c=c, v=v)
            out = self.groupby_json(self.path("t.npz"), "--by=k,c", "--agg=v:nansum,max,count,nanargmin",
                                    "--keep-na")
            keys = sorted({(int(a), float(b) if b == b else math.inf) for a, b in zip(k, np.where(c == 0, 0.0, c))})
            self.assertEqual(out["groups"], len(keys))
            got_k = out["keys"][0]["values"]
            got_c = [math.inf if x == "nan" else x for x in out["keys"][1]["values"]]
            self.assertEqual(list(zip(got_k, got_c)), keys)
            res = out["results"]
            self.assertEqual([r["column"] for r in res], ["v"] * 4)
            for g, (a, b) in enumerate(keys):
                rows = np.flatnonzero((k == a) & ((c == b) | (np.isnan(c) & (b == math.inf))))
                x = v[rows]
                self.assertAlmostEqual(res[0]["values"][g], float(np.nansum(x)), delta=1e-9)
                self.assertEqual(res[1]["values"][g], "nan")  # every group has a NaN value: max propagates it
                self.assertEqual(res[2]["values"][g], rows.size)
                self.assertEqual(res[3]["values"][g], int(rows[np.nanargmin(x)]))
        np.save(self.path("k.npy"), k)
        np.save(self.path("v.npy"), v)
        out = self.groupby_json(f"k={self.path('k.npy')}", f"v={self.path('v.npy')}", "--by=k", "--agg=v:nanmedian",
                                "--unsorted")
        first_seen = list(dict.fromkeys(k.tolist()))
        self.assertEqual(out["keys"][0]["values"], first_seen)
        for g, key in enumerate(first_seen):
            self.assertEqual(out["results"][0]["values"][g], float(np.nanmedian(v[k == key])))

    def test_groupby_text_and_errors(self):
        np.savez(self.path("s.npz"), k=np.array([2, 1, 2], np.int32), v=np.array([1.0, 2.0, 4.0]))
        r = run("groupby", self.target, self.path("s.npz"), "--by=k", "--agg=v:sum,mean")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 groups", r.stdout)
        self.assertRegex(r.stdout, r"k\s+v:sum\s+v:mean")
        self.assertRegex(r.stdout, r"\n\s*2\s+5\s+2\.5\n")
        r = run("groupby", self.target, self.path("s.npz"), "--by=nope", "--agg=v:sum")
        self.assertEqual(r.returncode, 1)
        self.assertIn("INVALID_ARGUMENT", r.stderr)
        self.assertIn("keys[0]", r.stderr)
        r = run("groupby", self.target, self.path("s.npz"), "--by=k")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--agg", r.stderr)
        # Every key NaN and dropped: no group, and the answer ends.
        np.savez(self.path("na.npz"), k=np.full(5, np.nan), v=np.arange(5.0))
        r = run("groupby", self.target, self.path("na.npz"), "--by=k", "--agg=v:min,sum", timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("0 groups", r.stdout)
        np.save(self.path("short.npy"), np.zeros(2))
        r = run("groupby", self.target, self.path("s.npz"), f"w={self.path('short.npy')}", "--by=k", "--agg=w:sum")
        self.assertEqual(r.returncode, 1)
        self.assertIn("same length", r.stderr)

    def test_health(self):
        r = run("health", self.target)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("SERVING", r.stdout)
        r = run("health", "--target=127.0.0.1:1", "--timeout=2")
        self.assertNotEqual(r.returncode, 0)

    def test_help_explains_itself(self):
        for args in (["--help"], ["aggregate", "--help"], ["bench", "--help"], ["put", "--help"],
                     ["datasets", "--help"], ["rm", "--help"]):
            r = run(*args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("tally", r.stdout + r.stderr)
        usage = run("help").stdout
        for command in ("put", "datasets", "rm", "--dataset"):
            self.assertIn(command, usage)
        self.assertIn("--range=A:B", run("aggregate", "--help").stdout)
        self.assertIn("--mode=resident", run("bench", "--help").stdout)
        r = subprocess.run([SERVER, "--help"], capture_output=True, text=True)
        self.assertIn("--backend", r.stdout + r.stderr)
        self.assertIn("--max_message_bytes", r.stdout + r.stderr)
        self.assertIn("--drain_grace_seconds", r.stdout + r.stderr)

    def test_help_states_every_flag_its_default_and_the_suffixes(self):
        connection = ["--target=HOST:PORT", "(default 127.0.0.1:50051)", "--tls", "--token-file=FILE"]
        for command, words in (
                ("aggregate", ["FILE.npy", "--ops=LIST", "(default sum,min,max,mean,count)", "--random=N",
                               "--range=A:B", "--stream-threshold=BYTES", "(default 4Mi)", "--json", "Exit status"]),
                ("put", ["NAME", "--random=N", "--ttl=SECONDS", "--chunk=BYTES", "(default 4Mi)", "--replace"]),
                ("bench", ["--size=BYTES", "(default 16Mi)", "--clients=N", "(default 1)", "--duration=SECONDS"]),
                ("datasets", ["--timeout=SECONDS", "(default 30)", "--json"]),
                ("rm", ["NAME", "--timeout=SECONDS"]),
                ("regions", ["--unregister=NAMES"]),
                ("health", ["--service=NAME", "(default 5)"])):
            r = run(command, "--help")
            self.assertEqual(r.returncode, 0, r.stderr)
            text = " ".join(r.stdout.split())  # as read, whatever the line breaks
            for word in words + connection:
                self.assertIn(word, text, command)
            if command in ("aggregate", "put", "bench"):  # the commands with sizes and counts
                self.assertIn("K, M, G, T are powers of 1000; Ki, Mi, Gi, Ti powers of 1024", text, command)
        self.assertIn("64Mi = 67108864", run("help").stdout)

    def test_flags_take_their_value_after_equals_or_a_space(self):
        spaced = run("aggregate", "--target", self.target[len("--target="):], "--random", "1000", "--seed", "3",
                     "--ops", "sum,max", "--json")
        self.assertEqual(spaced.returncode, 0, spaced.stderr)
        joined = self.aggregate_json("--random=1000", "--seed=3", "--ops=sum,max")
        self.assertEqual(json.loads(spaced.stdout)["results"], joined["results"])
        r = run("health", "--target", self.target[len("--target="):], "--timeout", "5")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unknown_and_ambiguous_flags_are_refused_naming_them(self):
        for args, words in ((["aggregate", "--random=10", "--op=sum"], ["unknown flag --op", "did you mean --ops?"]),
                            (["aggregate", "--random=10", "--str=always"], ["--stream or --stream-threshold"]),
                            (["aggregate", "--random=10", "--json", "false"], ["--json takes no separate value"]),
                            (["aggregate", "--random=10", "--ops", "--json"], ["--ops needs a value"]),
                            (["aggregate", "--random=10", "--ops=sum", "--ops=max"], ["--ops", "more than once"]),
                            (["aggregate", "--random=4X"], ["--random", "powers of 1000", "powers of 1024"]),
                            (["aggregate", "--random=10", "--chunk=1M", "--shm"], ["--chunk is not used with --shm"]),
                            (["bench", "--size=1.0001K"], ["--size", "whole"]),
                            (["bench", "--grid-sizes=4K"], ["--grid-sizes is for --mode=grid"]),
                            (["put", "x", "--random=10", "--ttl"], ["--ttl needs a value"]),
                            (["datasets", "--frobnicate"], ["unknown flag --frobnicate"]),
                            (["health", "stray"], ["unexpected argument stray"])):
            r = run(*args, self.target)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            for word in words:
                self.assertIn(word, r.stderr, args)
            self.assertIn(f"(see tally {args[0]} --help)", r.stderr, args)

    def test_progress_is_shown_while_random_data_is_generated(self):
        # A terminal on stderr, and an array that takes over a second to
        # generate; the unreachable server fails the call only after.
        import pty
        master, terminal = pty.openpty()
        try:
            p = subprocess.Popen([CLI, "aggregate", f"--random={PROGRESS_ELEMENTS}", "--dtype=float16",
                                  "--target=127.0.0.1:1", "--timeout=1"],
                                 stdout=subprocess.DEVNULL, stderr=terminal)
            os.close(terminal)
            seen = b""
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the tool has exited and closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            self.assertEqual(p.wait(timeout=120), 1)
        finally:
            os.close(master)
        self.assertIn(b"generating [", seen)
        self.assertIn(b"UNAVAILABLE", seen)

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

    def test_shm_gives_the_sent_answer_and_cleans_up(self):
        arrays = lambda: {f for f in os.listdir("/dev/shm") if f.endswith("-array")}  # noqa: E731
        before = arrays()
        sent = self.aggregate_json("--random=300K", "--seed=9", "--ops=sum,argmax,hist:8:-1:1")
        shared = self.aggregate_json("--random=300K", "--seed=9", "--ops=sum,argmax,hist:8:-1:1", "--shm")
        self.assertEqual(shared["execution"]["transport"], "shm")
        self.assertEqual(shared["results"], sent["results"])
        r = run("regions", self.target)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("0 regions", r.stdout)  # unregistered at the end
        self.assertEqual(arrays() - before, set())  # the object is removed too

    def test_groupby_shm_gives_the_sent_answer_and_cleans_up(self):
        arrays = lambda: {f for f in os.listdir("/dev/shm") if f.endswith("-array")}  # noqa: E731
        before = arrays()
        rng = np.random.default_rng(11)
        n = 200003
        np.savez(self.path("g.npz"), k=rng.integers(-5, 300, n).astype(np.int32), v=rng.standard_normal(n))
        np.save(self.path("w.npy"), rng.integers(0, 9, n).astype(np.uint8))
        args = (self.path("g.npz"), f"w={self.path('w.npy')}", "--by=k", "--agg=v:sum,nanmean,argmax,median",
                "--agg=w:count_nonzero,max")
        sent = self.groupby_json(*args)
        shared = self.groupby_json(*args, "--shm")
        self.assertEqual(shared["groups"], sent["groups"])
        self.assertEqual(shared["keys"], sent["keys"])
        self.assertEqual(shared["results"], sent["results"])
        r = run("regions", self.target)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("0 regions", r.stdout)  # unregistered at the end
        self.assertEqual(arrays() - before, set())  # the objects are removed too

    def test_groupby_streams_a_table_past_the_message_limit(self):
        # 18 MB of columns, past the 17 MiB a 1 MiB --max_message_bytes lets
        # one message carry: sent in chunks (GroupByStream).
        small = TallyServer(SERVER, pb, ["--backend=cpu", "--max_message_bytes=1048576"])
        self.addCleanup(small.stop)
        rng = np.random.default_rng(17)
        n = 1_500_000
        k = rng.integers(0, 1000, n).astype(np.int32)
        v = rng.standard_normal(n)
        np.savez(self.path("big.npz"), k=k, v=v)
        r = run("groupby", f"--target=127.0.0.1:{small.port}", "--json", self.path("big.npz"), "--by=k",
                "--agg=v:sum,count,max")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["keys"][0]["values"], list(range(1000)))
        sums, counts, highs = out["results"][0]["values"], out["results"][1]["values"], out["results"][2]["values"]
        np.testing.assert_allclose(sums, np.bincount(k, weights=v, minlength=1000), rtol=1e-12, atol=1e-9)
        self.assertEqual(counts, np.bincount(k, minlength=1000).tolist())
        want = np.full(1000, -np.inf)
        np.maximum.at(want, k, v)
        self.assertEqual(highs, want.tolist())

    def test_regions_lists_and_unregisters(self):
        from multiprocessing import shared_memory
        m = shared_memory.SharedMemory(create=True, size=4096)
        try:
            register = self.server.channel.unary_unary(
                "/tally.v1.SharedMemory/RegisterHostRegion",
                request_serializer=pb.RegisterHostRegionRequest.SerializeToString,
                response_deserializer=pb.RegionInfo.FromString)
            register(pb.RegisterHostRegionRequest(name="cli-region", shm_name="/" + m.name, byte_size=4096))
            r = run("regions", self.target)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("cli-region", r.stdout)
            self.assertIn("1 region, 4096 bytes registered", r.stdout)
            r = run("regions", self.target, "--unregister=cli-region")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("unregistered cli-region", r.stdout)
            r = run("regions", self.target, "--unregister=cli-region")
            self.assertEqual(r.returncode, 1)
            self.assertIn("NOT_FOUND", r.stderr)
            self.assertEqual(run("regions", self.target, "--unregister=").returncode, 2)
        finally:
            m.close()
            m.unlink()

    def test_bench_grid_prints_one_row_per_cell_with_ratios(self):
        null = TallyServer(SERVER, pb, ["--backend=null"])
        try:
            r = run("bench", "--mode=grid", f"--targets=null=127.0.0.1:{null.port},cpu={self.target[9:]}",
                    "--grid-sizes=4K,128M", "--grid-clients=1,2", "--ops=sum;max,hist:16:-1:1", "--requests=4")
            self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
            rows = [line for line in r.stdout.splitlines() if line.startswith("| 4K") or line.startswith("| 128M")]
            self.assertEqual(len(rows), 2 * 2 * 2, r.stdout)  # sizes x op lists x client counts
            # One ratio per row (cpu's to null), then which backend answered.
            self.assertTrue(all(len(re.findall(r"\d+\.\d+x cpu", line)) == 1 for line in rows), r.stdout)
            self.assertIn("| 128M | stream | max,hist:16:-1:1 | 2 |", r.stdout)
            bad = run("bench", "--mode=grid", "--grid-sizes=1M")
            self.assertEqual(bad.returncode, 2)
            self.assertIn("--targets", bad.stderr)
            # A target that does not serve is named before any cell runs.
            started = time.time()
            down = run("bench", "--mode=grid", f"--targets=null=127.0.0.1:{null.port},gone=127.0.0.1:1",
                       "--grid-sizes=4K", "--grid-clients=1", "--duration=5")
            self.assertEqual(down.returncode, 1, down.stdout)
            self.assertIn("--targets: gone=127.0.0.1:1 does not serve", down.stderr)
            self.assertNotIn("| 4K", down.stdout)
            self.assertLess(time.time() - started, 5)
        finally:
            null.stop()


LIMIT = 64 << 20  # the Datasets server's --max_dataset_bytes


class Datasets(ServerCase):
    """Resident datasets through the CLI against a CPU server, whose results
    are bitwise those of sending the same array (tally.proto says so)."""
    SERVER_ARGS = ["--backend=cpu", f"--max_dataset_bytes={LIMIT}"]

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def ok(self, *args):
        r = run(*args, self.target)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def json_of(self, *args):
        return json.loads(self.ok(*args, "--json").stdout)

    def query(self, *args):
        return self.json_of("aggregate", *args)["results"]

    def fails(self, code, *args):
        r = run(*args, self.target)
        self.assertEqual(r.returncode, code, r.stdout + r.stderr)
        return r.stderr

    def test_put_and_aggregate_match_numpy_whole_and_in_ranges(self):
        x = np.random.default_rng(11).standard_normal(100_003).astype(np.float32)
        np.save(self.path("x.npy"), x)
        put = self.json_of("put", "x", self.path("x.npy"))
        self.assertEqual(put["dataset"]["name"], "x")
        self.assertEqual(put["dataset"]["dtype"], "float32")
        self.assertEqual(put["dataset"]["length"], x.size)
        self.assertEqual(put["dataset"]["bytes"], x.nbytes)
        self.assertEqual(put["dataset"]["place"], "host")
        self.assertEqual(put["row_length"], 0)
        ops = "--ops=sum,min,max,argmin,argmax,count,std:1,hist:16:-2:2"
        for flag, part in ((None, x), ("--range=1000:51000", x[1000:51000]), ("--range=99000:", x[99000:]),
                           ("--range=:7", x[:7]), ("--range=1K:2K", x[1000:2000]),
                           ("--range=1Ki:2Ki", x[1024:2048])):
            res = self.query("--dataset=x", ops, *([flag] if flag else []))
            self.assertAlmostEqual(res[0]["values"][0], float(np.sum(part, dtype=np.float64)), delta=1e-9, msg=flag)
            self.assertEqual(res[1]["values"], [float(part.min())], flag)
            self.assertEqual(res[2]["values"], [float(part.max())], flag)
            self.assertEqual(res[3]["values"], [int(np.argmin(part))], flag)  # from the range's start
            self.assertEqual(res[4]["values"], [int(np.argmax(part))], flag)
            self.assertEqual(res[5]["values"], [part.size], flag)
            self.assertAlmostEqual(res[6]["values"][0], float(np.std(part.astype(np.float64), ddof=1)),
                                   delta=1e-12, msg=flag)
            self.assertEqual(res[7]["histograms"][0]["counts"], np.histogram(part, 16, range=(-2, 2))[0].tolist())
        # The cpu backend answers a dataset bitwise as it answers the array sent.
        sent = self.query(self.path("x.npy"), ops)
        self.assertEqual(self.query("--dataset=x", ops), sent)
        out = self.json_of("aggregate", "--dataset=x", "--range=10:20", "--ops=count")
        self.assertEqual(out["execution"]["transport"], "dataset")
        self.assertEqual(out["execution"]["elements"], 10)
        text = self.ok("aggregate", "--dataset=x", "--ops=sum,hist:4:-1:1").stdout
        self.assertIn("sum", text)
        self.assertIn("(dataset)", text)

    def test_two_dimensional_npy_keeps_its_rows(self):
        m = np.random.default_rng(12).integers(-1000, 1000, (40, 25)).astype(np.int64)
        np.save(self.path("m.npy"), m)
        put = self.ok("put", "m", self.path("m.npy")).stdout
        self.assertIn("1000 elements", put)
        self.assertIn("in rows of 25", put)
        res = self.query("--dataset=m", "--ops=sum,argmin,max")  # per row, as uploaded
        self.assertEqual(res[0]["values"], m.sum(axis=1).tolist())
        self.assertEqual(res[1]["values"], m.argmin(axis=1).tolist())
        self.assertEqual(res[2]["values"], m.max(axis=1).tolist())
        self.assertEqual(self.query("--dataset=m", "--rows=0", "--ops=sum")[0]["values"], [int(m.sum())])
        res = self.query("--dataset=m", "--range=250:500", "--rows=50", "--ops=sum")
        self.assertEqual(res[0]["values"], m.reshape(-1)[250:500].reshape(5, 50).sum(axis=1).tolist())
        put = self.json_of("put", "m2", self.path("m.npy"))
        self.assertEqual((put["row_length"], put["dataset"]["row_length"]), (25, 25))
        listed = {d["name"]: d for d in self.json_of("datasets")["datasets"]}
        self.assertEqual(listed["m"]["row_length"], 25)

    def test_dataset_range_cut_by_offsets(self):
        x = np.random.default_rng(14).standard_normal(5000)
        np.save(self.path("d.npy"), x)
        self.ok("put", "d", self.path("d.npy"))
        off = np.array([0, 10, 10, 2500, 3000], np.int64)  # over the range [1000, 4000)
        np.save(self.path("doff.npy"), off)
        res = self.query("--dataset=d", "--range=1000:4000", f"--offsets={self.path('doff.npy')}",
                         "--ops=mean,sum,count")
        part = x[1000:4000]
        slices = [part[a:b] for a, b in zip(off[:-1], off[1:])]
        self.assertEqual(res[2]["values"], [s.size for s in slices])
        means = res[0]["values"]
        self.assertEqual(means[1], "nan")
        for got, s in zip(means[:1] + means[2:], slices[:1] + slices[2:]):
            self.assertAlmostEqual(got, float(np.mean(s)), delta=1e-12)
        self.assertIn("segment 1", self.fails(1, "aggregate", "--dataset=d", "--range=1000:4000",
                                              f"--offsets={self.path('doff.npy')}", "--ops=argmax"))

    def test_dataset_range_with_a_mask(self):
        x = np.arange(5000, dtype=np.int64)
        np.save(self.path("dm.npy"), x)
        self.ok("put", "dm", self.path("dm.npy"))
        valid = (np.arange(3000) % 3) == 0  # over the range [1000, 4000)
        np.save(self.path("dvalid.npy"), valid)
        res = self.query("--dataset=dm", "--range=1000:4000", f"--valid={self.path('dvalid.npy')}", "--ops=sum,count")
        self.assertEqual(res[0]["values"], [int(x[1000:4000][valid].sum())])
        self.assertEqual(res[1]["values"], [int(valid.sum())])
        self.assertIn("validity: 375 bytes, but a mask of 2000 elements", self.fails(
            1, "aggregate", "--dataset=dm", "--range=1000:3000", f"--valid={self.path('dvalid.npy')}"))

    def test_raw_and_random_inputs(self):
        x = np.random.default_rng(13).integers(0, 255, 70_000, endpoint=True).astype(np.uint8)
        x.tofile(self.path("x.u8"))
        self.ok("put", "raw", f"--raw={self.path('x.u8')}", "--dtype=uint8")
        res = self.query("--dataset=raw", "--ops=sum,max,count")
        self.assertEqual(res[0]["values"], [int(x.sum(dtype=np.uint64))])
        self.assertEqual(res[1]["values"], [int(x.max())])
        self.assertEqual(res[2]["values"], [x.size])
        # --random makes the same array for put as for aggregate.
        self.ok("put", "rnd", "--random=300K", "--dtype=float64", "--seed=9")
        sent = self.query("--random=300K", "--dtype=float64", "--seed=9", "--ops=sum,var,argmax")
        self.assertEqual(self.query("--dataset=rnd", "--ops=sum,var,argmax"), sent)

    def test_range_and_rows_take_the_same_decimal_suffixes(self):
        # --range=1M:2M is a million elements, which --rows=1K cuts evenly.
        self.ok("put", "two-million", "--random", "2M", "--dtype", "int32", "--seed", "4")
        out = self.json_of("aggregate", "--dataset", "two-million", "--range", "1M:2M", "--rows", "1K",
                           "--ops", "count")
        self.assertEqual(out["execution"]["elements"], 1_000_000)
        self.assertEqual(out["results"][0]["values"], [1000] * 1000)
        sent = self.query("--random=2M", "--dtype=int32", "--seed=4", "--ops=sum,argmax")
        self.assertEqual(self.query("--dataset=two-million", "--ops=sum,argmax"), sent)
        self.ok("rm", "two-million")

    def test_datasets_lists_each_dataset_and_the_place_usage(self):
        self.ok("put", "list-a", "--random=1000", "--ttl=3600")
        self.ok("put", "list-b", "--random=2000", "--dtype=int32")
        self.ok("aggregate", "--dataset=list-a", "--ops=sum")
        self.ok("aggregate", "--dataset=list-a", "--ops=max")
        listing = self.json_of("datasets")
        by_name = {d["name"]: d for d in listing["datasets"]}
        a, b = by_name["list-a"], by_name["list-b"]
        self.assertEqual((a["dtype"], a["length"], a["bytes"], a["place"]), ("float32", 1000, 4000, "host"))
        self.assertEqual((b["dtype"], b["length"], b["bytes"]), ("int32", 2000, 8000))
        self.assertGreater(b["version"], a["version"])
        self.assertAlmostEqual(a["expires_unix_seconds"] - a["created_unix_seconds"], 3600, delta=1)
        self.assertEqual(b["expires_unix_seconds"], 0)
        self.assertEqual(a["queries"], 2)
        self.assertEqual(b["queries"], 0)
        self.assertEqual([d["name"] for d in listing["datasets"]], sorted(by_name))
        [host] = listing["places"]
        self.assertEqual(host["place"], "host")
        self.assertEqual(host["limit_bytes"], LIMIT)
        self.assertEqual(host["datasets"], len(listing["datasets"]))
        # Each dataset is charged 4 KiB beyond its bytes (DatasetStore::kOverheadBytes).
        self.assertEqual(host["bytes"], sum(d["bytes"] + 4096 for d in listing["datasets"]))

        text = self.ok("datasets").stdout
        for word in ("NAME", "DTYPE", "SHAPE", "BYTES", "PLACE", "VERSION", "EXPIRES", "QUERIES",
                     "list-a", "list-b", "LIMIT", "64.0 MiB"):
            self.assertIn(word, text)
        self.assertRegex(text, r"list-a .* in (1h00m|59m[0-5][0-9]s) ")
        one = self.ok("datasets", "list-b").stdout
        self.assertIn("list-b: int32, 2000 elements", one)
        self.assertNotIn("list-a", one)
        described = self.json_of("datasets", "list-a")["datasets"]
        self.assertEqual([d["name"] for d in described], ["list-a"])

    def test_replace_gives_a_new_version_and_new_results(self):
        self.ok("put", "rep", "--random=5000", "--seed=1")
        first = self.query("--dataset=rep", "--ops=sum")
        stderr = self.fails(1, "put", "rep", "--random=5000", "--seed=2")
        self.assertIn("ALREADY_EXISTS", stderr)
        self.assertIn("rep", stderr)
        self.assertEqual(self.query("--dataset=rep", "--ops=sum"), first)  # the old one is untouched
        old = self.json_of("datasets", "rep")["datasets"][0]["version"]
        put = self.json_of("put", "rep", "--random=6000", "--seed=2", "--replace")
        self.assertGreater(put["dataset"]["version"], old)
        self.assertEqual(put["dataset"]["length"], 6000)
        self.assertEqual(self.query("--dataset=rep", "--ops=sum"),
                         self.query("--random=6000", "--seed=2", "--ops=sum"))

    def test_groupby_over_resident_datasets(self):
        rng = np.random.default_rng(11)
        k = rng.integers(0, 30, 5000).astype(np.uint8)
        v = rng.integers(-1000, 1000, 5000).astype(np.int64)
        np.save(self.path("gk.npy"), k)
        np.save(self.path("gv.npy"), v)
        for name, path in (("gk", "gk.npy"), ("gv", "gv.npy")):
            r = run("put", self.target, name, self.path(path), "--replace")
            self.assertEqual(r.returncode, 0, r.stderr)
        r = run("groupby", self.target, "--json", "key@gk", "val@gv", "--by=key", "--agg=val:sum,min,argmax")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        keys = np.unique(k)
        self.assertEqual(out["keys"][0]["values"], keys.tolist())
        self.assertEqual(out["results"][0]["values"], [int(v[k == g].sum()) for g in keys])
        self.assertEqual(out["results"][1]["values"], [int(v[k == g].min()) for g in keys])
        self.assertEqual(out["results"][2]["values"], [int(np.flatnonzero(k == g)[np.argmax(v[k == g])]) for g in keys])
        r = run("groupby", self.target, "key@gk", "val@nope", "--by=key", "--agg=val:sum")
        self.assertEqual(r.returncode, 1)
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertIn("columns[1].dataset", r.stderr)

    def test_rm_removes_and_reports_unknown_names(self):
        self.ok("put", "gone-1", "--random=10")
        self.ok("put", "gone-2", "--random=10")
        r = run("rm", "gone-1", "no-such-dataset", "gone-2", self.target)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("removed gone-1", r.stdout)
        self.assertIn("removed gone-2", r.stdout)  # the names after a failure still go
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertIn("no-such-dataset", r.stderr)
        names = [d["name"] for d in self.json_of("datasets")["datasets"]]
        self.assertNotIn("gone-1", names)
        self.assertNotIn("gone-2", names)
        stderr = self.fails(1, "aggregate", "--dataset=gone-1", "--ops=sum")
        self.assertIn("NOT_FOUND", stderr)

    def test_server_errors_exit_1_with_code_and_message(self):
        self.ok("put", "small", "--random=100")
        for args, code, words in (
                (["aggregate", "--dataset=nope"], "NOT_FOUND", ["nope"]),
                (["aggregate", "--dataset=small", "--range=50:101"], "INVALID_ARGUMENT", ["range", "100"]),
                (["aggregate", "--dataset=small", "--range=200:"], "INVALID_ARGUMENT", ["range"]),
                (["aggregate", "--dataset=small", "--rows=7"], "INVALID_ARGUMENT", ["row_length"]),
                (["aggregate", "--dataset=small", "--range=5:5", "--ops=min"], "INVALID_ARGUMENT", ["empty"]),
                (["datasets", "nope"], "NOT_FOUND", ["nope"]),
                (["rm", "nope"], "NOT_FOUND", ["nope"]),
                (["put", "bad\tname", "--random=10"], "INVALID_ARGUMENT", ["name"]),
                (["put", "x" * 257, "--random=10"], "INVALID_ARGUMENT", ["name", "256"]),
                (["put", "too-big", "--random=20M"], "RESOURCE_EXHAUSTED", ["max_dataset_bytes"])):
            stderr = self.fails(1, *args)
            self.assertIn(code, stderr, args)
            for w in words:
                self.assertIn(w, stderr, args)
        names = [d["name"] for d in self.json_of("datasets")["datasets"]]
        self.assertNotIn("too-big", names)

    def test_bad_flags_exit_2(self):
        for args in (["aggregate", "--dataset=x", "--range=9:3"],
                     ["aggregate", "--dataset=x", "--range=a:b"],
                     ["aggregate", "--random=10", "--range=0:5"],
                     ["aggregate", "--dataset=x", "--random=10"],
                     ["aggregate", "--dataset=x", "--stream=always"],
                     ["put"],
                     ["put", "x"],
                     ["put", "x", "--random=10", "--ttl=-1"],
                     ["put", "x", "--raw=f"],
                     ["rm"],
                     ["datasets", "--frobnicate"],
                     ["bench", "--mode=resident", "--sizes=1K:1M"],
                     ["bench", "--mode=upload", "--ops=sum"],
                     ["bench", "--keep"]):
            r = run(*args, self.target)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn("--help", r.stderr, args)

    def test_ttl_expires(self):
        self.ok("put", "brief", "--random=100", "--ttl=1")
        self.ok("aggregate", "--dataset=brief", "--ops=count")
        time.sleep(2.0)
        self.assertIn("NOT_FOUND", self.fails(1, "aggregate", "--dataset=brief", "--ops=count"))

    def test_bench_resident_and_upload_modes_clean_up(self):
        report = self.json_of("bench", "--mode=resident", "--sizes=64Ki,1Mi", "--clients=2", "--requests=24",
                              "--ops=sum;min,max,argmax", "--verify", "--dataset-prefix=bench-r")
        self.assertEqual(report["mode"], "resident")
        self.assertEqual(report["requests"], {"ok": 24, "failed": 0, "wrong": 0})
        self.assertEqual([d["bytes"] for d in report["datasets"]], [64 << 10, 1 << 20])
        self.assertEqual(report["upload"]["bytes"], (64 << 10) + (1 << 20))
        # Each query reads one whole dataset; the clients alternate between them.
        self.assertEqual(report["bytes"], 12 * ((64 << 10) + (1 << 20)))
        self.assertGreater(report["gb_per_s"], 0)
        self.assertGreater(report["server_seconds"]["p50"], 0)
        names = [d["name"] for d in self.json_of("datasets")["datasets"]]
        self.assertFalse([n for n in names if n.startswith("bench-r")], names)

        text = self.ok("bench", "--mode=resident", "--size=256K", "--requests=4", "--keep",
                       "--dataset-prefix=bench-k").stdout
        self.assertIn("scan rate", text)
        self.assertIn("GB/s", text)
        self.assertIn("bench-k-0-256K", [d["name"] for d in self.json_of("datasets")["datasets"]])
        self.ok("rm", "bench-k-0-256K")

        report = self.json_of("bench", "--mode=upload", "--size=512Ki", "--clients=2", "--requests=6",
                              "--dataset-prefix=bench-u")
        self.assertEqual(report["requests"], {"ok": 6, "failed": 0})
        self.assertEqual(report["bytes"], 6 * (512 << 10))
        self.assertEqual(report["place"], "host")
        names = [d["name"] for d in self.json_of("datasets")["datasets"]]
        self.assertFalse([n for n in names if n.startswith("bench-u")], names)

        r = run("bench", "--mode=resident", "--size=80M", "--requests=1", self.target)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("RESOURCE_EXHAUSTED", r.stderr)


class ShardedDatasets(ServerCase):
    """A CPU server that cuts datasets into three shards: queries across them
    answer bitwise as the array sent does, and the listing says how the
    dataset is kept."""
    SERVER_ARGS = ["--backend=cpu", "--dataset_shards=3", "--dataset_min_shard_bytes=4096"]

    def test_a_sharded_dataset_answers_as_the_array_sent(self):
        x = np.random.default_rng(12).standard_normal(30_000).astype(np.float32)
        path = os.path.join(self.tmp.name, "s.npy")
        np.save(path, x)
        put = run("put", "s", path, self.target, "--json")
        self.assertEqual(put.returncode, 0, put.stderr)
        info = json.loads(put.stdout)["dataset"]
        self.assertEqual((info["shards"], info["place"]), (3, "host,host,host"))
        ops = "--ops=sum,min,max,argmin,argmax,std:1,hist:16:-2:2"
        for rng in ("--range=9000:11000", "--range=0:30000", "--range=19999:20001"):
            lo, hi = (int(v) for v in rng.split("=")[1].split(":"))
            q = run("aggregate", "--dataset=s", rng, "--rows=2", ops, self.target, "--json")
            self.assertEqual(q.returncode, 0, q.stderr)
            sent_path = os.path.join(self.tmp.name, "part.npy")
            np.save(sent_path, x[lo:hi])
            sent = run("aggregate", sent_path, "--rows=2", ops, self.target, "--json")
            self.assertEqual(json.loads(q.stdout)["results"], json.loads(sent.stdout)["results"], rng)
        listing = run("datasets", self.target)
        self.assertIn("in 3 shards", listing.stdout + run("datasets", "s", self.target).stdout)


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
