"""Clients for the running push stack, for the end-to-end tests and the README demo.

Everything here talks to real parts: the registration service over gRPC (stubs generated from
Protos/ by grpcio-tools), Kafka through confluent-kafka, PostgreSQL through psql, the APNs
simulator's admin API over HTTP/2 (httpx).
"""
from __future__ import annotations

import importlib
import json
import os
import re
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


_stubs_generated = False


def generate_stubs() -> None:
    """Generates Python protobuf and gRPC stubs from Protos/ into GEN_DIR, once per process (pb() is
    called in polling loops: running protoc there cost hundreds of ms per poll)."""
    global _stubs_generated
    if _stubs_generated:
        return
    GEN_DIR.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.relative_to(ROOT / "Protos")) for p in (ROOT / "Protos").rglob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "Protos"),
         f"--python_out={GEN_DIR}", f"--grpc_python_out={GEN_DIR}", *protos],
        check=True, cwd=ROOT / "Protos")
    if str(GEN_DIR) not in sys.path:
        sys.path.insert(0, str(GEN_DIR))
    _stubs_generated = True


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


def free_ports():
    """Yields ports for a test's own listeners, each free at the time it is yielded. The ports lie below
    the kernel's ephemeral range (`ip_local_port_range`, 32768 up by default): a port inside it can be
    taken by any outgoing connection between this check and the bind (a CI run's simulator once failed
    with "bind 127.0.0.1:47404: Address already in use" on a port no one listened on). A port any
    socket uses, listening or connected, is skipped. Starts at PUSH_E2E_SCRIPT_PORT_BASE (21400)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    start = int(os.environ.get("PUSH_E2E_SCRIPT_PORT_BASE", "21400"))
    for port in range(start, low if start < low else 65000):
        if subprocess.run(["ss", "-tanH", f"( sport = :{port} )"], capture_output=True, text=True).stdout.strip() == "":
            yield port
    raise RuntimeError("no free port")


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
                   installation_id: str = "", kind: str = "TOKEN_KIND_STANDARD", timeout: float = 10.0,
                   metadata: list[tuple[str, str]] | None = None):
    common, registry, registry_grpc = pb("common_pb2"), pb("token_registry_pb2"), pb("token_registry_pb2_grpc")
    with grpc_channel() as channel:
        stub = registry_grpc.TokenRegistryStub(channel)
        device = common.Device(device_token=device_token, bundle_id=bundle_id,
                               environment=common.Environment.Value(environment), user_id=user_id,
                               installation_id=installation_id, kind=common.TokenKind.Value(kind))
        return stub.RegisterToken(registry.RegisterTokenRequest(device=device), timeout=timeout, metadata=metadata)


def kafka_config() -> dict[str, str]:
    return {"bootstrap.servers": stack_env()["PUSH_KAFKA_BOOTSTRAP"]}


def produce(topic: str, key: bytes, value: bytes, content_type: str, partition: int | None = None,
            headers: list[tuple[str, bytes]] | None = None, **producer_config) -> tuple[int, int]:
    """Produces one record (acks=all, idempotent) and waits for its acknowledgement.
    `headers` are added after the content-type; `producer_config` adds librdkafka properties (dots as
    underscores: message_max_bytes=…). Returns (partition, offset) of the acknowledged record."""
    from confluent_kafka import Producer
    extra_config = {k.replace("_", "."): v for k, v in producer_config.items()}
    # The contract's partitioner (README "Contracts"), as pushctl and the registration service use.
    producer = Producer({**kafka_config(), "acks": "all", "enable.idempotence": True, "partitioner": "murmur2_random", **extra_config})
    results: list = []
    extra = {} if partition is None else {"partition": partition}
    producer.produce(topic, key=key, value=value, headers=[("content-type", content_type.encode())] + (headers or []),
                     on_delivery=lambda err, msg: results.append((err, msg.partition(), msg.offset())), **extra)
    producer.flush(30)
    if not results or results[0][0]:
        raise RuntimeError(f"produce to {topic} failed: {results or 'no acknowledgement within 30 s'}")
    return results[0][1], results[0][2]


def send_request(request, partition: int | None = None, headers: list[tuple[str, bytes]] | None = None) -> tuple[int, int]:
    """Produces a push.v1.SendRequest (protobuf) keyed by its request id (to `partition` if given).
    Returns (partition, offset)."""
    return produce(SEND_REQUESTS, request.request_id.encode(), request.SerializeToString(),
                   "application/x-protobuf; message=push.v1.SendRequest", partition, headers)


def committed(topic: str, partition: int, group: str = "push-dispatcher") -> int:
    """The committed offset of `group` for topic[partition] (OffsetFetch; joins no group); negative when none."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({**kafka_config(), "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        consumer.close()


