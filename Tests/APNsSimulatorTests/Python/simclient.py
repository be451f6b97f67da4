"""Outside clients for the APNs simulator tests: a small synchronous HTTP/2 client on the `h2`
library (TLS, ALPN h2), httpx for the admin API, PyJWT/cryptography for provider tokens.

Environment (set by the Swift test): SIM_PRODUCTION_PORT, SIM_SANDBOX_PORT, SIM_ADMIN_PORT, SIM_CA
(the listeners' certificate), SIM_DIR (credentials directory: key1.p8 … and client certificates),
SIM_TEAM_ID.
"""
from __future__ import annotations

import base64
import json
import os
import select
import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx
import jwt as pyjwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

ENV = os.environ
DIR = ENV.get("SIM_DIR", ".")
TEAM = ENV.get("SIM_TEAM_ID", "TEAM000001")
PORTS = {"production": int(ENV.get("SIM_PRODUCTION_PORT", "0")), "sandbox": int(ENV.get("SIM_SANDBOX_PORT", "0"))}
ADMIN = f"http://127.0.0.1:{ENV.get('SIM_ADMIN_PORT', '0')}"
BUNDLE = "com.example.app"


class Failure(AssertionError):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def expect_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


# ---- admin API (h2c with prior knowledge) ---------------------------------------------------

_admin_client = None


def admin(path, method="GET", body=None, status=200):
    global _admin_client
    if _admin_client is None:
        _admin_client = httpx.Client(http1=False, http2=True, timeout=10)
    response = _admin_client.request(method, ADMIN + path, json=body)
    expect_eq(response.http_version, "HTTP/2", f"admin {path} HTTP version")
    expect_eq(response.status_code, status, f"admin {method} {path} status (body {response.text})")
    return response.json() if response.content else None


def clock_ms():
    return admin("/admin/clock")["now_ms"]


def set_clock_to_now():
    admin("/admin/clock", "POST", {"set_ms": int(time.time() * 1000)})


def advance_clock(ms):
    admin("/admin/clock", "POST", {"advance_ms": ms})


# ---- provider tokens ---------------------------------------------------------------------------

def key_pem(name):
    with open(os.path.join(DIR, f"{name}.p8"), "rb") as f:
        return f.read()


def make_jwt(key="key1", kid="KEY0000001", team=TEAM, iat=None, der=False):
    """An ES256 provider token; iat defaults to the simulator's clock (seconds)."""
    if iat is None:
        iat = clock_ms() // 1000
    if not der:
        return pyjwt.encode({"iss": team, "iat": iat}, key_pem(key), algorithm="ES256", headers={"kid": kid})
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    header = b64(json.dumps({"alg": "ES256", "kid": kid}).encode())
    claims = b64(json.dumps({"iss": team, "iat": iat}).encode())
    private = serialization.load_pem_private_key(key_pem(key), password=None)
    signature = private.sign(f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))  # DER
    return f"{header}.{claims}.{b64(signature)}"


def token(nbytes=32):
    return os.urandom(nbytes).hex()


def alert_body(size=None):
    body = json.dumps({"aps": {"alert": "hello/world"}}, separators=(",", ":")).encode()
    if size is not None:
        pad = size - len(b'{"aps":{"alert":"hello"},"p":""}')
        body = b'{"aps":{"alert":"hello"},"p":"' + b"x" * pad + b'"}'
        assert len(body) == size
    return body


# ---- HTTP/2 client on h2 -----------------------------------------------------------------------

class Response:
    def __init__(self):
        self.status = None
        self.headers = []
        self.body = b""
        self.ended = False
        self.reset = None

    def header(self, name):
        values = [v for k, v in self.headers if k == name]
        return values[0] if values else None

    @property
    def json(self):
        return json.loads(self.body) if self.body else None

    @property
    def reason(self):
        return (self.json or {}).get("reason")

    def __repr__(self):
        return f"Response(status={self.status}, body={self.body!r}, reset={self.reset})"


