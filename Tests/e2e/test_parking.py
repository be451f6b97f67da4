"""Retries off the hot path on the real stack (docs/dispatcher-engine.md "Retries off the hot path,
and parking"): while APNs fails, notifications waiting for a retry are parked in pending_retries
once their partition's uncommitted span is full, the partition's offset moves on, and after the
outage every parked notification is delivered exactly once with one RequestCompleted per request.
"""
from __future__ import annotations

import collections
import signal
import time
import uuid

import pushstack as stack
from pushstack import Dispatcher, committed, produced_offset
from test_walking_skeleton import token_request

CAP = 5


def restart_stack_dispatcher(overrides: dict[str, str]) -> tuple[Dispatcher, list[str], dict[str, str]]:
    """Stops the stack's dispatcher gracefully and starts one with `overrides` in its environment."""
    original = Dispatcher.stack()
    argv, env = original.launch_spec()
    original_env = dict(env)
    import os
    os.kill(original.pid, signal.SIGTERM)
    original.exit_status(timeout=60)
    run = stack.VAR_DIR / "run" / "dispatcher.pid"
    dispatcher = Dispatcher.start(argv, {**env, **overrides}, stack.VAR_DIR / "log" / "dispatcher.log", pid_file=run)
    return dispatcher, argv, original_env


def restore(dispatcher: Dispatcher, argv: list[str], env: dict[str, str]) -> None:
    import os
    if dispatcher.alive():
        os.kill(dispatcher.pid, signal.SIGTERM)
        dispatcher.exit_status(timeout=60)
    Dispatcher.start(argv, env, stack.VAR_DIR / "log" / "dispatcher.log", pid_file=stack.VAR_DIR / "run" / "dispatcher.pid")


def test_past_the_uncommitted_cap_waiting_retries_are_parked_and_delivered_once_after_the_outage():
    dispatcher, argv, env = restart_stack_dispatcher({
        "PUSH_MAX_UNCOMMITTED_RECORDS": str(CAP), "PUSH_PENDING_RETRY_SCAN_MS": "200",
    })
    partition = 1
    prefix = f"parked-{uuid.uuid4()}"
    requests = {f"{prefix}-{n}": stack.random_token() for n in range(4 * CAP)}
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        # APNs answers 503 ServiceUnavailable to everything: every notification waits for a retry.
        stack.simulator_admin("/admin/faults", "PUT", {"status_shares": {"503": 1.0}})
        start = produced_offset(stack.SEND_REQUESTS, partition)
        for request_id, token in requests.items():
            stack.send_request(token_request(request_id, token), partition=partition)
        end = start + len(requests)
        # The partition's offset reaches its end while APNs still fails: each waiting notification
        # was parked, so its record finished.
        stack.wait_for(lambda: committed(stack.SEND_REQUESTS, partition) >= end, timeout=120,
                       what="the partition's committed offset to reach its end during the outage")
        parked = stack.psql(f"SELECT count(*) FROM pending_retries WHERE request_id LIKE '{prefix}-%'")
        assert int(parked[0][0]) == len(requests)
        waiting = stack.psql(f"SELECT count(*) FROM pending_requests WHERE request_id LIKE '{prefix}-%' AND record_done")
        assert int(waiting[0][0]) == len(requests)
        counters = stack.simulator_admin("/admin/counters")["counters"]
        assert any(key.startswith("503") and count > 0 for key, count in counters.items()), "no 503 reached the dispatcher"
        early = [e for e in stack.decode_feedback(reader.drain(0.5))
                 if e.WhichOneof("event") in ("delivery_report", "request_completed")
                 and getattr(e, e.WhichOneof("event")).request_id.startswith(prefix)]
        assert early == [], "an outcome was published for a parked notification during the outage"

        # APNs recovers: the re-drive timer delivers each parked notification.
        stack.simulator_admin("/admin/faults", "PUT", {})
        events: list = []

        def all_completed(records) -> bool:
            events.extend(e for e in stack.decode_feedback(records)
                          if e.WhichOneof("event") in ("delivery_report", "request_completed")
                          and getattr(e, e.WhichOneof("event")).request_id.startswith(prefix))
            return len({e.request_completed.request_id for e in events if e.WhichOneof("event") == "request_completed"}) >= len(requests)

        stack.wait_for(lambda: all_completed(reader.drain(0.3)), timeout=120, interval=0,
                       what="a RequestCompleted for every request after the outage")
        events.extend(e for e in stack.decode_feedback(reader.drain(1.0))
                      if e.WhichOneof("event") in ("delivery_report", "request_completed")
                      and getattr(e, e.WhichOneof("event")).request_id.startswith(prefix))
    finally:
        stack.simulator_admin("/admin/faults", "PUT", {})
        reader.close()
        restore(dispatcher, argv, env)

    feedback = stack.pb("feedback_pb2")
    reports = [e.delivery_report for e in events if e.WhichOneof("event") == "delivery_report"]
    completed = [e.request_completed for e in events if e.WhichOneof("event") == "request_completed"]
    assert sorted(r.request_id for r in reports) == sorted(requests), "not exactly one report per request"
    assert all(r.outcome == feedback.DeliveryOutcome.Value("DELIVERED") for r in reports)
    # Attempts answered 503 during the outage count (while the circuit breaker is open a notification
    # waits without spending attempts, so not every one of them has more than its final attempt).
    assert all(r.attempts >= 1 for r in reports)
    assert sum(r.attempts for r in reports) > len(reports), "the attempts during the outage were not counted"
    assert sorted(c.request_id for c in completed) == sorted(requests), "not exactly one RequestCompleted per request"
    assert all((c.total, c.delivered, c.status) == (1, 1, feedback.RequestStatus.Value("REQUEST_STATUS_COMPLETED")) for c in completed)
    # Apple accepted each token exactly once.
    accepted = collections.Counter(token for token in set(requests.values())
                                   for r in stack.simulator_requests(token) if r["status"] == 200)
    assert accepted == collections.Counter(requests.values())
    left = stack.psql(f"SELECT (SELECT count(*) FROM pending_retries WHERE request_id LIKE '{prefix}-%'),"
                      f" (SELECT count(*) FROM pending_requests WHERE request_id LIKE '{prefix}-%')")
    assert left == [["0", "0"]]