def produced_offset(topic: str, partition: int) -> int:
    """The end of topic[partition]: the offset the next record produced there gets (high watermark)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({**kafka_config(), "group.id": f"e2e-{uuid.uuid4()}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def insert_tokens(user_id: str, count: int, bundle_id: str, registered_at_ms: int = 1) -> list[str]:
    """Inserts `count` active sandbox standard tokens of `user_id` straight into the token table
    (much faster than registering them); returns them, sorted."""
    psql("INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id, status,"
         " last_event_at_ms, registered_at_ms)"
         f" SELECT md5('{user_id}a' || i) || md5('{user_id}b' || i), '{bundle_id}', 'sandbox', 'standard', '{user_id}',"
         f" 'active', {registered_at_ms}, {registered_at_ms} FROM generate_series(1, {count}) AS i")
    return sorted(row[0] for row in psql(f"SELECT device_token FROM device_tokens WHERE user_id = '{user_id}'"))


class Dispatcher:
    """A dispatcher process: the stack's (pid file), or one started with the same binary and
    environment (`launch_spec`), whose exit status can then be read."""

    def __init__(self, pid: int, log: Path):
        self.pid, self.log = pid, log
        self.process: subprocess.Popen | None = None

    @staticmethod
    def stack() -> "Dispatcher":
        pid = int((VAR_DIR / "run" / "dispatcher.pid").read_text())
        return Dispatcher(pid, VAR_DIR / "log" / "dispatcher.log")

    def launch_spec(self) -> tuple[list[str], dict[str, str]]:
        """The command line and environment the process was started with (from /proc)."""
        argv = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")[:-1]
        environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{self.pid}/environ").read_bytes().split(b"\0") if b"=" in item)
        return [a.decode() for a in argv], {k.decode(): v.decode() for k, v in environ.items()}

    @staticmethod
    def start(argv: list[str], env: dict[str, str], log: Path, pid_file: Path | None = None,
              timeout: float = 30.0) -> "Dispatcher":
        """Starts a dispatcher appending to `log`; returns once it logged "dispatcher ready"."""
        before = log.read_text(errors="replace").count("dispatcher ready") if log.exists() else 0
        with open(log, "a") as out:
            process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        if pid_file:
            pid_file.write_text(str(process.pid))
        dispatcher = Dispatcher(process.pid, log)
        dispatcher.process = process
        wait_for(lambda: log.read_text(errors="replace").count("dispatcher ready") > before or process.poll() is not None,
                 what=f"{log.name} to be ready", timeout=timeout)
        if process.poll() is not None:
            raise RuntimeError(f"dispatcher exited with status {process.returncode} before it was ready; see {log}")
        return dispatcher

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie child is not alive
            return Path(f"/proc/{self.pid}/stat").read_text().split()[2] != "Z"
        except FileNotFoundError:
            return False

    def exit_status(self, timeout: float) -> int | None:
        """Waits for the process to end; its exit status when it is our child (negative: the
        signal that ended it), else None."""
        if self.process is not None:
            return self.process.wait(timeout=timeout)
        wait_for(lambda: not self.alive(), what=f"dispatcher {self.pid} to exit", timeout=timeout)
        return None


class TopicReader:
    """Reads a topic from its current end (assigned, no consumer group), collecting records."""

    def __init__(self, topic: str, config: dict | None = None):
        """`config` adds librdkafka properties, e.g. {"log_level": 0}."""
        from confluent_kafka import Consumer, TopicPartition
        self.consumer = Consumer({**kafka_config(), "group.id": f"e2e-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **(config or {})})
        metadata = self.consumer.list_topics(topic, timeout=10)
        partitions = metadata.topics[topic].partitions
        tps = []
        for p in partitions:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            tps.append(TopicPartition(topic, p, high))
        self.consumer.assign(tps)
        self.history: list = []

    def read_until(self, predicate, timeout: float = 30.0, since_start: bool = False) -> list:
        """Polls until predicate(records) is true; returns the records (confluent_kafka Messages) read by
        this call, or with `since_start` every record this reader ever read: several waits on one reader
        for records of different partitions (which arrive in any order) must not lose to an earlier wait
        the records a later one needs."""
        records: list = list(self.history) if since_start else []
        if since_start and predicate(records):
            return records
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            self.history.append(msg)
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
                self.history.append(msg)
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


class RequestFeedback:
    """Everything of one request on the feedback topic (reports, RequestCompleted, CampaignProgress),
    read live."""

    def __init__(self, request_id: str):
        self.request_id = request_id
        self.reader = TopicReader(FEEDBACK)
        self.reports: list = []
        self.completed: list = []
        self.progress: list = []

    def poll(self, seconds: float = 0.2) -> None:
        for event in decode_feedback(self.reader.drain(seconds)):
            kind = event.WhichOneof("event")
            if kind == "delivery_report" and event.delivery_report.request_id == self.request_id:
                self.reports.append(event)
            elif kind == "request_completed" and event.request_completed.request_id == self.request_id:
                self.completed.append(event)
            elif kind == "campaign_progress" and event.campaign_progress.request_id == self.request_id:
                self.progress.append(event)

    def until(self, predicate, what: str, timeout: float = 180.0):
        return wait_for(lambda: (self.poll(), predicate(self))[1], what=what, timeout=timeout, interval=0)

    def by_token(self) -> dict[str, set[str]]:
        result: dict[str, set[str]] = {}
        for event in self.reports:
            result.setdefault(event.delivery_report.device_token, set()).add(event.event_id)
        return result

    def close(self) -> None:
        self.reader.close()


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


def simulator_admin(path: str, method: str = "GET", body: dict | None = None, timeout: float = 10):
    """Calls the simulator's admin API (HTTP/2 cleartext); its JSON answer, or None when empty."""
    import httpx
    base = stack_env()["PUSH_SIM_ADMIN_URL"]
    with httpx.Client(http1=False, http2=True, timeout=timeout) as client:
        response = client.request(method, base + path, json=body)
        response.raise_for_status()
        return response.json() if response.content else None


