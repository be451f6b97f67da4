"""Access to a running local stack for scripts/bench-e2e: addresses, protobuf classes, PostgreSQL
through psql, the feedback reader, the dispatcher's memory, apns-bench and the dev broker's control
port. Everything here talks to the real processes that `scripts/up` started.
"""
from __future__ import annotations

import importlib
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
import pushstack  # noqa: E402  (generates the protobuf classes from Protos/ into $PUSH_VAR_DIR/gen-python)

VAR_DIR = pushstack.VAR_DIR
TOKEN_EVENTS = pushstack.TOKEN_EVENTS
SEND_REQUESTS = pushstack.SEND_REQUESTS
FEEDBACK = pushstack.FEEDBACK
# The content-type headers the registration service and the dispatcher's producers write.
TOKEN_EVENT_CONTENT_TYPE = b"application/x-protobuf; message=push.v1.TokenEvent"
SEND_REQUEST_CONTENT_TYPE = b"application/x-protobuf; message=push.v1.SendRequest"


class BenchError(Exception):
    """A failure of the benchmark itself (not a missed goal): the script exits non-zero."""


def pb(name: str):
    """The generated module push.v1.<name> (protoc runs once per process, not per call)."""
    if not getattr(pb, "generated", False):
        pushstack.generate_stubs()
        pb.generated = True
    return importlib.import_module(f"push.v1.{name}")


