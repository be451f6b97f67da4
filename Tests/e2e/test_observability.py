"""Observability end to end (docs/observability.md): a real Prometheus scrapes every service's admin
port over HTTP/1.1 while real traffic flows; /readyz follows PostgreSQL and ignores Apple; /healthz
notices a wedged Kafka poll thread; W3C trace context travels from a request to its feedback."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid

import pytest

import pushstack as stack

wait_for = stack.wait_for
BUNDLE = "com.example.e2e"
TRACE_RE = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


class Prometheus:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str) -> float:
        """The sum of the query's samples (0 when the series does not exist yet)."""
        return sum(float(sample["value"][1]) for sample in self.query(expr))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    exe = shutil.which("prometheus")
    assert exe, "prometheus is not installed (scripts/install-deps installs Debian's package)"
    work = tmp_path_factory.mktemp("prometheus")
    env = stack.stack_env()
    jobs = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: ['{env[variable].removeprefix('http://')}']\n"
        for job, variable in stack.ADMIN_URLS.items())
    (work / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{jobs}")
    port = next(stack.free_ports())
    log = open(work / "prometheus.log", "w")
    process = subprocess.Popen(
        [exe, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    prom = Prometheus(port)

    def ready():
        try:
            with urllib.request.urlopen(prom.base + "/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False
    try:
        wait_for(ready, what="Prometheus to be ready", timeout=60)
        # Every service is scraped over HTTP/1.1 and answers.
        for job in stack.ADMIN_URLS:
            wait_for(lambda: prom.value(f'up{{job="{job}"}}') == 1, what=f"Prometheus to scrape {job}", timeout=60)
        yield prom
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def token_request(request_id: str, tokens: list[str], trace_parent: str = "", expiration: int | None = None):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    notification = send.Notification(bundle_id=BUNDLE, environment=common.Environment.Value("SANDBOX"),
                                      push_type=common.PushType.Value("PUSH_TYPE_ALERT"), payload='{"aps":{"alert":"o11y"}}')
    if expiration is not None:
        notification.expiration = expiration
    return send.SendRequest(request_id=request_id, device_tokens=send.DeviceTokens(device_tokens=tokens),
                            notification=notification, trace_parent=trace_parent, created_at_ms=int(time.time() * 1000))


def feedback_of(reader, request_id: str, want_reports: int, timeout: float = 90.0):
    """(reports, completed, records) of `request_id` once its RequestCompleted and `want_reports` reports arrived."""
    def done(records):
        events = stack.decode_feedback(records)
        reports = [e for e in events if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id]
        completed = [e for e in events if e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id]
        return len(reports) >= want_reports and completed
    # Every record the reader read so far: a test waiting for several requests in turn finds the later
    # ones' records even when they arrived (on other partitions) while it waited for an earlier one.
    records = reader.read_until(done, timeout=timeout, since_start=True)
    events = stack.decode_feedback(records)
    mine = [(r, e) for r, e in zip(records, events)
            if (e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id)
            or (e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id)]
    reports = [e for _, e in mine if e.WhichOneof("event") == "delivery_report"]
    completed = [e for _, e in mine if e.WhichOneof("event") == "request_completed"][0]
    return reports, completed, [r for r, _ in mine]


def header(record, name: str) -> str | None:
    for key, value in record.headers() or []:
        if key == name:
            return value.decode()
    return None


def test_admin_ports_serve_metrics_and_probes_over_http1():
    for service in stack.ADMIN_URLS:
        status, body, headers = stack.admin(service, "/metrics")
        assert status == 200
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
        assert "# TYPE process_resident_memory_bytes gauge" in body
        assert "# TYPE process_open_fds gauge" in body
        assert "process_start_time_seconds " in body
        status, body, _ = stack.admin(service, "/healthz")
        assert status == 200 and body.startswith("ok\n"), body
        status, body, _ = stack.admin(service, "/readyz")
        assert status == 200 and body.startswith("ok\n"), body
    _, ready, _ = stack.admin("dispatcher", "/readyz")
    assert "ok kafka.consumer: joined" in ready and "ok postgres:" in ready and "info apns." in ready, ready
    assert stack.admin("dispatcher", "/nothing")[0] == 404


def test_the_running_dispatcher_allocates_with_jemalloc():
    """README "Operations", memory: the dispatcher is linked with jemalloc, ahead of the C library, so
    jemalloc's malloc and free serve the whole process (the first definition in load order wins)."""
    pid = stack.Dispatcher.stack().pid
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                        subprocess.run(["readelf", "-d", f"/proc/{pid}/exe"], capture_output=True, text=True, check=True).stdout)
    assert "libjemalloc.so.2" in needed and "libc.so.6" in needed, needed
    assert needed.index("libjemalloc.so.2") < needed.index("libc.so.6"), needed
    with open(f"/proc/{pid}/maps") as maps:
        assert "libjemalloc.so.2" in maps.read()


def test_prometheus_sees_counters_move_with_real_traffic(prometheus):
    delivered_before = prometheus.value('push_notifications_total{outcome="delivered"}')
    registrations_before = prometheus.value('push_registrations_total{operation="register",outcome="ok"}')
    writes_before = prometheus.value("push_send_log_writes_total")
    stages = ("consumed", "resolved", "sent")
    stages_before = {stage: prometheus.value(f'push_request_stage_seconds_count{{stage="{stage}"}}') for stage in stages}
    # The batches a user_ids request's look-ups and writes take (docs/observability.md "Where a request's time goes");
    # a first handling reads no progress (docs/dispatcher-engine.md "Records handled again").
    batchers = ("fingerprints", "user_tokens", "send_log", "completions")
    batches_before = {b: prometheus.value(f'push_batch_items_count{{batcher="{b}"}}') for b in batchers}
    user = f"user-{uuid.uuid4()}"
    tokens = [stack.random_token() for _ in range(3)]
    for i, token in enumerate(tokens):
        stack.register_token(token, BUNDLE, "SANDBOX", user_id=user, installation_id=f"o11y-{i}-{user}")
    wait_for(lambda: len(stack.psql(f"SELECT 1 FROM device_tokens WHERE user_id = '{user}'")) == 3, what="three token rows")
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        send = stack.pb("send_request_pb2")
        request = token_request(f"o11y-{uuid.uuid4()}", [])
        request.ClearField("device_tokens")
        request.user_ids.CopyFrom(send.UserIds(user_ids=[user]))
        stack.send_request(request)
        reports, _, _ = feedback_of(reader, request.request_id, 3)
    finally:
        reader.close()
    assert {r.delivery_report.outcome for r in reports} == {stack.pb("feedback_pb2").DeliveryOutcome.Value("DELIVERED")}
    wait_for(lambda: prometheus.value('push_notifications_total{outcome="delivered"}') >= delivered_before + 3,
             what="Prometheus to see 3 more delivered notifications")
    wait_for(lambda: prometheus.value('push_registrations_total{operation="register",outcome="ok"}') >= registrations_before + 3,
             what="Prometheus to see 3 more registrations")
    wait_for(lambda: prometheus.value("push_send_log_writes_total") >= writes_before + 3, what="send_log writes")
    wait_for(lambda: prometheus.value("push_token_events_applied_total") >= 3, what="token events applied")
    # Where a request's time goes: each stage of the request observed once more (docs/observability.md).
    for stage in stages:
        wait_for(lambda: prometheus.value(f'push_request_stage_seconds_count{{stage="{stage}"}}') >= stages_before[stage] + 1,
                 what=f"the request's {stage} stage observed")
    for batcher in batchers:
        wait_for(lambda: prometheus.value(f'push_batch_items_count{{batcher="{batcher}"}}') >= batches_before[batcher] + 1,
                 what=f"a {batcher} batch observed")
        assert prometheus.value(f'push_batch_duration_seconds_count{{batcher="{batcher}"}}') >= 1
        assert prometheus.value(f'push_batch_wait_seconds_count{{batcher="{batcher}"}}') >= 1
    # Consumer lag per partition comes from librdkafka's statistics, scraped like everything else.
    wait_for(lambda: prometheus.query('push_kafka_consumer_lag{topic="push.send-requests.v1"}'), what="consumer lag series")
    # So does the feedback producer's round trip per broker: it has just published this request's reports.
    wait_for(lambda: [s for s in prometheus.query("push_kafka_produce_rtt_seconds") if 0 < float(s["value"][1]) < 60],
             what="a produce round-trip series between 0 and 60 s")
    # And its broker threads' wake-ups (the spin of a round trip above linger.ms shows there).
    wait_for(lambda: [s for s in prometheus.query('push_kafka_producer_wakeups_total{job="dispatcher"}') if float(s["value"][1]) > 0],
             what="a producer wake-ups series above 0")
    # Both services export their producer's linger.ms beside its round trip, which PushKafkaProduceSlow
    # compares per process; the registration service's producer has just written the token events.
    assert prometheus.value('push_kafka_producer_linger_seconds{job="dispatcher"}') == 0.01
    assert prometheus.value('push_kafka_producer_linger_seconds{job="registration"}') == 0.005
    wait_for(lambda: [s for s in prometheus.query('push_kafka_produce_rtt_seconds{job="registration"}')
                      if 0 < float(s["value"][1]) < 60],
             what="a registration-service produce round-trip series between 0 and 60 s")
    wait_for(lambda: [s for s in prometheus.query('push_kafka_producer_wakeups_total{job="registration"}')
                      if float(s["value"][1]) > 0],
             what="a registration-service producer wake-ups series above 0")
    # The PostgreSQL pool: its connections by state (at least the one the request's statements used),
    # its bound, and the waits counter, which a scrape finds even when nothing has waited yet.
    wait_for(lambda: prometheus.value('sum(push_pg_pool_connections{state=~"idle|leased"})') >= 1, what="pool connections")
    assert prometheus.value("push_pg_pool_max_connections") == 10
    assert prometheus.query("push_pg_pool_waits_total") and prometheus.query("push_pg_pool_wait_seconds_total")
    for job in stack.ADMIN_URLS:
        assert prometheus.value(f'process_resident_memory_bytes{{job="{job}"}}') > 1_000_000


def test_errors_by_reason_after_410_and_503_and_readiness_ignores_apple(prometheus):
    gone, unavailable = stack.random_token(), stack.random_token()
    stack.simulator_admin("/admin/tokens/unregistered", "POST", {"token": gone})
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        gone_id = f"o11y-410-{uuid.uuid4()}"
        stack.send_request(token_request(gone_id, [gone]))
        reports, _, _ = feedback_of(reader, gone_id, 1)
        assert reports[0].delivery_report.apns_reason == "Unregistered"

        stack.simulator_admin("/admin/faults", "PUT", {"status_shares": {"503": 1.0}})
        unavailable_id = f"o11y-503-{uuid.uuid4()}"
        # 503 is retried until the notification's retry horizon: an apns-expiration 5 s ahead makes
        # it end (FAILED, Apple's last reason) within the test.
        stack.send_request(token_request(unavailable_id, [unavailable], expiration=int(time.time()) + 5))
        # While Apple answers 503, the replica stays ready; the body says what Apple does.
        seen_ready = 0
        deadline = time.monotonic() + 120
        collected: list = []
        reports = None
        while time.monotonic() < deadline:
            status, body, _ = stack.admin("dispatcher", "/readyz")
            assert status == 200, body
            seen_ready += 1
            collected += reader.drain(0.5)
            events = stack.decode_feedback(collected)
            done = [e for e in events if e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == unavailable_id]
            if done:
                reports = [e for e in events if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == unavailable_id]
                break
        assert reports, "no report for the 503 request"
        assert seen_ready >= 2
        assert reports[0].delivery_report.apns_reason == "ServiceUnavailable", reports[0]
        status, body, _ = stack.admin("dispatcher", "/readyz")
        assert status == 200 and re.search(r"info apns.reachability: [1-9]\d* notifications failed", body), body
    finally:
        stack.simulator_admin("/admin/faults", "PUT", {})
        reader.close()
    wait_for(lambda: prometheus.value('push_notifications_total{outcome="rejected",reason="Unregistered"}') >= 1,
             what="the Unregistered series")
    wait_for(lambda: prometheus.value('push_notifications_total{outcome="failed",reason="ServiceUnavailable"}') >= 1,
             what="the ServiceUnavailable series")


def test_readyz_turns_not_ready_without_postgresql_and_ready_when_it_returns():
    def readiness():
        status, body, _ = stack.admin("dispatcher", "/readyz")
        return status, body
    wait_for(lambda: readiness()[0] == 200, what="ready before the test")
    postgres = [str(stack.ROOT / "scripts" / "postgres-dev")]
    subprocess.run(postgres + ["stop"], check=True, capture_output=True)
    try:
        status, body = wait_for(lambda: (r := readiness())[0] == 503 and r, what="not ready without PostgreSQL", timeout=60)
        assert "failing postgres:" in body, body
        # Liveness is not readiness: the process is alive all along.
        assert stack.admin("dispatcher", "/healthz")[0] == 200
    finally:
        subprocess.run(postgres + ["start"], check=True, capture_output=True)
    status, body = wait_for(lambda: (r := readiness())[0] == 200 and r, what="ready again", timeout=90)
    assert "ok postgres:" in body


def test_healthz_fails_while_the_kafka_poll_thread_is_wedged():
    stall_ms = int(stack.process_environ("dispatcher").get("PUSH_HEALTH_MAX_LOOP_STALL_MS", "30000"))
    seconds = stall_ms // 1000 + 4
    status, body, _ = stack.admin("dispatcher", f"/debug/wedge-kafka-poll?seconds={seconds}", method="POST")
    if status == 404:
        pytest.skip("the stack runs without PUSH_ADMIN_TEST_HOOKS=1 (scripts/test sets it)")
    assert status == 200, body
    try:
        # Failing for the wedged thread (another loop late on a loaded machine fails /healthz too, but
        # names itself).
        status, body = wait_for(
            lambda: (r := stack.admin("dispatcher", "/healthz"))[0] == 503
            and "failing heartbeat kafka-consumer-poll: has not come round" in r[1] and r[:2],
            what="/healthz to fail naming the Kafka poll thread", timeout=stall_ms / 1000 + 30)
        # Other services are unaffected.
        assert stack.admin("registration", "/healthz")[0] == 200
    finally:
        # The dispatcher comes back once the thread returns (and the next test finds it unwedged).
        wait_for(lambda: stack.admin("dispatcher", "/healthz")[0] == 200, what="/healthz to pass again", timeout=seconds + 60)
    wait_for(lambda: stack.admin("dispatcher", "/readyz")[0] == 200, what="/readyz to pass again", timeout=60)


def test_traceparent_comes_back_on_the_reports_and_the_completion():
    in_header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    in_field = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        cases = []
        # The record's traceparent header wins over the field; the field alone is used; without either a
        # new trace is started; an invalid header falls back to the field.
        for header_value, field, expected in [(in_header, in_field, in_header), (None, in_field, in_field),
                                              (None, "", None), ("garbage", in_field, in_field)]:
            request_id = f"o11y-trace-{uuid.uuid4()}"
            headers = [("traceparent", header_value.encode())] if header_value else []
            stack.send_request(token_request(request_id, [stack.random_token(), stack.random_token()], trace_parent=field),
                               headers=headers)
            cases.append((request_id, expected))
        for request_id, expected in cases:
            reports, completed, records = feedback_of(reader, request_id, 2)
            traces = {e.trace_parent for e in reports} | {completed.trace_parent}
            assert len(traces) == 1, traces
            trace = traces.pop()
            if expected:
                assert trace == expected
            else:
                assert TRACE_RE.match(trace) and trace not in (in_header, in_field), trace
            assert {header(r, "traceparent") for r in records} == {trace}
    finally:
        reader.close()


def test_a_wait_for_one_request_keeps_what_it_read_of_another():
    # The kind of fault that failed a CI run: waits for several requests in turn on one reader, each
    # returning only what it read itself, lost the records of a request that finished (on another
    # partition) while the reader waited for an earlier one.
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        first, second = f"o11y-wait-{uuid.uuid4()}", f"o11y-wait-{uuid.uuid4()}"
        for request_id in (first, second):
            stack.send_request(token_request(request_id, [stack.random_token()]))
        def both_completed(records):
            done = {e.request_completed.request_id for e in stack.decode_feedback(records)
                    if e.WhichOneof("event") == "request_completed"}
            return {first, second} <= done
        reader.read_until(both_completed, timeout=90)
        # Everything of both is read already: a later wait finds it in what was read before.
        for request_id in (second, first):
            reports, completed, _ = feedback_of(reader, request_id, 1, timeout=2)
            assert completed.request_completed.request_id == request_id and len(reports) == 1
    finally:
        reader.close()


def test_a_registrations_traceparent_is_carried_onto_its_token_event():
    trace = "00-11112222333344445555666677778888-1234567890abcdef-01"
    reader = stack.TopicReader(stack.TOKEN_EVENTS)
    try:
        token = stack.random_token()
        stack.register_token(token, BUNDLE, "SANDBOX", user_id="o11y-trace", installation_id=f"o11y-{token[:8]}",
                             metadata=[("traceparent", trace)])
        other = stack.random_token()
        stack.register_token(other, BUNDLE, "SANDBOX", user_id="o11y-trace", installation_id=f"o11y-{other[:8]}")
        records = reader.read_until(lambda rs: {r.key().decode() for r in rs} >= {token, other})
    finally:
        reader.close()
    by_key = {r.key().decode(): r for r in records}
    assert header(by_key[token], "traceparent") == trace
    fresh = header(by_key[other], "traceparent")
    assert fresh and TRACE_RE.match(fresh) and fresh != trace
