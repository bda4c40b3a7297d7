#!/usr/bin/env python3
"""Client.groupby_nlargest and groupby_nsmallest under load: --clients
threads for --seconds, each picking a case at random (frames of 1,000 to
400,000 rows in 7 to 20,000 groups; a float column with NaN and ties, an
int32 column; n of 1 and 3) and checking every answer against pandas'
groupby(...)[column].nlargest / nsmallest, computed once per case. Prints
answers, failures and wrong answers; exits 1 on any.

    PYTHONPATH=build/client/python:tests/python python3 bench/groupby/extremes_load.py \\
        --server build/server/tally-server [--backend cpu|cuda] [--clients 64] [--seconds 30]
"""
import argparse
import os
import sys
import threading
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import tally  # noqa: E402
from tally.v1 import tally_pb2  # noqa: E402
from tally_test_server import TallyServer  # noqa: E402


def make_cases(rng):
    cases = []
    for n, groups in ((1000, 7), (50_000, 500), (400_000, 20_000)):
        df = pd.DataFrame({
            "k": rng.integers(0, groups, n),
            "v": np.where(rng.random(n) < 0.1, np.nan, rng.integers(-50, 50, n).astype(np.float64)),
            "i": rng.integers(-9, 9, n).astype(np.int32)})
        for column in ("v", "i"):
            for name in ("nlargest", "nsmallest"):
                for k in (1, 3):
                    cases.append((df, column, name, k, getattr(df.groupby("k")[column], name)(k)))
    return cases


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=30)
    args = p.parse_args()
    server = TallyServer(args.server, tally_pb2, [f"--backend={args.backend}", "--health_listen="])
    cases = make_cases(np.random.default_rng(1))
    tally_of = {"ok": 0, "failed": 0, "wrong": 0}
    lock = threading.Lock()
    stop = time.monotonic() + args.seconds

    def client(seed):
        pick = np.random.default_rng(seed)
        with tally.Client(f"127.0.0.1:{server.port}") as c:
            while time.monotonic() < stop:
                df, column, name, k, want = cases[pick.integers(len(cases))]
                try:
                    got = getattr(c, "groupby_" + name)(df, "k", column, k)
                    outcome = "ok" if got.equals(want) and got.index.equals(want.index) else "wrong"
                except Exception as e:  # noqa: BLE001 (counted and shown)
                    print(f"{name}({k}) of {column!r}: {e}", flush=True)
                    outcome = "failed"
                with lock:
                    tally_of[outcome] += 1

    try:
        threads = [threading.Thread(target=client, args=(s,)) for s in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
    print(f"{args.backend}: {args.clients} clients, {len(cases)} cases, {args.seconds:.0f} s: {tally_of['ok']} ok, "
          f"{tally_of['failed']} failed, {tally_of['wrong']} wrong")
    return 1 if tally_of["failed"] or tally_of["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
