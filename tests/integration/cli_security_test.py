"""The tally CLI against a tally-server with TLS, optional client
certificates and bearer tokens, both real binaries: --tls, --ca, --cert,
--key, --token and --token-file, the exit codes when they are wrong, and the
server's --help for each security flag. Certificates are made for the run by
make_test_pki.sh.

usage: cli_security_test.py TALLY_CLI TALLY_SERVER
"""
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = SERVER = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args, timeout=60):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


class SecureServer(unittest.TestCase):
    """TLS with client certificates asked for (not required), a token file,
    and the certificate's name as the identity of calls without a token."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.pki = os.path.join(cls.tmp.name, "pki")
        subprocess.run(["bash", os.path.join(HERE, "make_test_pki.sh"), cls.pki, "alice"], check=True)
        cls.token_file = cls.path("token")
        with open(cls.token_file, "w") as f:
            f.write("s3cret\n")
        with open(cls.path("tokens"), "w") as f:
            f.write(f"# sha256(token) identity\n{hashlib.sha256(b's3cret').hexdigest()} bob\n")
        cls.port, cls.health_port = free_port(), free_port()
        cls.server = subprocess.Popen(
            [SERVER, "--backend=cpu", f"--listen=127.0.0.1:{cls.port}", "--metrics_listen=",
             f"--health_listen=127.0.0.1:{cls.health_port}",
             f"--tls_cert_file={cls.pki}/server.crt", f"--tls_key_file={cls.pki}/server.key",
             f"--tls_client_ca_file={cls.pki}/ca.crt", f"--auth_token_file={cls.path('tokens')}",
             "--auth_identity_from_client_cert"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 20
        # The plaintext health port needs no flags at all.
        while run("health", f"--target=127.0.0.1:{cls.health_port}", "--timeout=1").returncode != 0:
            if cls.server.poll() is not None or time.time() > deadline:
                cls.server.kill()
                raise RuntimeError("tally-server did not start:\n" + cls.server.communicate()[0])
            time.sleep(0.1)
        cls.target = f"--target=127.0.0.1:{cls.port}"
        cls.ca = f"--ca={cls.pki}/ca.crt"

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.communicate(timeout=30)
        cls.tmp.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp.name, name)

    def aggregate(self, *flags):
        return run("aggregate", self.target, "--random=1000", "--ops=sum,count", "--json", *flags)

    def test_token_file_over_tls(self):
        r = self.aggregate(self.ca, f"--token-file={self.token_file}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["results"][1]["values"], [1000])

    def test_token_flag_with_tls_and_system_roots_refused(self):
        # --tls alone trusts the system's CAs, which did not sign the test CA.
        r = self.aggregate("--tls", "--token=s3cret")
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNAVAILABLE", r.stderr)
        r = self.aggregate(self.ca, "--token=s3cret")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_wrong_or_missing_token_is_unauthenticated(self):
        for flags in ([self.ca, "--token=wrong"], [self.ca]):
            r = self.aggregate(*flags)
            self.assertEqual(r.returncode, 1, flags)
            self.assertIn("UNAUTHENTICATED", r.stderr, flags)

    def test_client_certificate_is_an_identity(self):
        r = self.aggregate(f"--cert={self.pki}/client.crt", f"--key={self.pki}/client.key", self.ca)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_plaintext_client_cannot_connect(self):
        r = self.aggregate("--token=s3cret")
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNAVAILABLE", r.stderr)

    def test_health_needs_no_token(self):
        r = run("health", self.target, self.ca)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "SERVING")

    def test_datasets_commands_carry_the_token(self):
        auth = [self.target, self.ca, f"--token-file={self.token_file}"]
        r = run("put", "secured", "--random=4096", *auth)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("datasets", "--json", *auth)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([d["name"] for d in json.loads(r.stdout)["datasets"]], ["secured"])
        r = run("rm", "secured", self.target, self.ca)  # no token
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNAUTHENTICATED", r.stderr)
        self.assertEqual(run("rm", "secured", *auth).returncode, 0)

    def test_bad_connection_flags(self):
        usage = [["--token=a", f"--token-file={self.token_file}"], [f"--cert={self.pki}/client.crt"],
                 [f"--token-file={self.path('absent')}"], ["--tls=maybe"]]
        for flags in usage:
            r = self.aggregate(*flags)
            self.assertEqual(r.returncode, 2, (flags, r.stderr))
        r = self.aggregate(f"--ca={self.path('absent.pem')}")
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot be read", r.stderr)

    def test_help_lists_the_connection_flags(self):
        for command in ("aggregate", "put", "datasets", "rm", "bench", "health"):
            out = run(command, "--help").stdout
            for flag in ("--tls", "--ca=FILE", "--cert=FILE", "--key=FILE", "--token=TOKEN", "--token-file=FILE"):
                self.assertIn(flag, out, (command, flag))


class ServerFlags(unittest.TestCase):

    def test_help_explains_every_security_flag(self):
        out = subprocess.run([SERVER, "--help"], capture_output=True, text=True).stdout
        for flag in ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "tls_require_client_cert",
                     "tls_refresh_seconds", "auth_token_file", "auth_identity_from_client_cert",
                     "quota_inflight_bytes", "quota_streams", "quota_dataset_bytes",
                     "metrics_max_identities", "health_listen", "reflection"):
            self.assertIn(f"--{flag} (", out, flag)

    def test_inconsistent_tls_flags_stop_the_server(self):
        r = subprocess.run([SERVER, "--backend=cpu", "--listen=127.0.0.1:0", "--metrics_listen=",
                            "--tls_cert_file=/nonexistent.crt"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--tls_key_file", r.stdout + r.stderr)


if __name__ == "__main__":
    CLI, SERVER = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
