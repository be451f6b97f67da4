"""The opt-in try on the other APNs environment after BadDeviceToken, on the real stack
(docs/semantics.md "The other environment after BadDeviceToken"): the simulator's two listeners
answer by the environment each token was registered to through its admin API; the stack's dispatcher
is restarted with one app opted in (PUSH_APNS_OTHER_ENVIRONMENT_RETRY) and restored afterwards.
"""
from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest

import pushstack as stack
from pushstack import Dispatcher, wait_for

OPTED_IN = "com.example.envretry"
NOT_OPTED_IN = "com.example.e2e"


@pytest.fixture(scope="module", autouse=True)
def opted_in_dispatcher():
    """The stack's dispatcher, restarted with OPTED_IN in PUSH_APNS_OTHER_ENVIRONMENT_RETRY."""
    original = Dispatcher.stack()
    argv, env = original.launch_spec()
    run = stack.VAR_DIR / "run" / "dispatcher.pid"
    os.kill(original.pid, signal.SIGTERM)
    original.exit_status(timeout=60)
    dispatcher = Dispatcher.start(argv, {**env, "PUSH_APNS_OTHER_ENVIRONMENT_RETRY": OPTED_IN}, original.log, pid_file=run)
    try:
        yield dispatcher
    finally:
        if dispatcher.alive():
            os.kill(dispatcher.pid, signal.SIGTERM)
            dispatcher.exit_status(timeout=60)
        Dispatcher.start(argv, env, original.log, pid_file=run)


def register_production_token(bundle: str, simulator_environment: str) -> tuple[str, str]:
    """Registers a new token as PRODUCTION for a new user through the registration service, tells the
    simulator which environment really issued it ("sandbox", "production" or "none"), and waits for
    the row. Returns (token, user)."""
    token, user = stack.random_token(), f"user-{uuid.uuid4()}"
    stack.simulator_admin("/admin/tokens", "POST", {"token": token, "environment": simulator_environment, "bundle_id": bundle})
    stack.register_token(token, bundle, "PRODUCTION", user_id=user, installation_id=f"inst-{user}")
    wait_for(lambda: stack.psql(f"SELECT 1 FROM device_tokens WHERE device_token = '{token}'"), what="token row")
    return token, user


def send_to_user(user: str, bundle: str, environment: str | None = None):
    """Sends an alert to `user` and returns (request id, its reports, its RequestCompleted events, the
    TokenInvalidated events of the feedback topic meanwhile), once the request completed."""
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    request_id = f"envretry-{uuid.uuid4()}"
    notification = send.Notification(bundle_id=bundle, push_type=common.PushType.Value("PUSH_TYPE_ALERT"),
                                      payload=json.dumps({"aps": {"alert": "which environment?"}}, separators=(",", ":")))
    if environment:
        notification.environment = common.Environment.Value(environment)
    request = send.SendRequest(request_id=request_id, user_ids=send.UserIds(user_ids=[user]), notification=notification,
                               created_at_ms=int(time.time() * 1000))
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        stack.send_request(request)
        records = reader.read_until(lambda rs: any(
            e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id
            for e in stack.decode_feedback(rs)), timeout=90)
        # A TokenInvalidated is published before the report is recorded, so it is already here; a
        # short drain would catch a late repeat.
        records += reader.drain(seconds=1.0)
    finally:
        reader.close()
    events = stack.decode_feedback(records)
    reports = [e.delivery_report for e in events
               if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id]
    completed = [e.request_completed for e in events
                 if e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id]
    invalidated = [e.token_invalidated for e in events
                   if e.WhichOneof("event") == "token_invalidated" and e.token_invalidated.request_id == request_id]
    return request_id, reports, completed, invalidated


def simulator_tries(token: str) -> list[tuple[str, int, str]]:
    """What the simulator answered for `token`: (environment, status, reason) per request, in order."""
    return [(r["environment"], r["status"], r.get("reason", ""))
            for r in stack.simulator_requests(token)]


def row(token: str) -> list[list[str]]:
    return stack.psql(f"SELECT environment, status, coalesce(inactive_reason, '') FROM device_tokens WHERE device_token = '{token}'")


def send_log(request_id: str) -> list[list[str]]:
    return stack.psql(f"SELECT device_token, outcome, http_status, apns_reason, attempts FROM send_log_all WHERE request_id = '{request_id}'")


def metric(result: str) -> float:
    _, body, _ = stack.admin("dispatcher", "/metrics")
    prefix = f'push_other_environment_tries_total{{result="{result}"}} '
    return sum(float(line[len(prefix):]) for line in body.splitlines() if line.startswith(prefix))


