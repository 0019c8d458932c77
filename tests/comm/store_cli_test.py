"""End-to-end tests of `kiln store`: a client written here in Python, from the grammar in
docs/store.md, does the HMAC handshake and speaks frames to the real binary; wrong tokens are
refused; the server exits 0 on SIGTERM/SIGINT and 2 without a token."""
import hashlib
import hmac
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN  # noqa: E402

TOKEN = "e2e-store-token-7c1d"
PURPOSE = b"kiln-store/1"
TIMEOUT_S = 10  # every socket operation; a hang fails the test instead of stalling ctest

# docs/store.md: the handshake.
AUTH_MAGIC = b"KLNA"
SERVER_HELLO, CLIENT_HELLO, VERDICT = 1, 2, 3
ACCEPTED, BAD_PROOF = 0, 1
# docs/store.md: the frames.
FRAME_MAGIC = 0x534E4C4B
SET, GET, RESPONSE = 1, 2, 128
STATUS_OK, STATUS_TIMEOUT = 0, 4


def env_without_token(**extra):
    env = {k: v for k, v in os.environ.items() if k != "KILN_JOB_TOKEN"}
    env.update(extra)
    return env


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def proof(token, role, nonce_server, nonce_client):
    return hmac.new(token.encode(), PURPOSE + role + nonce_server + nonce_client,
                    hashlib.sha256).digest()


def handshake(sock, token):
    """Runs the client side; returns (verdict flag, whether the server's proof is right)."""
    hello = recv_exact(sock, 40)
    assert hello[:4] == AUTH_MAGIC and hello[4] == 1 and hello[5] == SERVER_HELLO, hello[:8]
    nonce_server = hello[8:]
    nonce_client = os.urandom(32)
    sock.sendall(AUTH_MAGIC + bytes([1, CLIENT_HELLO, 0, 0]) + nonce_client +
                 proof(token, b"client", nonce_server, nonce_client))
    verdict = recv_exact(sock, 40)
    assert verdict[:4] == AUTH_MAGIC and verdict[5] == VERDICT, verdict[:8]
    server_ok = hmac.compare_digest(verdict[8:],
                                    proof(token, b"server", nonce_server, nonce_client))
    return verdict[6], server_ok


def string(b):
    return struct.pack("<I", len(b)) + b


def frame(kind, payload):
    body = struct.pack("<IBB", FRAME_MAGIC, 1, kind) + payload
    return struct.pack("<I", len(body)) + body


def read_response(sock):
    (length,) = struct.unpack("<I", recv_exact(sock, 4))
    body = recv_exact(sock, length)
    magic, version, kind, code = struct.unpack_from("<IBBB", body)
    assert (magic, version, kind) == (FRAME_MAGIC, 1, RESPONSE), (magic, version, kind)
    at = 7
    (n,) = struct.unpack_from("<I", body, at)
    message = body[at + 4:at + 4 + n].decode()
    at += 4 + n
    (n,) = struct.unpack_from("<I", body, at)
    value = body[at + 4:at + 4 + n]
    at += 4 + n
    (number,) = struct.unpack_from("<q", body, at)
    assert at + 8 == len(body), "no trailing bytes"
    return code, message, value, number


class StoreProcess:
    """A `kiln store --json --port 0` child; use as a context manager."""

    def __init__(self, *extra_args, env=None):
        self.args = [KILN_BIN, "store", "--json", "--port", "0", *extra_args]
        self.env = env if env is not None else env_without_token(KILN_JOB_TOKEN=TOKEN)
        self.proc = None
        self.port = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=self.env)
        line = self.proc.stdout.readline()  # "serving", printed once the port is bound
        if not line:
            raise AssertionError("kiln store exited before serving: " + self.proc.stderr.read())
        event = json.loads(line)
        assert event["event"] == "serving", event
        self.port = event["port"]
        return self

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S)

    def stop(self, sig=signal.SIGTERM, timeout_s=10):
        """Sends `sig`; returns the exit code (SIGKILL and failure if it does not exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"kiln store ignored signal {sig} for {timeout_s} s")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


class StoreCliTest(unittest.TestCase):
    def test_a_client_with_the_token_sets_and_gets(self):
        with StoreProcess() as store, store.connect() as sock:
            flag, server_ok = handshake(sock, TOKEN)
            self.assertEqual(flag, ACCEPTED)
            self.assertTrue(server_ok, "the server proved it holds the token")
            sock.sendall(frame(SET, string(b"job/1/rank/0") + string(b"10.0.0.1:29500")))
            self.assertEqual(read_response(sock), (STATUS_OK, "", b"", 0))
            sock.sendall(frame(GET, string(b"job/1/rank/0") + struct.pack("<q", 0)))
            self.assertEqual(read_response(sock), (STATUS_OK, "", b"10.0.0.1:29500", 0))
            sock.sendall(frame(GET, string(b"job/1/rank/1") + struct.pack("<q", 50)))
            code, message, _, _ = read_response(sock)
            self.assertEqual(code, STATUS_TIMEOUT)
            self.assertIn("'job/1/rank/1'", message)
            self.assertEqual(store.stop(), 0)

    def test_a_wrong_token_is_refused_and_good_clients_still_served(self):
        with StoreProcess() as store:
            with store.connect() as bad:
                flag, server_ok = handshake(bad, "not-the-token")
                self.assertEqual(flag, BAD_PROOF)
                self.assertFalse(server_ok, "a rejection carries no proof")
                self.assertEqual(bad.recv(1), b"", "the server closes a rejected connection")
            with store.connect() as good:
                self.assertEqual(handshake(good, TOKEN), (ACCEPTED, True))
            self.assertEqual(store.stop(), 0)
            logs = [json.loads(l) for l in store.proc.stderr.read().splitlines()]
            self.assertIn("store rejected a client", [l["msg"] for l in logs])
            self.assertNotIn(TOKEN, json.dumps(logs), "the token is never logged")

    def test_exits_0_on_sigterm_and_sigint(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with StoreProcess() as store:
                self.assertEqual(store.stop(sig), 0)
                stopped = json.loads(store.proc.stdout.readline())
                self.assertEqual(stopped, {"event": "stopped", "signal": int(sig)})

    def test_token_file(self):
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("from-a-file-55\n")
        try:
            with StoreProcess("--token-file", f.name, env=env_without_token()) as store, \
                    store.connect() as sock:
                self.assertEqual(handshake(sock, "from-a-file-55"), (ACCEPTED, True))
                self.assertEqual(store.stop(), 0)
        finally:
            os.unlink(f.name)

    def test_no_token_is_bad_input(self):
        r = subprocess.run([KILN_BIN, "store", "--port", "0"], capture_output=True, text=True,
                           timeout=30, env=env_without_token())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("KILN_JOB_TOKEN", r.stderr)
        self.assertIn("--token-file", r.stderr)
        r = subprocess.run([KILN_BIN, "store", "--port", "0", "--token-file", "/nonexistent/t"],
                           capture_output=True, text=True, timeout=30, env=env_without_token())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("/nonexistent/t", r.stderr)

    def test_port_is_required(self):
        r = subprocess.run([KILN_BIN, "store"], capture_output=True, text=True, timeout=30,
                           env=env_without_token(KILN_JOB_TOKEN=TOKEN))
        self.assertEqual(r.returncode, 2, r.stderr)


if __name__ == "__main__":
    unittest.main()