class H2:
    """One HTTP/2 connection to a push listener."""

    def __init__(self, environment="sandbox", cert=None, key=None, wait_settings=True):
        context = ssl.create_default_context(cafile=ENV["SIM_CA"])
        context.set_alpn_protocols(["h2"])
        if cert:
            context.load_cert_chain(os.path.join(DIR, cert), os.path.join(DIR, key))
        raw = socket.create_connection(("127.0.0.1", PORTS[environment]), timeout=5)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        check(self.sock.selected_alpn_protocol() == "h2", "ALPN h2 was not negotiated")
        self.sock.setblocking(False)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.responses = {}
        self.max_streams_seen = []   # SETTINGS_MAX_CONCURRENT_STREAMS values, in arrival order
        self.goaway = None
        self.closed = False
        self.events = []
        self.flush()
        if wait_settings:
            self.pump(lambda: self.max_streams_seen, what="the server's SETTINGS")

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.setblocking(True)
            self.sock.sendall(data)
            self.sock.setblocking(False)

    def send(self, path, headers, body=b"", method="POST", flush=True):
        sid = self.conn.get_next_available_stream_id()
        pseudo = [(":method", method), (":scheme", "https"), (":authority", "127.0.0.1"), (":path", path)]
        self.conn.send_headers(sid, pseudo + list(headers), end_stream=not body)
        if body:
            self.conn.send_data(sid, body, end_stream=True)
        self.responses[sid] = Response()
        if flush:
            self.flush()
        return sid

    def push(self, device_token, headers=None, body=None, jwt=None, timeout=5):
        """Sends one device push and waits for its answer."""
        sid = self.send_push(device_token, headers, body, jwt)
        return self.wait(sid, timeout)

    def send_push(self, device_token, headers=None, body=None, jwt=None, flush=True):
        if headers is None:
            headers = [("apns-topic", BUNDLE), ("apns-push-type", "alert"), ("apns-priority", "10")]
        if jwt:
            headers = list(headers) + [("authorization", f"bearer {jwt}")]
        return self.send(f"/3/device/{device_token}", headers, alert_body() if body is None else body, flush=flush)

    def wait(self, sid, timeout=5):
        self.pump(lambda: self.responses[sid].ended or self.responses[sid].reset is not None or self.closed,
                  timeout, f"the answer on stream {sid}")
        return self.responses[sid]

    def pump(self, until, timeout=5, what="a condition"):
        deadline = time.monotonic() + timeout
        while not until():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Failure(f"timed out after {timeout}s waiting for {what}")
            if self.closed:
                raise Failure(f"connection closed while waiting for {what}")
            self.read_once(min(remaining, 0.05))

    def read_once(self, timeout):
        if not self.sock.pending():
            readable, _, _ = select.select([self.sock], [], [], timeout)
            if not readable:
                return
        try:
            data = self.sock.recv(65536)
        except ssl.SSLWantReadError:
            return
        except (ConnectionResetError, ssl.SSLError, OSError):
            data = b""
        if not data:
            self.closed = True
            return
        for event in self.conn.receive_data(data):
            self.events.append(event)
            if isinstance(event, h2.events.ResponseReceived):
                r = self.responses[event.stream_id]
                r.headers = list(event.headers)
                r.status = int(r.header(":status"))
            elif isinstance(event, h2.events.DataReceived):
                self.responses[event.stream_id].body += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.responses[event.stream_id].ended = True
            elif isinstance(event, h2.events.StreamReset):
                if event.stream_id in self.responses:
                    self.responses[event.stream_id].reset = event.error_code
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                setting = event.changed_settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
                if setting is not None:
                    self.max_streams_seen.append(setting.new_value)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = event
        self.flush()

    def wait_closed(self, timeout=5):
        self.pump(lambda: self.closed, timeout, "the connection to close")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def expect_reason(response, status, reason):
    expect_eq(response.status, status, f"status ({response!r})")
    expect_eq(response.header("content-type"), "application/json", "content-type")
    expect_eq(response.json, {"reason": reason}, "error body")
