"""The tally Python package against a server with TLS, mutual TLS and bearer
tokens: the keyword arguments ca/cert/key/token connect, and a missing token,
a missing client certificate or a plaintext channel are refused with
tally.Error carrying the gRPC code.

usage: tally_client_security_test.py TALLY_SERVER MAKE_TEST_PKI
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import numpy as np

import tally
from tally_test_server import free_port

SERVER, MAKE_PKI = sys.argv[1], sys.argv[2]


def start(args):
    port = free_port()
    process = subprocess.Popen([SERVER, f"--listen=127.0.0.1:{port}", "--metrics_listen=", "--backend=cpu", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(process.stdout.read())
        try:
            with socket_connect(port):
                return process, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("tally-server did not start")


def socket_connect(port):
    import socket
    return socket.create_connection(("127.0.0.1", port), timeout=1)


class PythonClientSecurity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tally-py-security-")
        cls.pki = os.path.join(cls.dir, "pki")
        subprocess.run(["bash", MAKE_PKI, cls.pki, "carol"], check=True)
        tokens = os.path.join(cls.dir, "tokens")
        with open(tokens, "w") as f:
            f.write(f"{hashlib.sha256(b'py-secret').hexdigest()} dana\n")
        pem = lambda name: os.path.join(cls.pki, name)  # noqa: E731
        cls.ca, cls.cert, cls.key = pem("ca.crt"), pem("client.crt"), pem("client.key")
        cls.servers = []
        # Server-side TLS with tokens; and mutual TLS required (no tokens).
        cls.tls_server, cls.tls_target = start([f"--tls_cert_file={pem('server.crt')}",
                                                f"--tls_key_file={pem('server.key')}",
                                                f"--auth_token_file={tokens}"])
        cls.mtls_server, cls.mtls_target = start([f"--tls_cert_file={pem('server.crt')}",
                                                  f"--tls_key_file={pem('server.key')}",
                                                  f"--tls_client_ca_file={cls.ca}",
                                                  "--tls_require_client_cert"])

    @classmethod
    def tearDownClass(cls):
        for p in (cls.tls_server, cls.mtls_server):
            p.terminate()
            p.wait()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def sum_of(self, client):
        x = np.arange(10, dtype=np.float32)
        return client.aggregate(x, "sum")["sum"]

    def test_tls_with_a_token(self):
        with tally.Client(self.tls_target, ca=self.ca, token="py-secret", timeout=10) as c:
            self.assertEqual(self.sum_of(c), 45.0)

    def test_a_missing_or_wrong_token_is_unauthenticated(self):
        for token in (None, "wrong"):
            with tally.Client(self.tls_target, ca=self.ca, token=token, timeout=10) as c:
                with self.assertRaises(tally.Error) as e:
                    self.sum_of(c)
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED, token)

    def test_plaintext_to_a_tls_port_fails(self):
        with tally.Client(self.tls_target, token="py-secret", timeout=3) as c:
            with self.assertRaises(tally.Error) as e:
                self.sum_of(c)
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_mutual_tls(self):
        with tally.Client(self.mtls_target, ca=self.ca, cert=self.cert, key=self.key, timeout=10) as c:
            self.assertEqual(self.sum_of(c), 45.0)
        with tally.Client(self.mtls_target, ca=self.ca, timeout=3) as c:
            with self.assertRaises(tally.Error) as e:
                self.sum_of(c)
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