def simulator_requests(device_token: str | None = None, since_ms: int | None = None, limit: int | None = None,
                       timeout: float = 30) -> list[dict]:
    """What the simulator received (`GET /admin/requests`), oldest first, narrowed on the simulator's
    side to one token, to requests since `since_ms` (its clock) and to the newest `limit`: the whole
    ring is thousands of records, seconds of JSON for a debug build on a loaded machine."""
    query = "&".join(f"{name}={value}" for name, value in
                     (("device_token", device_token), ("since_ms", since_ms), ("limit", limit)) if value is not None)
    return simulator_admin("/admin/requests" + (f"?{query}" if query else ""), timeout=timeout)["requests"]


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


ADMIN_URLS = {"registration": "PUSH_REGISTRATION_ADMIN_URL", "dispatcher": "PUSH_DISPATCHER_ADMIN_URL",
              "simulator": "PUSH_SIM_METRICS_ADMIN_URL"}


def admin(service: str, path: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, str, dict]:
    """One HTTP/1.1 request to a service's admin port (README "Admin port"): status, body, headers."""
    import urllib.error
    import urllib.request
    url = stack_env()[ADMIN_URLS[service]] + path
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def process_environ(name: str) -> dict[str, str]:
    """The environment of the stack's process `name` (its pid file under $PUSH_VAR_DIR/run)."""
    pid = int((VAR_DIR / "run" / f"{name}.pid").read_text())
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return {k.decode(): v.decode(errors="replace") for k, v in (item.split(b"=", 1) for item in raw if b"=" in item)}


class LogMark:
    """A point in a log file: `text()` is what was written after it. The stack's logs span the whole test run
    (a restarted process appends), so a test that asserts on log lines reads only the lines of its own time."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def text(self) -> str:
        if not self.path.exists():
            return ""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")


# ---------------------------------------------------------------- group membership, from the dispatchers' logs

def assignment_events(d: Dispatcher) -> list[tuple[int, str, str]]:
    """(position in the log, "assigned" | "revoked", line) for each rebalance line of the send-requests topic."""
    events = []
    text = d.log.read_text(errors="replace")
    for m in re.finditer(r"[^\n]*partitions (assigned|revoked)[^\n]*", text):
        if SEND_REQUESTS in m.group(0):
            events.append((m.start(), m.group(1), m.group(0)))
    return events


def owned_partitions(d: Dispatcher) -> set[int]:
    """The send-requests partitions `d` owns after every rebalance line of its log: an assignment adds
    its partitions, a revocation removes them (eager rebalances revoke and assign everything,
    cooperative ones only what moves)."""
    owned: set[int] = set()
    for _, kind, line in assignment_events(d):
        listed = {int(p) for p in re.findall(re.escape(SEND_REQUESTS) + r"\[(\d+)\]", line)}
        owned = owned | listed if kind == "assigned" else owned - listed
    return owned


def partition_count() -> int:
    """How many partitions the send-requests topic has (asked of the broker)."""
    from confluent_kafka import Consumer
    consumer = Consumer({**kafka_config(), "group.id": f"probe-{uuid.uuid4()}"})
    try:
        return len(consumer.list_topics(SEND_REQUESTS, timeout=10).topics[SEND_REQUESTS].partitions)
    finally:
        consumer.close()


def wait_split(replicas: list[Dispatcher], timeout: float) -> list[set[int]]:
    """Waits until `replicas` own every send-requests partition between them, each partition once and
    each replica at least one; returns what each owns."""
    total = set(range(partition_count()))

    def split():
        owned = [owned_partitions(d) for d in replicas]
        ok = set().union(*owned) == total and sum(len(o) for o in owned) == len(total) and all(owned)
        return owned if ok else None
    return wait_for(split, what="the partitions to be split between " + ", ".join(d.log.name for d in replicas),
                    timeout=timeout)