def test_a_sandbox_token_registered_as_production_is_delivered_via_sandbox_and_corrected():
    feedback = stack.pb("feedback_pb2")
    common = stack.pb("common_pb2")
    token, user = register_production_token(OPTED_IN, "sandbox")
    corrected_before = metric("corrected")
    request_id, reports, completed, invalidated = send_to_user(user, OPTED_IN)

    assert len(reports) == 1, reports
    report = reports[0]
    assert report.outcome == feedback.DeliveryOutcome.Value("DELIVERED")
    # The report names the environment that delivered: sandbox, not the registered production.
    assert report.environment == common.Environment.Value("SANDBOX")
    assert (report.http_status, report.apns_reason, report.attempts) == (200, "", 2)
    assert report.outcome_reason == feedback.OutcomeReason.Value("OUTCOME_REASON_UNSPECIFIED")
    assert report.apns_unique_id, "the sandbox answer's apns-unique-id"
    assert [(c.total, c.delivered, c.rejected) for c in completed] == [(1, 1, 0)]
    assert invalidated == []
    # One try per environment, in order; the stored environment is now sandbox and the token active.
    assert simulator_tries(token) == [("production", 400, "BadDeviceToken"), ("sandbox", 200, "")]
    assert row(token) == [["sandbox", "active", ""]]
    assert send_log(request_id) == [[token, "DELIVERED", "200", "", "2"]]
    assert metric("corrected") >= corrected_before + 1

    # The next push goes straight to sandbox.
    _, reports, _, _ = send_to_user(user, OPTED_IN)
    assert [(r.outcome, r.environment, r.attempts) for r in reports] == [
        (feedback.DeliveryOutcome.Value("DELIVERED"), common.Environment.Value("SANDBOX"), 1)]
    assert simulator_tries(token)[2:] == [("sandbox", 200, "")]


def test_without_the_opt_in_a_bad_device_token_deactivates_as_before():
    feedback = stack.pb("feedback_pb2")
    common = stack.pb("common_pb2")
    token, user = register_production_token(NOT_OPTED_IN, "sandbox")
    request_id, reports, completed, invalidated = send_to_user(user, NOT_OPTED_IN)

    assert [(r.outcome, r.environment, r.http_status, r.apns_reason, r.attempts) for r in reports] == [
        (feedback.DeliveryOutcome.Value("REJECTED"), common.Environment.Value("PRODUCTION"), 400, "BadDeviceToken", 1)]
    assert [(i.device_token, i.apns_reason, i.environment, i.user_id) for i in invalidated] == [
        (token, "BadDeviceToken", common.Environment.Value("PRODUCTION"), user)]
    assert [(c.total, c.rejected) for c in completed] == [(1, 1)]
    assert simulator_tries(token) == [("production", 400, "BadDeviceToken")]
    assert row(token) == [["production", "inactive", "BadDeviceToken"]]
    assert send_log(request_id) == [[token, "REJECTED", "400", "BadDeviceToken", "1"]]


def test_opted_in_but_refused_by_both_environments_is_deactivated_after_one_try_each():
    feedback = stack.pb("feedback_pb2")
    common = stack.pb("common_pb2")
    token, user = register_production_token(OPTED_IN, "none")
    refused_before = metric("refused")
    request_id, reports, completed, invalidated = send_to_user(user, OPTED_IN)

    # As without the opt-in: the registered environment's BadDeviceToken, only attempts count the try.
    assert [(r.outcome, r.environment, r.http_status, r.apns_reason, r.attempts) for r in reports] == [
        (feedback.DeliveryOutcome.Value("REJECTED"), common.Environment.Value("PRODUCTION"), 400, "BadDeviceToken", 2)]
    assert [(i.device_token, i.apns_reason, i.environment) for i in invalidated] == [
        (token, "BadDeviceToken", common.Environment.Value("PRODUCTION"))]
    assert [(c.total, c.rejected) for c in completed] == [(1, 1)]
    assert simulator_tries(token) == [("production", 400, "BadDeviceToken"), ("sandbox", 400, "BadDeviceToken")]
    assert row(token) == [["production", "inactive", "BadDeviceToken"]]
    assert send_log(request_id) == [[token, "REJECTED", "400", "BadDeviceToken", "2"]]
    assert metric("refused") >= refused_before + 1


def test_a_request_that_names_the_environment_never_reaches_the_other_one():
    # A production-only push must not reach a device of the other environment, even for an app
    # that opted in: deactivated as before, nothing sent to sandbox.
    feedback = stack.pb("feedback_pb2")
    token, user = register_production_token(OPTED_IN, "sandbox")
    _, reports, _, invalidated = send_to_user(user, OPTED_IN, environment="PRODUCTION")
    assert [(r.outcome, r.apns_reason, r.attempts) for r in reports] == [(feedback.DeliveryOutcome.Value("REJECTED"), "BadDeviceToken", 1)]
    assert [i.device_token for i in invalidated] == [token]
    assert simulator_tries(token) == [("production", 400, "BadDeviceToken")]
    assert row(token) == [["production", "inactive", "BadDeviceToken"]]
