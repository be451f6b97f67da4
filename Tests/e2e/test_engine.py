"""The dispatcher's engine on the real stack: what a SIGTERM, a second replica and an oversized
record do to commits (docs/dispatcher-engine.md).

Each test restores the stack's single dispatcher before it ends (same binary, same environment).
"""
from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

import pushstack as stack
from pushstack import RequestFeedback as Feedback

GROUP = "push-dispatcher"
BUNDLE = "com.example.engine"


wait_for = stack.wait_for


def user_request(request_id: str, user_id: str):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    return send.SendRequest(
        request_id=request_id, user_ids=send.UserIds(user_ids=[user_id]),
        notification=send.Notification(bundle_id=BUNDLE, environment=common.Environment.Value("SANDBOX"),
                                        push_type=common.PushType.Value("PUSH_TYPE_ALERT"), payload='{"aps":{"alert":"engine"}}'))


def test_sigterm_mid_request_exits_gracefully_and_the_restart_finishes_every_token(slow_apple):
    dispatcher = stack.Dispatcher.stack()
    argv, env = dispatcher.launch_spec()
    user = f"engine-term-{uuid.uuid4()}"
    tokens = set(stack.insert_tokens(user, 10_000, BUNDLE))
    request_id = f"term-{uuid.uuid4()}"
    partition = 2
    offset = stack.produced_offset(stack.SEND_REQUESTS, partition)
    feedback = Feedback(request_id)
    try:
        stack.send_request(user_request(request_id, user), partition=partition)
        feedback.until(lambda f: len(f.reports) >= 1_000, "the first 1,000 reports")
        started = time.monotonic()
        os.kill(dispatcher.pid, signal.SIGTERM)
        dispatcher.exit_status(timeout=30)
        elapsed = time.monotonic() - started
        log = dispatcher.log.read_text(errors="replace").split("dispatcher ready")[-1]
        assert "outcome=graceful" in log or '"outcome":"graceful"' in log, log[-2000:]  # logfmt or LOG_FORMAT=json
        assert elapsed < 30
        assert stack.committed(stack.SEND_REQUESTS, partition) <= offset, "the unfinished request's offset was committed"
        feedback.poll(1.0)
        before_restart = len({e.delivery_report.device_token for e in feedback.reports})
        assert before_restart < len(tokens), "the request finished before the SIGTERM: make it slower"
        assert not feedback.completed

        stack.Dispatcher.start(argv, env, dispatcher.log, stack.VAR_DIR / "run" / "dispatcher.pid")
        feedback.until(lambda f: f.completed, "the RequestCompleted after the restart")
        feedback.poll(2.0)
    finally:
        feedback.close()
        if not stack.Dispatcher.stack().alive():
            stack.Dispatcher.start(argv, env, dispatcher.log, stack.VAR_DIR / "run" / "dispatcher.pid")

    by_token: dict[str, set[str]] = {}
    for event in feedback.reports:
        by_token.setdefault(event.delivery_report.device_token, set()).add(event.event_id)
    assert set(by_token) == tokens
    assert all(len(ids) == 1 for ids in by_token.values()), "a token got two different final reports"
    # Reports acknowledged before the SIGTERM are not published again after the restart.
    assert len(feedback.reports) == len(tokens), f"{len(feedback.reports) - len(tokens)} repeated reports"
    assert len({e.event_id for e in feedback.completed}) == 1
    completed = feedback.completed[0].request_completed
    assert (completed.total, completed.delivered) == (10_000, 10_000)
    assert stack.committed(stack.SEND_REQUESTS, partition) == wait_for(
        lambda: stack.committed(stack.SEND_REQUESTS, partition) if stack.committed(stack.SEND_REQUESTS, partition) > offset else None,
        what="the request's offset to be committed", timeout=30)


