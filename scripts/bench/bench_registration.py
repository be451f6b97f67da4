"""scripts/bench-registration: the registration service with authentication on, against the Kafka
producer ceiling measured in the same run (see the script's header for what is measured)."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib
from benchlib import BenchError, env_int, loadavg


def framed_request(token: str) -> tuple[bytes, bytes]:
    """A RegisterTokenRequest framed for gRPC (flag 0, 4-byte length), and the TokenEvent value the
    service would publish for it (the Kafka ceiling produces events of the same size)."""
    common, registry = benchlib.pb("common_pb2"), benchlib.pb("token_registry_pb2")
    device = common.Device(device_token=token, bundle_id="com.example.bench", environment=common.Environment.Value("SANDBOX"),
                           kind=common.TokenKind.Value("TOKEN_KIND_STANDARD"), user_id="bench-user", installation_id="bench-inst")
    message = registry.RegisterTokenRequest(device=device).SerializeToString()
    event = registry.TokenEvent(event_id=str(uuid.uuid4()), action=registry.TokenEvent.Action.Value("REGISTERED"),
                                device=device, event_time_ms=int(time.time() * 1000)).SerializeToString()
    return b"\x00" + len(message).to_bytes(4, "big") + message, event


def end_offsets(topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": benchlib.stack_env()["PUSH_KAFKA_BOOTSTRAP"], "group.id": f"bench-{uuid.uuid4()}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def h2load(args: list[str], body: Path, key: str, address: str) -> str:
    command = ["h2load", *args, "-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers",
               "-H", f"authorization: Bearer {key}", f"http://{address}/push.v1.TokenRegistry/RegisterToken"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise BenchError(f"h2load failed ({result.returncode}): {result.stderr or result.stdout}")
    return result.stdout


def service_rate(count: int, clients: int, streams: int, body: Path, key: str, address: str) -> tuple[float, int]:
    """Registrations/s acknowledged (end-offset growth / wall time) and the h2load 2xx count."""
    before = end_offsets(benchlib.TOKEN_EVENTS)
    started = time.monotonic()
    out = h2load(["-n", str(count), "-c", str(clients), "-m", str(streams)], body, key, address)
    elapsed = time.monotonic() - started
    acknowledged = end_offsets(benchlib.TOKEN_EVENTS) - before
    ok = 0
    for line in out.splitlines():
        if line.startswith("status codes:"):
            ok = int(line.split(":")[1].split()[0])
    if acknowledged < count:
        raise BenchError(f"only {acknowledged} of {count} registrations reached Kafka (h2load 2xx {ok}):\n{out}")
    return count / elapsed, ok


def kafka_rate(count: int, token: str, value: bytes) -> float:
    """confluent-kafka producing `count` of the same events (key, value, content-type) with acks=all
    and idempotence, until every delivery report arrived: events/s."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": benchlib.stack_env()["PUSH_KAFKA_BOOTSTRAP"], "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    failures: list = []
    delivered = [0]

    def report(error, _message):
        if error:
            failures.append(error)
        else:
            delivered[0] += 1
    headers = [("content-type", benchlib.TOKEN_EVENT_CONTENT_TYPE)]
    started = time.monotonic()
    for _ in range(count):
        while True:
            try:
                producer.produce(benchlib.TOKEN_EVENTS, key=token.encode(), value=value, headers=headers, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.monotonic() - started
    if failures or delivered[0] != count:
        raise BenchError(f"the Kafka ceiling delivered {delivered[0]} of {count}: {failures[:3]}")
    return count / elapsed


def paced_latency(rate: int, seconds: int, body: Path, key: str, address: str) -> tuple[float, float, int]:
    """p50 and p99 in ms of calls paced at `rate`/s (10 clients, --rps each) from h2load's log."""
    clients = 10
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        h2load(["-c", str(clients), "-m", "1", "--rps", str(max(1, rate // clients)), "-D", str(seconds),
                "--warm-up-time", "1", "--log-file", log.name], body, key, address)
        durations = []
        for line in Path(log.name).read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1] == "200":
                durations.append(int(parts[2]) / 1000.0)  # microseconds → ms
    if len(durations) < rate * seconds // 2:
        raise BenchError(f"only {len(durations)} paced calls answered 200")
    durations.sort()
    return durations[len(durations) // 2], durations[min(len(durations) - 1, int(len(durations) * 0.99))], len(durations)


def main() -> int:
    env = benchlib.stack_env()
    key, address = env.get("PUSH_API_KEY", ""), env["PUSH_GRPC_ADDRESS"]
    if not key:
        raise BenchError("stack.env has no PUSH_API_KEY: start the stack with authentication on (scripts/up)")
    runs = env_int("BENCH_RUNS", 3)
    count = env_int("BENCH_REG_N", 20_000)
    clients, streams = env_int("BENCH_REG_CLIENTS", 4), env_int("BENCH_REG_STREAMS", 64)
    rate, seconds = env_int("BENCH_REG_RATE", 1_000), env_int("BENCH_REG_SECS", 10)
    token = os.urandom(32).hex()
    framed, event = framed_request(token)
    with tempfile.NamedTemporaryFile(suffix=".grpc", delete=False) as f:
        f.write(framed)
        body = Path(f.name)
    try:
        print(f"bench-registration: {count} calls × {runs} runs, {clients} connections × {streams} streams, auth on (API key); "
              f"load average {loadavg()}", flush=True)
        h2load(["-n", "2000", "-c", str(clients), "-m", str(streams)], body, key, address)  # warm-up
        service, kafka = [], []
        for run in range(runs):
            value, ok = service_rate(count, clients, streams, body, key, address)
            ceiling = kafka_rate(count, token, event)
            service.append(value)
            kafka.append(ceiling)
            print(f"  run {run + 1}: registration service {value:,.0f}/s acknowledged (h2load 2xx {ok}), "
                  f"confluent-kafka {ceiling:,.0f}/s  ratio {value / ceiling:.2f}   load {loadavg()}", flush=True)
        s, k = statistics.median(service), statistics.median(kafka)
        ratio = s / k
        print(f"(a) median: {s:,.0f} registrations/s vs Kafka producer {k:,.0f}/s = {ratio:.2f}  "
              f"goal ≥ 0.45: {'PASS' if ratio >= 0.45 else 'MISS'}   load {loadavg()}", flush=True)
        p50s, p99s = [], []
        for run in range(runs):
            p50, p99, n = paced_latency(rate, seconds, body, key, address)
            p50s.append(p50)
            p99s.append(p99)
            print(f"  run {run + 1}: paced {rate}/s × {seconds} s ({n} calls): p50 {p50:.2f} ms, p99 {p99:.2f} ms   load {loadavg()}", flush=True)
        p99 = statistics.median(p99s)
        print(f"(b) median: p50 {statistics.median(p50s):.2f} ms, p99 {p99:.2f} ms at {rate}/s  goal p99 < 10 ms: "
              f"{'PASS' if p99 < 10 else 'MISS'}   load {loadavg()}", flush=True)
    finally:
        body.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"bench-registration: {error}", file=sys.stderr)
        sys.exit(1)
