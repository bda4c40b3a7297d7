"""tally.dask on a dask.distributed LocalCluster of 2 workers against 2
tally servers on loopback: an array in 64 chunks (2 GiB by default, 256 MiB
in the test suite) gets numpy's answers
(computed chunk-wise by Dask over the same lazily generated chunks) for
every op, rows too, prod, count_nonzero, any, all and ptp merged across
chunks, and a server that dies or stalls mid-job fails the
computation with tally.Error within its deadline instead of hanging it.
Prints the time of the array through Dask+tally and Dask+numpy.

usage: tally_dask_test.py TALLY_SERVER_BINARY
(the package, built with its stubs, on PYTHONPATH)

TALLY_DASK_SERVER_ARGS sets the servers: one per ";"-separated entry, each
its flags, e.g. one server per GPU on a host with two:
"--backend=cuda --cuda_devices=0;--backend=cuda --cuda_devices=1".
"""
import os
import signal
import sys
import threading
import time
import unittest
import warnings

import dask
import dask.array as da
import numpy as np
from distributed import Client as DaskClient
from distributed import LocalCluster

import tally
import tally.dask as td
from tally.v1 import tally_pb2
from tally_test_server import TallyServer

SERVER_BINARY = None
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**31)))
# 2 GiB of float64 in 64 chunks of 32 MiB; TALLY_DASK_ELEMENTS shrinks it
# (the test suite runs 2**25 elements).
ELEMENTS = int(os.environ.get("TALLY_DASK_ELEMENTS", 2**28))
CHUNKS = 64
# The servers' flags, one entry each (a CPU host's two by default: one
# core's worth of threads each, as 2 workers and 2 servers share its cores).
SERVER_ARGS = [entry.split() for entry in
               os.environ.get("TALLY_DASK_SERVER_ARGS", "--backend=cpu --threads=2;--backend=cpu --threads=2").split(";")
               if entry.strip()]
OPS = "sum,min,max,mean,count,sumsq,var,std:1,argmin,argmax,hist:256:-1:1"


class DaskCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.servers = [TallyServer(SERVER_BINARY, tally_pb2, args) for args in SERVER_ARGS]
        print(f"\nservers: {[' '.join(a) for a in SERVER_ARGS]}", flush=True)
        cls.targets = [f"127.0.0.1:{s.port}" for s in cls.servers]
        cls.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                   memory_limit="4GiB")
        cls.dask = DaskClient(cls.cluster)

    @classmethod
    def tearDownClass(cls):
        cls.dask.close()
        cls.cluster.close()
        for s in cls.servers:
            s.stop()

    def test_64_chunks_get_numpys_answers_for_every_op(self):
        x = da.random.RandomState(SEED).standard_normal(ELEMENTS, chunks=ELEMENTS // CHUNKS)
        self.assertEqual(x.numblocks, (CHUNKS,))

        start = time.perf_counter()
        generated = da.map_blocks(lambda b: np.zeros(1), x, chunks=(1,), dtype=np.float64).sum().compute()
        generate_seconds = time.perf_counter() - start
        self.assertEqual(generated, 0.0)

        start = time.perf_counter()
        got = td.aggregate(x, OPS, self.targets, timeout=120).compute()
        tally_seconds = time.perf_counter() - start

        # The servers share the workers' host: blocks through /dev/shm.
        start = time.perf_counter()
        got_shm = td.aggregate(x, OPS, self.targets, timeout=120, shared_memory=True).compute()
        shm_seconds = time.perf_counter() - start
        start = time.perf_counter()
        shm_sum = td.aggregate(x, "sum", self.targets, timeout=120, shared_memory=True).compute()
        shm_sum_seconds = time.perf_counter() - start

        # Before the every-op graph, so that no result of it is reused.
        start = time.perf_counter()
        sum_only = x.sum().compute()
        sum_seconds = time.perf_counter() - start

        start = time.perf_counter()
        counts, edges = da.histogram(x, bins=256, range=(-1, 1))
        (want_sum, want_min, want_max, want_mean, want_sumsq, want_var, want_std, want_argmin, want_argmax,
         want_counts, below, above, nan) = dask.compute(
            x.sum(), x.min(), x.max(), x.mean(), (x * x).sum(), x.var(), x.std(ddof=1), x.argmin(), x.argmax(),
            counts, (x < -1).sum(), (x > 1).sum(), da.isnan(x).sum())
        numpy_seconds = time.perf_counter() - start

        gib = ELEMENTS * 8 / 2**30
        print(f"\n{gib:.2f} GiB float64 in {CHUNKS} chunks, 2 workers, 2 cpu-backend servers: "
              f"generate only {generate_seconds:.1f} s, Dask+tally (every op) {tally_seconds:.1f} s, "
              f"Dask+tally through shared memory (every op) {shm_seconds:.1f} s, (sum only) {shm_sum_seconds:.1f} s, "
              f"Dask+numpy (every op) {numpy_seconds:.1f} s, Dask+numpy (sum only) {sum_seconds:.1f} s",
              flush=True)
        for op in ("count", "min", "max", "argmin", "argmax", "sum"):
            self.assertEqual(got_shm[op], got[op], op)  # the same blocks and tree: the same bits
        self.assertEqual(shm_sum["sum"], got["sum"])

        self.assertEqual(sum_only, want_sum)  # the same chunks and tree: the same bits
        self.assertEqual(got["count"], ELEMENTS)
        self.assertEqual(got["min"], want_min)
        self.assertEqual(got["max"], want_max)
        self.assertEqual(got["argmin"], want_argmin)
        self.assertEqual(got["argmax"], want_argmax)
        h = got["hist:256:-1:1"]
        np.testing.assert_array_equal(h.counts, want_counts)
        np.testing.assert_array_equal(h.edges, edges)
        self.assertEqual((h.below, h.above, h.nan), (below, above, nan))
        # Float sums at n * eps of sum|x| (~0.8 n for normal data); the
        # moments of well-conditioned data relatively.
        bound = ELEMENTS * np.finfo(np.float64).eps * 0.8 * ELEMENTS
        self.assertLessEqual(abs(got["sum"] - want_sum), bound)
        self.assertLessEqual(abs(got["mean"] - want_mean), bound / ELEMENTS)
        np.testing.assert_allclose(got["sumsq"], want_sumsq, rtol=1e-9)
        np.testing.assert_allclose(got["var"], want_var, rtol=1e-9)
        np.testing.assert_allclose(got["std:1"], want_std, rtol=1e-9)

    def test_nan_skipping_ops_get_numpys_nan_functions(self):
        # pandas' skipna reductions: NaNs at random, a whole row and a whole
        # block all NaN; rows chunked both ways and the array whole.
        rng = np.random.default_rng(SEED + 3)
        mn = rng.standard_normal((600, 2001))
        mn[rng.random(mn.shape) < 0.1] = np.nan
        mn[17] = np.nan
        mn[100:300, 0:700] = np.nan
        m = da.from_array(mn, chunks=(200, 700))
        ops = "nansum,nanmean,nanmin,nanmax,nanargmin,nanargmax,nanvar,nanstd:1,nancount"
        want = {"nansum": np.nansum, "nanmean": np.nanmean, "nanmin": np.nanmin, "nanmax": np.nanmax,
                "nanvar": np.nanvar, "nanstd:1": lambda v, axis=None: np.nanstd(v, axis=axis, ddof=1),
                "nancount": lambda v, axis=None: np.count_nonzero(~np.isnan(v), axis=axis)}
        whole = td.aggregate(da.from_array(mn.reshape(-1), chunks=200_003), ops, self.targets).compute()
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for op, f in want.items():
                np.testing.assert_allclose(whole[op], f(mn), rtol=1e-9, err_msg=op)
            self.assertEqual(whole["nanargmin"], np.nanargmin(mn))
            self.assertEqual(whole["nanargmax"], np.nanargmax(mn))
            rows = td.aggregate(m, "nansum,nanmean,nanmin,nanmax,nanvar,nancount", self.targets).compute()
            for op in ("nansum", "nanmean", "nanmin", "nanmax", "nanvar", "nancount"):
                np.testing.assert_allclose(rows[op], want[op](mn, axis=1), rtol=1e-9, err_msg=op)
        self.assertTrue(np.isnan(rows["nanmin"][17]))  # the all-NaN row: NaN, as numpy (which warns)
        with self.assertRaises((tally.Error, ValueError)):
            td.aggregate(m, "nanargmin", self.targets).compute()  # numpy raises for an all-NaN row

    def test_rows_chunked_both_ways_get_numpys_answers(self):
        m = da.random.RandomState(SEED + 1).randint(-40, 40, size=(3000, 5001), chunks=(700, 1300)).astype(np.int32)
        got = td.aggregate(m, "sum,min,argmin,argmax,var,hist:8:-40:40", self.targets).compute()
        mn = m.compute()
        np.testing.assert_array_equal(got["sum"], mn.sum(axis=1))
        np.testing.assert_array_equal(got["min"], mn.min(axis=1))
        np.testing.assert_array_equal(got["argmin"], mn.argmin(axis=1))
        np.testing.assert_array_equal(got["argmax"], mn.argmax(axis=1))
        np.testing.assert_allclose(got["var"], mn.var(axis=1), rtol=1e-12)
        for i in (0, 1234, 2999):
            np.testing.assert_array_equal(got["hist:8:-40:40"].counts[i], np.histogram(mn[i], 8, (-40, 40))[0])

    def test_products_counts_and_ptp_merge_across_chunks(self):
        """prod, count_nonzero, any, all and ptp from each chunk's states,
        merged on the workers (the states pickled between processes):
        integer products that wrap modulo 2^64 exactly as numpy's, float
        products to rounding, ptp in the dtype (int32's whole range in two
        chunks wraps to -1, as numpy's), rows chunked both ways with rows
        of zeros only."""
        rng = np.random.default_rng(SEED + 4)
        ops = "prod,count_nonzero,any,all,ptp"
        ints = (rng.integers(-2**31, 2**31, 200_000) | 1).astype(np.int32)  # odd: the product is not 0
        ints[rng.random(ints.size) < 0.001] = 0
        ints[:50_000] |= 1  # a chunk with no zero
        ends = ints.copy()
        ends[10], ends[150_000] = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        near_one = rng.uniform(0.999, 1.001, 200_000)
        for xn in (ints, ends, ints.astype(np.uint8), near_one, near_one.astype(np.float32), ints > 0):
            got = td.aggregate(da.from_array(xn, chunks=33_333), ops if xn.dtype != np.bool_ else "prod,nnz,any,all",
                               self.targets).compute()
            msg = f"{xn.dtype}"
            if xn.dtype.kind == "f":
                self.assertEqual(got["prod"].dtype, xn.dtype, msg)
                # Multiplied in float64, rounded once to the dtype.
                np.testing.assert_allclose(got["prod"], np.prod(xn.astype(np.float64)),
                                           rtol=1e-9 if xn.dtype == np.float64 else 1e-7, err_msg=msg)
            else:
                self.assertEqual((got["prod"].dtype, got["prod"]), (np.prod(xn).dtype, np.prod(xn)), msg)
            self.assertEqual(got["count_nonzero" if xn.dtype != np.bool_ else "nnz"], np.count_nonzero(xn), msg)
            self.assertIs(got["any"], np.any(xn), msg)
            self.assertIs(got["all"], np.all(xn), msg)
            if xn.dtype != np.bool_:
                self.assertEqual((got["ptp"].dtype, got["ptp"]), (xn.dtype, np.ptp(xn)), msg)
        self.assertEqual(np.ptp(ends), -1)
        mn = rng.choice(np.array([-3, -1, 1, 3, 0], np.int16), size=(300, 5001), p=[0.25, 0.25, 0.25, 0.2498, 0.0002])
        mn[7] = 0
        rows = td.aggregate(da.from_array(mn, chunks=(70, 1300)), ops, self.targets).compute()
        np.testing.assert_array_equal(rows["prod"], np.prod(mn, axis=1))
        np.testing.assert_array_equal(rows["count_nonzero"], np.count_nonzero(mn, axis=1))
        np.testing.assert_array_equal(rows["any"], np.any(mn, axis=1))
        np.testing.assert_array_equal(rows["all"], np.all(mn, axis=1))
        np.testing.assert_array_equal(rows["ptp"], np.ptp(mn, axis=1))
        self.assertEqual(rows["ptp"].dtype, np.int16)

    def test_shared_memory_blocks_get_the_same_answers(self):
        x = da.random.RandomState(SEED + 3).standard_normal(2**23, chunks=2**20)  # 64 MiB, 8 chunks
        ops = "sum,min,argmax,var,hist:16:-3:3"
        shared = td.aggregate(x, ops, self.targets, shared_memory=True).compute()
        sent = td.aggregate(x, ops, self.targets).compute()
        for op in ("sum", "min", "argmax", "var"):
            self.assertEqual(shared[op], sent[op], op)  # the same bytes, the same merge tree
        np.testing.assert_array_equal(shared["hist:16:-3:3"].counts, sent["hist:16:-3:3"].counts)
        self.assertEqual(shared["argmax"], int(np.argmax(x.compute())))

    def _fails_with_tally_error(self, stop_signal, timeout):
        """Starts a job over a healthy and a doomed server, sends the doomed
        one `stop_signal` mid-job, and checks the job fails with tally.Error."""
        doomed = TallyServer(SERVER_BINARY, tally_pb2, ["--backend=cpu", "--threads=1"])
        try:
            x = da.random.RandomState(SEED + 2).standard_normal(2**26, chunks=2**20)  # 512 MiB, 64 chunks
            job = self.dask.compute(td.reduce_partials(x, "sum,argmax", [self.targets[0], f"127.0.0.1:{doomed.port}"],
                                                       timeout=timeout))
            time.sleep(1.0)
            self.assertFalse(job.done(), "the job ended before the server was stopped; make it longer")
            doomed.process.send_signal(stop_signal)
            start = time.perf_counter()
            with self.assertRaises(tally.Error) as e:
                job.result(timeout=timeout + 60)
            seconds = time.perf_counter() - start
            self.dask.cancel(job)  # the job's other chunks need not run
            return e.exception, seconds
        finally:
            if stop_signal == signal.SIGSTOP:
                doomed.process.send_signal(signal.SIGCONT)
            doomed.stop(signal.SIGKILL)

    def test_a_server_that_dies_mid_job_is_a_clear_error(self):
        error, seconds = self._fails_with_tally_error(signal.SIGKILL, timeout=60)
        print(f"\nkilled server: {error} after {seconds:.1f} s", flush=True)
        self.assertIn(error.code.name, ("UNAVAILABLE", "CANCELLED", "INTERNAL", "UNKNOWN"))
        self.assertLess(seconds, 30)

    def test_a_server_that_stalls_mid_job_fails_at_the_deadline(self):
        error, seconds = self._fails_with_tally_error(signal.SIGSTOP, timeout=5)
        print(f"\nstalled server: {error} after {seconds:.1f} s", flush=True)
        self.assertEqual(error.code.name, "DEADLINE_EXCEEDED")
        self.assertLess(seconds, 30)


if __name__ == "__main__":
    SERVER_BINARY = sys.argv[1]
    print(f"numpy {np.__version__}, dask {dask.__version__}, seed {SEED} (set TALLY_TEST_SEED to repeat)")
    unittest.main(argv=[sys.argv[0], "-v"])
