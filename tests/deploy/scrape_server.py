#!/usr/bin/env python3
"""Starts tally-server on loopback ports, prints one scrape of its /metrics,
and stops it. Usage: scrape_server.py PATH/TO/tally-server"""
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    server = sys.argv[1]
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen(
        [server, "--backend=cpu", f"--listen=127.0.0.1:{port}",
         f"--metrics_listen=127.0.0.1:{metrics_port}"],
        stdout=subprocess.DEVNULL, stderr=sys.stderr)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                sys.exit(f"tally-server exited with {proc.returncode} before serving metrics")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as r:
                    sys.stdout.write(r.read().decode())
                    return
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("tally-server served no metrics within 30 s")
                time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