def test_a_second_sigterm_during_the_drain_exits_at_once_without_committing(slow_apple):
    dispatcher = stack.Dispatcher.stack()
    argv, env = dispatcher.launch_spec()
    user = f"engine-term2-{uuid.uuid4()}"
    stack.insert_tokens(user, 3_000, BUNDLE)
    request_id = f"term2-{uuid.uuid4()}"
    partition = 3
    offset = stack.produced_offset(stack.SEND_REQUESTS, partition)
    feedback = Feedback(request_id)
    try:
        # Apple stops answering: the notifications in flight cannot finish, so the drain would last.
        stack.simulator_admin("/admin/faults", "PUT", {"unanswered_share": 1.0})
        sent_at = stack.simulator_admin("/admin/clock")["now_ms"]
        stack.send_request(user_request(request_id, user), partition=partition)
        wait_for(lambda: stack.simulator_requests(since_ms=sent_at, limit=1), what="pushes reaching the simulator")
        os.kill(dispatcher.pid, signal.SIGTERM)
        wait_for(lambda: "dispatcher stopping" in dispatcher.log.read_text(errors="replace").split("dispatcher ready")[-1],
                 what="graceful shutdown to start")
        started = time.monotonic()
        os.kill(dispatcher.pid, signal.SIGTERM)
        dispatcher.exit_status(timeout=10)
        assert time.monotonic() - started < 10
        assert stack.committed(stack.SEND_REQUESTS, partition) <= offset
    finally:
        stack.simulator_admin("/admin/faults", "PUT", {})
        feedback.close()
        if not stack.Dispatcher.stack().alive():
            stack.Dispatcher.start(argv, env, dispatcher.log, stack.VAR_DIR / "run" / "dispatcher.pid")
    # The restarted dispatcher finishes the request.
    feedback = Feedback(request_id)
    try:
        # Drop the connections the old process left: nothing to wait for; the new one re-sends.
        feedback.until(lambda f: f.completed, "the RequestCompleted after the restart", timeout=180)
    finally:
        feedback.close()


def test_a_second_replica_joining_mid_request_takes_over_without_repeats(slow_apple):
    dispatcher = stack.Dispatcher.stack()
    argv, env = dispatcher.launch_spec()
    user = f"engine-join-{uuid.uuid4()}"
    tokens = set(stack.insert_tokens(user, 10_000, BUNDLE))
    request_ids = [f"join-{p}-{uuid.uuid4()}" for p in range(4)]
    feedbacks = {rid: Feedback(rid) for rid in request_ids}
    second_log = stack.VAR_DIR / "log" / "dispatcher-2.log"
    marks = [stack.LogMark(dispatcher.log), stack.LogMark(second_log)]  # earlier tests' lines are not this test's
    second = None
    try:
        for partition, rid in enumerate(request_ids):
            stack.send_request(user_request(rid, user), partition=partition)
        first = feedbacks[request_ids[0]]
        first.until(lambda f: len(f.reports) >= 500, "the first reports")
        # A second replica on this host needs an admin port of its own (0: the kernel picks one).
        env2 = {**env, "PUSH_INSTANCE_ID": f"second-{uuid.uuid4().hex[:8]}", "PUSH_ADMIN_PORT": "0"}
        second = stack.Dispatcher.start(argv, env2, second_log)
        for rid, feedback in feedbacks.items():
            feedback.until(lambda f: f.completed, f"the RequestCompleted of {rid}", timeout=240)
        for feedback in feedbacks.values():
            feedback.poll(1.0)
    finally:
        for feedback in feedbacks.values():
            feedback.close()
        if second is not None:
            os.kill(second.pid, signal.SIGTERM)
            second.exit_status(timeout=40)
            # The group settles before the next test: the stack's dispatcher owns every partition again
            # (the test broker may only notice the departure after the session timeout; a rebalance
            # during the next test would stall its partitions for seconds).
            stack.wait_split([dispatcher], timeout=90)
    logs = "".join(mark.text() for mark in marks)
    assert "lost=true" not in logs and '"lost":"true"' not in logs, "a replica lost its partitions (left the group)"
    for rid, feedback in feedbacks.items():
        ids_by_token: dict[str, set[str]] = {}
        for event in feedback.reports:
            ids_by_token.setdefault(event.delivery_report.device_token, set()).add(event.event_id)
        assert set(ids_by_token) == tokens, rid
        assert all(len(ids) == 1 for ids in ids_by_token.values()), f"{rid}: a token got two different reports"
        # No repeated report for tokens finished before a revocation: the old owner drained them.
        assert len(feedback.reports) == len(tokens), f"{rid}: {len(feedback.reports) - len(tokens)} repeated reports"
        # At most one repeat of RequestCompleted, carrying the same event id.
        assert 1 <= len(feedback.completed) <= 2
        assert len({e.event_id for e in feedback.completed}) == 1


