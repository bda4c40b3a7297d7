#!/usr/bin/env python3
"""Where a benchmark's CPU goes: runs a command (usually `tally bench`)
against a running tally-server and prints, over the run, the host's busy
cores, the command's own CPU, and the server's CPU by thread name (gRPC's
receive threads are `nexting_thread`, tally's workers carry the process
name), from /proc. Linux only; no profiler needed.

  scripts/cpu-probe.py SERVER_PID -- tally bench --target=... --mode=stream ...

The server's figures are core-seconds over the seconds the bench reports
as timed ("in N s"); the host's and the command's are averages over the
command's whole life (array generation included).
"""
import collections
import os
import re
import resource
import subprocess
import sys
import time


def thread_ticks(pid):
    """Clock ticks (user + system) per thread name, digits stripped."""
    ticks = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1:stat.rindex(")")].rstrip("0123456789")
        fields = stat[stat.rindex(")") + 2:].split()
        ticks[name] += int(fields[11]) + int(fields[12])
    return ticks


def host_ticks():
    """(all, idle) clock ticks of the host since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    pid, cmd = int(sys.argv[1]), sys.argv[3:]
    hz = os.sysconf("SC_CLK_TCK")
    t0, h0 = thread_ticks(pid), host_ticks()
    r0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    run = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - w0
    t1, h1 = thread_ticks(pid), host_ticks()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = run.stdout + run.stderr
    sys.stdout.write(out)
    total, idle = h1[0] - h0[0], h1[1] - h0[1]
    cmd_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(f"host: {(total - idle) / total * os.cpu_count():.1f} of {os.cpu_count()} cores busy "
          f"over {wall:.1f} s; command: {cmd_cpu / wall:.2f} cores")
    m = re.search(r" in ([0-9.]+) s", out)
    timed = float(m.group(1)) if m else wall
    spent = {k: (t1[k] - t0.get(k, 0)) / hz for k in t1}
    by_name = ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
                        if v >= 0.05)
    print(f"server: {sum(spent.values()):.2f} core-seconds over {timed:.2f} s timed "
          f"({sum(spent.values()) / timed:.2f} cores): {by_name}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
