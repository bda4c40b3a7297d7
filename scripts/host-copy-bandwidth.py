#!/usr/bin/env python3
"""The host's memory copy bandwidth with 1, 2, ... processes copying at
once (numpy, 512 MiB arrays, 6 copies each after a warm-up), for reading
server benchmarks: the CUDA backend's staging copy competes with gRPC's
receive path and the client for this.

  scripts/host-copy-bandwidth.py [PROCESSES...]     (default: 1 2 4 8 16)

Prints GB/s copied (array bytes; the memory moves twice that: read + write).
"""
import multiprocessing as mp
import sys
import time

import numpy as np

COPIES = 6


def copier(results, start):
    src = np.ones(64 << 20, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # both arrays touched before timing
    start.wait()
    t0 = time.time()
    for _ in range(COPIES):
        np.copyto(dst, src)
    results.put((t0, time.time(), COPIES * src.nbytes))


def main():
    for n in [int(a) for a in sys.argv[1:]] or [1, 2, 4, 8, 16]:
        results, start = mp.Queue(), mp.Barrier(n)
        procs = [mp.Process(target=copier, args=(results, start)) for _ in range(n)]
        for p in procs:
            p.start()
        got = [results.get() for _ in procs]
        for p in procs:
            p.join()
        seconds = max(g[1] for g in got) - min(g[0] for g in got)
        print(f"{n} processes: {sum(g[2] for g in got) / seconds / 1e9:.1f} GB/s copied")


if __name__ == "__main__":
    main()
