"""Clients for the running push stack, for the end-to-end tests and the README demo.

Everything here talks to real parts: the registration service over gRPC (stubs generated from
Protos/ by grpcio-tools), Kafka through confluent-kafka, PostgreSQL through psql, the APNs
simulator's admin API over HTTP/2 (httpx).
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("PUSH_VAR_DIR", "/var/tmp/push-dev"))
GEN_DIR = VAR_DIR / "gen-python"

TOKEN_EVENTS = "push.token-events.v1"
SEND_REQUESTS = "push.send-requests.v1"
FEEDBACK = "push.feedback.v1"
DEAD_LETTER = "push.dead-letter.v1"


def generate_stubs() -> None:
    """Generates Python protobuf and gRPC stubs from Protos/ into GEN_DIR (idempotent)."""
    GEN_DIR.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.relative_to(ROOT / "Protos")) for p in (ROOT / "Protos").rglob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "Protos"),
         f"--python_out={GEN_DIR}", f"--grpc_python_out={GEN_DIR}", *protos],
        check=True, cwd=ROOT / "Protos")
    if str(GEN_DIR) not in sys.path:
        sys.path.insert(0, str(GEN_DIR))


def pb(name: str):
    """The generated module push/v1/<name>_pb2 (or _pb2_grpc)."""
    generate_stubs()
    return importlib.import_module(f"push.v1.{name}")


def stack_env() -> dict[str, str]:
    """Addresses of the running stack, as scripts/up wrote them to $PUSH_VAR_DIR/stack.env."""
    env: dict[str, str] = {}
    path = VAR_DIR / "stack.env"
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return env


def api_key() -> str:
    """The development API key scripts/up generated (every bundle id and operation)."""
    return stack_env().get("PUSH_API_KEY", "")


def auth_headers(key: str | None = None) -> dict[str, str]:
    """`authorization: Bearer <key>` for JSON calls (the development key by default)."""
    key = api_key() if key is None else key
    return {"authorization": f"Bearer {key}"} if key else {}


def _bearer_interceptor(credential: str):
    """A grpcio interceptor that adds `authorization: Bearer <credential>` to every call."""
    import grpc

    class BearerAuth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
        def _with_auth(self, details):
            # grpcio hands a namedtuple-based ClientCallDetails: replace its metadata.
            return details._replace(metadata=list(details.metadata or []) + [("authorization", f"Bearer {credential}")])

        def intercept_unary_unary(self, continuation, details, request):
            return continuation(self._with_auth(details), request)

        def intercept_unary_stream(self, continuation, details, request):
            return continuation(self._with_auth(details), request)

    return BearerAuth()


def grpc_channel(credential: str | None = None):
    """A channel to the registration service that sends the development API key (or `credential`;
    "" sends none) with every call."""
    import grpc
    channel = grpc.insecure_channel(stack_env()["PUSH_GRPC_ADDRESS"])
    credential = api_key() if credential is None else credential
    return grpc.intercept_channel(channel, _bearer_interceptor(credential)) if credential else channel


def kafka_control(*commands: str) -> list[str]:
    """Sends commands (`down 1`, `up 1`) to the dev broker's control port; returns the answers."""
    import socket
    host, port = stack_env()["PUSH_KAFKA_CONTROL"].rsplit(":", 1)
    answers = []
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        reader = conn.makefile("r")
        for command in commands:
            conn.sendall((command + "\n").encode())
            answers.append(reader.readline().rstrip("\n"))
    return answers


def register_token(device_token: str, bundle_id: str, environment: str = "SANDBOX", user_id: str = "",
                   installation_id: str = "", kind: str = "TOKEN_KIND_STANDARD", timeout: float = 10.0):
    common, registry, registry_grpc = pb("common_pb2"), pb("token_registry_pb2"), pb("token_registry_pb2_grpc")
    with grpc_channel() as channel:
        stub = registry_grpc.TokenRegistryStub(channel)
        device = common.Device(device_token=device_token, bundle_id=bundle_id,
                               environment=common.Environment.Value(environment), user_id=user_id,
                               installation_id=installation_id, kind=common.TokenKind.Value(kind))
        return stub.RegisterToken(registry.RegisterTokenRequest(device=device), timeout=timeout)


