#!/usr/bin/env python3
"""A real Prometheus scrapes a running tally-server.

Starts tally-server (CPU backend) and Debian's prometheus on loopback ports,
sends a known mix of Aggregate and AggregateStream calls with a gRPC client,
then asks Prometheus' HTTP API for the series and checks their labels and
values against what was sent. Also runs `promtool check metrics` on the
server's exposition text, and checks that SIGTERM drains and exits 0.

Usage: prometheus_scrape_test.py --server=PATH --prometheus=PATH
           --promtool=PATH --pb2_path=DIR
Exit 0: pass; 1: a check failed; 77: a tool is missing (ctest: skipped).
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

DEADLINE = time.monotonic() + 150  # the whole test, start to cleanup
N_OK, N_BAD, N_STREAM, LENGTH = 20, 3, 4, 1000


def skip(msg):
    print(f"SKIP: {msg}")
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, fn, timeout):
    end = min(time.monotonic() + timeout, DEADLINE)
    last = None
    while time.monotonic() < end:
        try:
            got = fn()
            if got:
                return got
            last = got
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def http_get(url, timeout=3):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prom:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr):
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = json.loads(http_get(url))
        if body.get("status") != "success":
            raise AssertionError(f"query {expr} failed: {body}")
        return body["data"]["result"]

    def value(self, expr):
        result = self.query(expr)
        if len(result) != 1:
            raise AssertionError(f"{expr}: expected one series, got {result}")
        return float(result[0]["value"][1])


failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--prometheus", default="")
    ap.add_argument("--promtool", default="")
    ap.add_argument("--pb2_path", required=True)
    a = ap.parse_args()
    if not a.prometheus or not os.access(a.prometheus, os.X_OK):
        skip("prometheus not found (Debian package prometheus)")
    if not a.promtool or not os.access(a.promtool, os.X_OK):
        skip("promtool not found (Debian package prometheus)")
    try:
        import grpc  # noqa: PLC0415
    except ImportError:
        skip("python3-grpcio not installed")
    sys.path.insert(0, a.pb2_path)
    from tally.v1 import tally_pb2 as pb  # noqa: PLC0415

    tmp = tempfile.mkdtemp(prefix="tally-prom-")
    port, metrics_port, prom_port = free_port(), free_port(), free_port()
    procs = []
    try:
        server = subprocess.Popen(
            [a.server, "--backend=cpu", f"--listen=127.0.0.1:{port}",
             f"--metrics_listen=127.0.0.1:{metrics_port}", "--drain_grace_seconds=10"],
            stdout=open(os.path.join(tmp, "server.log"), "w"), stderr=subprocess.STDOUT)
        procs.append(server)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        wait_until("tally-server's /metrics", lambda: "tally_build_info" in http_get(metrics_url), 30)

        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: tally\n    scrape_interval: 1s\n"
                "    scrape_timeout: 1s\n"
                f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n")
        prom_proc = subprocess.Popen(
            [a.prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=open(os.path.join(tmp, "prometheus.log"), "w"), stderr=subprocess.STDOUT)
        procs.append(prom_proc)
        prom = Prom(prom_port)
        wait_until("Prometheus to scrape tally (up == 1)",
                   lambda: prom.query('up{job="tally"} == 1'), 60)
        check(prom.query("tally_no_such_metric") == [], "an absent metric queries as empty")

        # Traffic: known counts of each kind.
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        aggregate = channel.unary_unary(
            "/tally.v1.Aggregator/Aggregate",
            request_serializer=pb.AggregateRequest.SerializeToString,
            response_deserializer=pb.AggregateResponse.FromString)
        stream = channel.stream_unary(
            "/tally.v1.Aggregator/AggregateStream",
            request_serializer=pb.AggregateStreamRequest.SerializeToString,
            response_deserializer=pb.AggregateResponse.FromString)
        values = [float(i % 97) for i in range(LENGTH)]
        data = struct.pack(f"<{LENGTH}d", *values)
        ops = [pb.Aggregation(op=pb.OP_SUM), pb.Aggregation(op=pb.OP_MEAN)]
        spec = pb.ArraySpec(dtype=pb.DTYPE_FLOAT64)
        for i in range(N_OK):
            r = aggregate(pb.AggregateRequest(spec=spec, data=data, aggregations=ops),
                          timeout=10, wait_for_ready=True)
            if i == 0:
                check(r.results[0].doubles.values[0] == sum(values), "Aggregate returns the sum")
        for _ in range(N_BAD):  # 7 bytes: not a whole float64
            try:
                aggregate(pb.AggregateRequest(spec=spec, data=b"\0" * 7, aggregations=ops), timeout=10)
                check(False, "a 7-byte float64 array is rejected")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT,
                      f"a 7-byte float64 array is INVALID_ARGUMENT (got {e.code()})")
        def chunks():
            header = pb.AggregateStreamRequest.Header(
                spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT64, length=LENGTH),
                aggregations=[pb.Aggregation(op=pb.OP_MAX)])
            yield pb.AggregateStreamRequest(header=header)
            yield pb.AggregateStreamRequest(chunk=data[:4001])  # splits an element
            yield pb.AggregateStreamRequest(chunk=data[4001:])
        for _ in range(N_STREAM):
            r = stream(chunks(), timeout=10)
        check(r.results[0].doubles.values[0] == max(values), "AggregateStream returns the max")
        channel.close()

        # The exposition text itself, through promtool.
        text = http_get(metrics_url)
        scrape = os.path.join(tmp, "scrape.txt")
        with open(scrape, "w") as f:
            f.write(text)
        lint = subprocess.run([a.promtool, "check", "metrics"], input=text, text=True,
                              capture_output=True, timeout=30)
        check(lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(),
              f"promtool check metrics is clean: rc {lint.returncode} {lint.stdout}{lint.stderr}")

        # What Prometheus stored, once a scrape after the traffic has landed.
        ok = 'tally_requests_total{job="tally",method="Aggregate",code="OK"}'
        wait_until("the traffic in Prometheus", lambda: prom.value(ok) >= N_OK
                   and prom.value('sum(tally_requests_total{method="AggregateStream"})') >= N_STREAM, 30)
        check(prom.value(ok) == N_OK, f"{ok} == {N_OK}")
        check(prom.value('tally_requests_total{method="Aggregate",code="INVALID_ARGUMENT"}') == N_BAD,
              f"INVALID_ARGUMENT Aggregate requests == {N_BAD}")
        check(prom.value('tally_requests_total{method="AggregateStream",code="OK"}') == N_STREAM,
              f"OK AggregateStream requests == {N_STREAM}")
        check(prom.value('sum(tally_requests_total{backend="cpu"})') == N_OK + N_BAD + N_STREAM,
              "every request counted once, with backend=\"cpu\"")
        for op in ("sum", "mean"):
            check(prom.value(f'tally_aggregations_total{{method="Aggregate",op="{op}",code="OK"}}') == N_OK,
                  f"aggregations op={op} == {N_OK}")
        check(prom.value('tally_aggregations_total{method="AggregateStream",op="max",code="OK"}') == N_STREAM,
              f"stream aggregations op=max == {N_STREAM}")
        check(prom.value('tally_request_duration_seconds_count{method="Aggregate"}') == N_OK + N_BAD,
              "duration histogram counts every Aggregate call")
        les = sorted(float(s["metric"]["le"]) for s in
                     prom.query('tally_request_duration_seconds_bucket{method="Aggregate"}'))
        check(les[0] == 50e-6 and les[-2] == 60 and math.isinf(les[-1]),
              f"duration buckets run from 50us to 60s, then +Inf: {les}")
        p99 = prom.value('histogram_quantile(0.99, sum by (le) '
                         '(tally_request_duration_seconds_bucket{method="Aggregate"}))')
        check(0 < p99 <= 60, f"p99 duration is a real number of seconds: {p99}")
        received = prom.value("tally_received_bytes_total")
        check(received >= (N_OK + N_STREAM) * len(data), f"received bytes {received} cover the arrays sent")
        elements = prom.value("tally_processed_elements_total")
        check(elements == (N_OK + N_STREAM) * LENGTH, f"elements processed {elements} == {(N_OK + N_STREAM) * LENGTH}")
        check(prom.value("sum(tally_requests_in_flight)") == 0, "no request in flight afterwards")
        check(prom.value("tally_in_flight_bytes") == 0, "no bytes in flight afterwards")
        info = prom.query('tally_build_info{backend="cpu"} == 1')
        check(len(info) == 1 and info[0]["metric"].get("version") and info[0]["metric"].get("device"),
              f"build info with version and device: {info}")
        rate = prom.query("sum(rate(tally_received_bytes_total[1m]))")
        check(len(rate) == 1, "throughput is derivable as rate(tally_received_bytes_total)")

        # Drain: SIGTERM, then exit 0 within the grace.
        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(timeout=20)
            check(rc == 0, f"tally-server exits 0 on SIGTERM (got {rc})")
        except subprocess.TimeoutExpired:
            check(False, "tally-server exits within its drain grace after SIGTERM")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if failures:
            for log in ("server.log", "prometheus.log"):
                path = os.path.join(tmp, log)
                if os.path.exists(path):
                    print(f"--- {log} (last 40 lines)")
                    print("".join(open(path).readlines()[-40:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL {e}")
        sys.exit(1)