def stack_env() -> dict[str, str]:
    path = VAR_DIR / "stack.env"
    if not path.exists():
        raise BenchError(f"{path} is missing: start the stack first (scripts/up --no-demo, same PUSH_VAR_DIR)")
    return pushstack.stack_env()


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages from /proc/loadavg."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").replace("_", "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BenchError(f"{name}={os.environ[name]!r} is not an integer") from None
    if value <= 0:
        raise BenchError(f"{name} must be positive, got {value}")
    return value


def deadline_for(count: int, floor_s: float = 60.0) -> float:
    """Seconds to wait for `count` things: BENCH_TIMEOUT_S if set, else 60 s + count / BENCH_MIN_RATE (20/s)."""
    if os.environ.get("BENCH_TIMEOUT_S"):
        return float(os.environ["BENCH_TIMEOUT_S"])
    return floor_s + count / env_int("BENCH_MIN_RATE", 20)


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def out(line: str = "") -> None:
    print(line, flush=True)


# ---- PostgreSQL

class Postgres:
    """psql against the stack's database: one process per call, ON_ERROR_STOP, a deadline each."""

    def __init__(self, url: str):
        self.url = url

    def query(self, sql: str, timeout: float = 120) -> list[list[str]]:
        return [line.split("\t") for line in self.run(sql, timeout).splitlines() if line]

    def scalar(self, sql: str, timeout: float = 120) -> str:
        rows = self.query(sql, timeout)
        return rows[0][0] if rows and rows[0] else ""

    def run(self, sql: str, timeout: float = 600) -> str:
        """Runs `sql` (any number of statements, read from stdin); returns psql's unaligned output."""
        try:
            done = subprocess.run(["psql", self.url, "-X", "-q", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-f", "-"],
                                  input=sql, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"psql did not finish within {timeout:.0f} s: {sql[:120]}…") from None
        if done.returncode != 0:
            raise BenchError(f"psql failed ({done.returncode}): {done.stderr.strip()[:500]}")
        return done.stdout


# ---- Kafka

def kafka_control(command: str) -> str:
    """One command to the dev broker's control port (its address is in the broker's log); returns the answer."""
    log = VAR_DIR / "log" / "kafka.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.findall(r"^control=127\.0\.0\.1:(\d+)", text, re.M) or re.findall(r'control port listening.*port=(\d+)', text)
    if not found:
        raise BenchError(f"no control port in {log}: is the stack's Kafka broker the dev broker?")
    with socket.create_connection(("127.0.0.1", int(found[-1])), timeout=10) as connection:
        connection.sendall((command + "\n").encode())
        return connection.makefile().readline().strip()


def ensure_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Creates `name` on the dev broker unless it exists, then waits until its metadata shows it."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if name not in admin.list_topics(timeout=10).topics:
        answer = kafka_control(f"create {name}:{partitions}")
        if not answer.startswith("ok") and "exist" not in answer:
            raise BenchError(f"dev broker refused 'create {name}:{partitions}': {answer}")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        topic = admin.list_topics(timeout=10).topics.get(name)
        if topic is not None and topic.error is None and topic.partitions:
            return
        time.sleep(0.2)
    raise BenchError(f"topic {name} did not appear in the broker's metadata within 15 s")


class Producer:
    """confluent-kafka producer (acks=all, idempotent, linger 5 ms like the services) that counts failed deliveries."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Producer as KafkaProducer
        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                       "linger.ms": 5, "queue.buffering.max.messages": 200000})
        self.failures: list[str] = []

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failures.append(str(err))

    def produce(self, topic: str, key: bytes, value: bytes, content_type: bytes) -> None:
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=[("content-type", content_type)],
                                      on_delivery=self._delivered)
                return
            except BufferError:
                self.producer.poll(0.01)

    def poll(self, seconds: float = 0) -> None:
        self.producer.poll(seconds)

    def flush(self, what: str, timeout: float = 60) -> None:
        left = self.producer.flush(timeout)
        if left:
            raise BenchError(f"{what}: {left} records not acknowledged by Kafka within {timeout:.0f} s")
        if self.failures:
            raise BenchError(f"{what}: {len(self.failures)} records failed to produce, e.g. {self.failures[0]}")


class CompletionReader:
    """One consumer (no group membership: assigned at the current end of each topic) that reads the
    feedback topics in a thread and records, per request id starting with `key_prefix`, when its
    RequestCompleted was seen (wall clock ms) and the event itself."""

    def __init__(self, bootstrap: str, topics: list[str], key_prefix: str, group: str, dispatcher_pid: int):
        from confluent_kafka import Consumer, TopicPartition
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 10, "fetch.error.backoff.ms": 10})
        assignment = []
        for topic in topics:
            partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
            for p in partitions:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                assignment.append(TopicPartition(topic, p, high))
        self.consumer.assign(assignment)
        self.prefix = key_prefix.encode()
        self.dispatcher_pid = dispatcher_pid
        self.completed: dict[str, tuple[float, object]] = {}
        self.records = 0
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._feedback = pb("feedback_pb2")
        self._thread = threading.Thread(target=self._run, name="completion-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self.consumer.consume(1000, 0.005):  # a batch, or what came within 5 ms
                    if msg.error():
                        continue
                    self.records += 1
                    if not (msg.key() or b"").startswith(self.prefix):
                        continue  # delivery reports are keyed by token; other runs' requests by their ids
                    seen_ms = time.time() * 1000
                    event = self._feedback.FeedbackEvent()
                    event.ParseFromString(msg.value())
                    if event.WhichOneof("event") == "request_completed":
                        self.completed.setdefault(event.request_completed.request_id, (seen_ms, event.request_completed))
        except Exception as error:  # surfaced by wait()
            self.error = error

    def wait(self, ids: list[str], timeout: float, what: str) -> list[tuple[float, object]]:
        """The (seen_ms, RequestCompleted) of every id, waiting at most `timeout` seconds, and failing
        sooner when no feedback record at all arrived for BENCH_STALL_S (60) seconds while some are
        missing (a fan-out's delivery reports count, so one long request is no stall): a stall, named
        with the dispatcher's engine gauges, instead of a wait to the deadline."""
        deadline = time.monotonic() + timeout
        stall_s = float(os.environ.get("BENCH_STALL_S") or 60)
        pending = [i for i in ids if i not in self.completed]
        progress_at, progress = time.monotonic(), (len(pending), self.records)
        while pending:
            if self.error:
                raise BenchError(f"{what}: the feedback reader failed: {self.error}")
            if not Path(f"/proc/{self.dispatcher_pid}").exists():
                raise BenchError(f"{what}: the dispatcher (pid {self.dispatcher_pid}) exited; see {VAR_DIR}/log/dispatcher.log")
            now = time.monotonic()
            if (len(pending), self.records) != progress:
                progress_at, progress = now, (len(pending), self.records)
            arrived = f"{len(ids) - len(pending)}/{len(ids)} RequestCompleted arrived"
            if now > deadline:
                raise BenchError(f"{what}: only {arrived} within {timeout:g} s (first missing: {pending[0]}; "
                                 f"reader saw {self.records} records; {engine_gauges()})")
            if now - progress_at > stall_s:
                raise BenchError(f"{what}: stalled: none for {stall_s:g} s with {arrived} (first missing: {pending[0]}; "
                                 f"reader saw {self.records} records; {engine_gauges()})")
            time.sleep(0.02)
            pending = [i for i in pending if i not in self.completed]
        return [self.completed[i] for i in ids]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.close()


ENGINE_GAUGES = ("push_records_in_flight", "push_uncommitted_records", "push_kafka_consumer_lag", "push_pending_retries")


def engine_gauges() -> str:
    """The dispatcher's engine gauges from its admin port, summed over labels, as `name=value` items
    (what a stall looks like from inside: records held, uncommitted, lag)."""
    try:
        status, body, _ = pushstack.admin("dispatcher", "/metrics", timeout=5)
    except OSError as error:
        return f"dispatcher metrics unavailable: {error}"
    if status != 200:
        return f"dispatcher metrics answered {status}"
    totals: dict[str, float] = {}
    for line in body.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ENGINE_GAUGES:
            totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return ", ".join(f"{name}={totals[name]:g}" for name in ENGINE_GAUGES if name in totals) or "no engine gauges"


# ---- CPU time per notification, from /proc

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (field 3, the state, is index 0)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()


def process_cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    """utime + stime of `pid` in seconds (proc(5) fields 14 and 15); with `reaped_children`, plus
    cutime + cstime (16 and 17): the CPU of children that exited and were waited for."""
    fields = _stat_fields(pid)
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def postmaster_pid() -> int:
    """The stack's PostgreSQL server (the first line of its data directory's postmaster.pid)."""
    path = VAR_DIR / "pg" / "data" / "postmaster.pid"
    try:
        pid = int(path.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        raise BenchError(f"{path} is missing or unreadable: is the stack's PostgreSQL running?") from None
    if not Path(f"/proc/{pid}").exists():
        raise BenchError(f"PostgreSQL (pid {pid} from {path}) is not running")
    return pid


class CPUMeter:
    """CPU seconds used so far by the dispatcher, by PostgreSQL (the postmaster, every live process it
    started and those it already reaped) and by the Kafka broker, read from /proc. Subtract two
    `read()`s to get what a phase cost."""

    def __init__(self):
        self.pids = {"dispatcher": pid_of("dispatcher"), "postgres": postmaster_pid(), "broker": pid_of("kafka")}

    def _postgres(self) -> float:
        server = self.pids["postgres"]
        total = process_cpu_seconds(server, reaped_children=True)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = _stat_fields(int(entry.name))
                if int(fields[1]) == server:  # field 4, the parent
                    total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            except (OSError, ValueError):
                continue  # exited meanwhile: its time is now in the postmaster's cutime/cstime
        return total

    def read(self) -> dict[str, float]:
        try:
            return {"dispatcher": process_cpu_seconds(self.pids["dispatcher"]), "postgres": self._postgres(),
                    "broker": process_cpu_seconds(self.pids["broker"])}
        except OSError:
            raise BenchError(f"a stack process is gone (pids {self.pids})") from None

    @staticmethod
    def per_item(before: dict[str, float], after: dict[str, float], items: int) -> dict[str, float]:
        """Microseconds of CPU per item for each part and their sum (`total`)."""
        used = {name: (after[name] - before[name]) * 1e6 / items for name in before}
        used["total"] = sum(used.values())
        return used


# ---- the dispatcher's memory

class RSSSampler:
    """Samples VmRSS of `pid` every 100 ms in a thread; `phase()` starts a new maximum (and resets
    VmHWM through /proc/PID/clear_refs when allowed); `peak()` returns (max sampled KiB, VmHWM KiB)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.maximum = 0
        self.hwm_reset = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def status(self, field: str) -> int:
        try:
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        except OSError:
            raise BenchError(f"the dispatcher (pid {self.pid}) is gone") from None
        return -1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.maximum = max(self.maximum, self.status("VmRSS"))
            except BenchError:
                pass
            time.sleep(0.1)

    def phase(self) -> None:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # 5: reset the peak RSS (VmHWM)
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self.maximum = self.status("VmRSS")

    def settle(self, at_least_s: float = 12.0, limit_s: float = 40.0) -> tuple[int, int, float]:
        """Waits at least `at_least_s` (the dispatcher's trim interval, PUSH_MALLOC_TRIM_INTERVAL_MS
        10 s, and a margin), then until VmRSS stops falling (within 2% of its value 4 s earlier), at
        most `limit_s`: memory the previous phase freed is returned by the trim thread and is not the
        next phase's. Returns (KiB before, KiB after, seconds waited)."""
        started = time.monotonic()
        before = self.status("VmRSS")
        history = [before]
        while time.monotonic() - started < limit_s:
            time.sleep(0.5)
            history.append(self.status("VmRSS"))
            if time.monotonic() - started >= at_least_s and history[-1] >= 0.98 * history[-9]:
                break
        return before, history[-1], time.monotonic() - started

    def peak(self) -> tuple[int, int]:
        return self.maximum, self.status("VmHWM")

    def close(self) -> None:
        self._stop.set()


def pid_of(name: str) -> int:
    path = VAR_DIR / "run" / f"{name}.pid"
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        raise BenchError(f"{path} is missing or empty: is the stack running?") from None
    if not Path(f"/proc/{pid}").exists():
        raise BenchError(f"{name} (pid {pid} from {path}) is not running")
    return pid


def process_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return env_pairs(raw)


def env_pairs(raw: bytes) -> dict[str, str]:
    """NUL-separated VAR=VALUE pairs (a /proc/PID/environ, or the environment scripts/up saved)."""
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def changed_settings(name: str) -> dict[str, str]:
    """The settings running stack service `name` has beyond those scripts/up saved for it (an earlier
    `scripts/restart NAME VAR=VALUE`'s), to hand to `restart` again."""
    saved = env_pairs((VAR_DIR / "run" / f"{name}.env").read_bytes())
    return {k: v for k, v in process_env(pid_of(name)).items() if saved.get(k) != v}


def restart(name: str, settings: dict[str, str]) -> int:
    """Restarts stack service `name` with scripts/restart, `settings` on top of the environment
    scripts/up saved for it (for this start only), and returns its new pid."""
    done = subprocess.run([str(ROOT / "scripts" / "restart"), name, *(f"{k}={v}" for k, v in settings.items())],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PUSH_VAR_DIR": str(VAR_DIR)})
    if done.returncode != 0:
        raise BenchError(f"scripts/restart {name} failed: {(done.stdout + done.stderr).strip()[-500:]}")
    return pid_of(name)


# ---- apns-bench

class APNsBench:
    """The project's release `apns-bench` against the stack's simulator (sandbox listener), with the
    stack's credentials and the dispatcher's pool shape (4 connections, 1,000 notifications in flight)."""

    def __init__(self, binary: Path, env: dict[str, str], body_file: Path):
        if not binary.exists():
            raise BenchError(f"{binary} is missing: swift build -c release --product apns-bench")
        simulator_env = process_env(pid_of("apns-simulator"))
        self.port = simulator_env.get("PUSH_SIM_SANDBOX_PORT") or os.environ.get("PUSH_UP_SIM_SANDBOX_PORT", "2198")
        credentials = VAR_DIR / "credentials"
        self.command = [str(binary), "--port", self.port, "--environment", "sandbox",
                        "--ca", str(credentials / "simulator-cert.pem"), "--p8", str(credentials / "apns-key.p8"),
                        "--key-id", env["PUSH_APNS_KEY_ID"], "--team", env["PUSH_APNS_TEAM_ID"], "--body", str(body_file),
                        "--connections", os.environ.get("BENCH_APNS_CONNECTIONS", "4")]

    def run(self, n: int, concurrency: int = 1000) -> tuple[float, str]:
        """Sends n notifications; returns (notifications/s, apns-bench's line). `cpu_per_notification_us`
        is then apns-bench's own CPU (user + system, from getrusage of this child) per notification."""
        import resource
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run([*self.command, "--n", str(n), "--concurrency", str(concurrency), "--label", f"apns-bench n={n}"],
                                  capture_output=True, text=True, timeout=deadline_for(n, 120))
        except subprocess.TimeoutExpired:
            raise BenchError(f"apns-bench --n {n} did not finish in time") from None
        lines = done.stdout.strip().splitlines()
        match = re.search(r"([0-9.]+) notifications/s", lines[-1]) if lines else None
        if done.returncode != 0 or not match:
            raise BenchError(f"apns-bench failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.cpu_per_notification_us = used * 1e6 / n
        return float(match.group(1)), lines[-1]