def kafka_config() -> dict[str, str]:
    return {"bootstrap.servers": stack_env()["PUSH_KAFKA_BOOTSTRAP"]}


def produce(topic: str, key: bytes, value: bytes, content_type: str, partition: int | None = None) -> None:
    from confluent_kafka import Producer
    producer = Producer({**kafka_config(), "acks": "all", "enable.idempotence": True})
    errors: list = []
    extra = {} if partition is None else {"partition": partition}
    producer.produce(topic, key=key, value=value, headers=[("content-type", content_type.encode())],
                     on_delivery=lambda err, msg: errors.append(err) if err else None, **extra)
    producer.flush(15)
    if errors:
        raise RuntimeError(f"produce to {topic} failed: {errors}")


def send_request(request, partition: int | None = None) -> None:
    """Produces a push.v1.SendRequest (protobuf) keyed by its request id (to `partition` if given)."""
    produce(SEND_REQUESTS, request.request_id.encode(), request.SerializeToString(),
            "application/x-protobuf; message=push.v1.SendRequest", partition)


class TopicReader:
    """Reads a topic from its current end (assigned, no consumer group), collecting records."""

    def __init__(self, topic: str):
        from confluent_kafka import Consumer, TopicPartition, OFFSET_END
        self.consumer = Consumer({**kafka_config(), "group.id": f"e2e-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        metadata = self.consumer.list_topics(topic, timeout=10)
        partitions = metadata.topics[topic].partitions
        tps = []
        for p in partitions:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            tps.append(TopicPartition(topic, p, high))
        self.consumer.assign(tps)

    def read_until(self, predicate, timeout: float = 30.0) -> list:
        """Polls until predicate(records) is true; returns the records (confluent_kafka Messages)."""
        records: list = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            records.append(msg)
            if predicate(records):
                return records
        raise TimeoutError(f"gave up after {timeout}s with {len(records)} records")

    def drain(self, seconds: float) -> list:
        """Whatever arrives within `seconds`."""
        records: list = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.1)
            if msg is not None and not msg.error():
                records.append(msg)
        return records

    def close(self) -> None:
        self.consumer.close()


def decode_feedback(records) -> list:
    feedback = pb("feedback_pb2")
    events = []
    for msg in records:
        event = feedback.FeedbackEvent()
        event.ParseFromString(msg.value())
        events.append(event)
    return events


def delivery_report(reader: TopicReader, request_id: str, timeout: float = 60.0):
    """Reads the feedback topic until the first DeliveryReport of `request_id` and returns it."""
    def found(records):
        return any(e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id
                   for e in decode_feedback(records))
    events = decode_feedback(reader.read_until(found, timeout=timeout))
    return [e.delivery_report for e in events
            if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id][0]


def psql(sql: str) -> list[list[str]]:
    """Runs sql against the stack's database; rows as lists of text fields."""
    out = subprocess.run(["psql", stack_env()["PUSH_PG_URL"], "-At", "-F", "\t", "-c", sql],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def simulator_admin(path: str, method: str = "GET", body: dict | None = None):
    import httpx
    base = stack_env()["PUSH_SIM_ADMIN_URL"]
    with httpx.Client(http1=False, http2=True, timeout=10) as client:
        response = client.request(method, base + path, json=body)
        response.raise_for_status()
        return response.json() if response.content else None


def wait_for(predicate, what: str = "condition", timeout: float = 30.0, interval: float = 0.2):
    """Polls predicate() until it returns something truthy (returned) or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"gave up after {timeout}s waiting for {what}")


def random_token(nbytes: int = 32) -> str:
    return os.urandom(nbytes).hex()