def test_a_send_request_larger_than_the_producer_limit_is_dead_lettered_truncated_and_the_next_is_delivered():
    import hashlib
    from confluent_kafka import Producer
    dead = stack.pb("dead_letter_pb2")
    big_id = f"huge-{uuid.uuid4()}"
    value = b"\x0a" + b"x" * 1_500_000  # not a valid SendRequest either; far above message.max.bytes (1 MB)
    partition = 1
    producer = Producer({**stack.kafka_config(), "message.max.bytes": 4_000_000})
    errors: list = []
    producer.produce(stack.SEND_REQUESTS, key=big_id.encode(), value=value, partition=partition,
                     headers=[("content-type", b"application/x-protobuf; message=push.v1.SendRequest")],
                     on_delivery=lambda err, msg: errors.append(err) if err else None)
    producer.flush(15)
    assert not errors, errors
    token = stack.random_token()
    next_id = f"after-huge-{uuid.uuid4()}"
    letters = stack.TopicReader(stack.DEAD_LETTER)
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        from test_walking_skeleton import token_request
        stack.send_request(token_request(next_id, token), partition=partition)
        report = stack.delivery_report(reader, next_id, timeout=60)
        records = letters.read_until(lambda rs: any(r.key() == big_id.encode() for r in rs), timeout=30)
    finally:
        reader.close()
        letters.close()
    assert report.outcome == stack.pb("feedback_pb2").DeliveryOutcome.Value("DELIVERED")
    record = [r for r in records if r.key() == big_id.encode()][0]
    assert len(record.value()) <= 1_000_000
    letter = dead.DeadLetter()
    letter.ParseFromString(record.value())
    assert letter.original_value_size == len(value)
    assert letter.original_value_sha256 == hashlib.sha256(value).digest()
    assert letter.original_value_truncated
    assert value.startswith(letter.original_value) and 0 < len(letter.original_value) < len(value)


def test_a_throttled_device_does_not_delay_other_tokens_of_its_partition():
    from test_walking_skeleton import token_request
    throttled, other, unrelated = stack.random_token(), stack.random_token(), stack.random_token()
    partition = 0
    first, second, third, baseline_id = (f"throttle-{n}-{uuid.uuid4()}" for n in (1, 2, 3, 4))
    # Measured on a settled group: a rebalance in the middle would stall the partition for seconds.
    stack.wait_split([stack.Dispatcher.stack()], timeout=90)
    reader = stack.TopicReader(stack.FEEDBACK)

    def report_of(request_id):
        return lambda rs: any(e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id
                              for e in stack.decode_feedback(rs))
    try:
        # The time a report takes on this machine now, with nothing throttled (the machine may be loaded).
        started = time.monotonic()
        stack.send_request(token_request(baseline_id, unrelated), partition=partition)
        reader.read_until(report_of(baseline_id), timeout=30)
        baseline = time.monotonic() - started
        # Apple answers 429 TooManyRequests for a device past one push a minute.
        stack.simulator_admin("/admin/faults", "PUT", {"token_rate_limit": {"max_pushes": 1, "window_ms": 60000}})
        stack.send_request(token_request(first, throttled), partition=partition)
        stack.delivery_report(reader, first)
        stack.send_request(token_request(second, throttled), partition=partition)
        wait_for(lambda: len(stack.simulator_requests(throttled)) >= 2, what="the throttled push reaching the simulator")
        started = time.monotonic()
        stack.send_request(token_request(third, other), partition=partition)
        records = reader.read_until(report_of(third), timeout=10)
        elapsed = time.monotonic() - started
        # And once more unthrottled, right after: the slower of the two is what this machine's load
        # allows (other work shares its two cores).
        stack.simulator_admin("/admin/faults", "PUT", {})
        started = time.monotonic()
        stack.send_request(token_request(baseline_id + "-after", stack.random_token()), partition=partition)
        reader.read_until(report_of(baseline_id + "-after"), timeout=30)
        baseline = max(baseline, time.monotonic() - started)
    finally:
        stack.simulator_admin("/admin/faults", "PUT", {})
        reader.close()
    events = stack.decode_feedback(records)
    # Within a second of what an unthrottled report took just before (the throttled device waits a
    # minute): the throttled request holds nothing the other one needs.
    assert elapsed < baseline + 1.0, f"the other device's report took {elapsed:.2f} s (unthrottled: {baseline:.2f} s)"
    # The throttled request was still waiting for its retry when the other one finished.
    assert not [e for e in events if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == second]
