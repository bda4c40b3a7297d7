"""The one timing rule of the group-by benchmarks."""
import time


def best(fn, reps):
    """fn()'s last answer and its fastest wall time over `reps` calls."""
    out, t = None, float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - t0)
    return out, t