def test_a_burst_to_a_throttled_device_holds_no_slot_of_its_partition():
    """Ten requests to one device that Apple throttles (429 for a minute) on a partition with 4
    in-flight slots: another device's request on that partition is not held behind them."""
    dispatcher, argv, env = restart_stack_dispatcher({"PUSH_MAX_IN_FLIGHT_PER_PARTITION": "4"})
    partition = 2
    throttled, other, unrelated = stack.random_token(), stack.random_token(), stack.random_token()
    prefix = f"burst-{uuid.uuid4()}"
    reader = stack.TopicReader(stack.FEEDBACK)

    def report_of(request_id):
        return lambda rs: any(e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id
                              for e in stack.decode_feedback(rs))
    try:
        started = time.monotonic()
        stack.send_request(token_request(f"{prefix}-baseline", unrelated), partition=partition)
        reader.read_until(report_of(f"{prefix}-baseline"), timeout=60)
        baseline = time.monotonic() - started
        stack.simulator_admin("/admin/faults", "PUT", {"token_rate_limit": {"max_pushes": 1, "window_ms": 60000}})
        for n in range(10):
            stack.send_request(token_request(f"{prefix}-{n}", throttled), partition=partition)
        # Every slot's request has reached Apple and been refused at least once.
        stack.wait_for(lambda: len([r for r in stack.simulator_requests(throttled) if r["status"] == 429]) >= 4,
                       what="the throttled requests answered 429", timeout=60)
        started = time.monotonic()
        stack.send_request(token_request(f"{prefix}-other", other), partition=partition)
        records = reader.read_until(report_of(f"{prefix}-other"), timeout=30)
        elapsed = time.monotonic() - started
        # And once more unthrottled, right after: the slower of the two is what this machine's load
        # allows (other work shares its two cores).
        stack.simulator_admin("/admin/faults", "PUT", {})
        started = time.monotonic()
        stack.send_request(token_request(f"{prefix}-baseline-after", stack.random_token()), partition=partition)
        reader.read_until(report_of(f"{prefix}-baseline-after"), timeout=60)
        baseline = max(baseline, time.monotonic() - started)
    finally:
        stack.simulator_admin("/admin/faults", "PUT", {})
        reader.close()
        restore(dispatcher, argv, env)
    throttled_reports = [e for e in stack.decode_feedback(records) if e.WhichOneof("event") == "delivery_report"
                         and e.delivery_report.device_token == throttled and e.delivery_report.request_id != f"{prefix}-0"]
    assert elapsed < baseline + 1.0, f"the other device's report took {elapsed:.2f} s (unthrottled just before: {baseline:.2f} s)"
    assert len(throttled_reports) < 9, "the throttled requests were not waiting when the other one finished"
