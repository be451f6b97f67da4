"""Request status on the real stack (docs/campaigns.md "Request status"): `pushctl status` and the
dispatcher's admin port `GET /v1/requests/<id>` answer from PostgreSQL for scheduled, cancelled,
finished campaign and immediate requests, and say "not found" (exit 5, 404) for unknown ones."""
from __future__ import annotations

import json
import time
import urllib.parse
import uuid

import pushstack as stack
from pushstack import RequestFeedback as Feedback
from test_campaigns import audience_request, cancel, seed
from test_pushctl import pushctl

wait_for = stack.wait_for


def http_status(request_id: str) -> tuple[int, dict]:
    status, body, headers = stack.admin("dispatcher", "/v1/requests/" + urllib.parse.quote(request_id, safe=""))
    assert headers.get("Content-Type") == "application/json", headers
    return status, json.loads(body)


def cli_status(request_id: str) -> tuple[int, str, dict | None]:
    line = pushctl("status", request_id)
    as_json = pushctl("status", request_id, "--json")
    assert line.returncode == as_json.returncode, (line, as_json)
    return line.returncode, line.stdout.strip() + line.stderr.strip(), json.loads(as_json.stdout) if as_json.returncode == 0 else None


def scheduled_request(request_id: str, token: str, bundle: str, send_at_ms: int):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    return send.SendRequest(
        request_id=request_id, device_tokens=send.DeviceTokens(device_tokens=[token]), send_at_ms=send_at_ms,
        notification=send.Notification(bundle_id=bundle, environment=common.Environment.Value("SANDBOX"),
                                        push_type=common.PushType.Value("PUSH_TYPE_ALERT"), payload='{"aps":{"alert":"later"}}'))


def test_a_scheduled_request_is_scheduled_then_cancelled():
    bundle = f"com.example.status{uuid.uuid4().hex[:8]}"
    request_id = f"status-scheduled-{uuid.uuid4()}"
    send_at = int(time.time() * 1000) + 600_000
    feedback = Feedback(request_id)
    try:
        stack.send_request(scheduled_request(request_id, stack.random_token(), bundle, send_at))
        code, body = wait_for(lambda: (r := http_status(request_id))[0] == 200 and r, what="the scheduled row", timeout=20)
        assert (body["status"], body["campaign"], body["send_at_ms"], body["processed"]) == ("scheduled", True, send_at, 0)
        assert body["request_id"] == request_id and body["cancel_requested"] is False
        exit_code, line, as_json = cli_status(request_id)
        assert exit_code == 0 and line.startswith(f"request {request_id} SCHEDULED (campaign) for ") and line.endswith(": not started"), line
        assert as_json == body

        cancel(request_id, "status_test")
        feedback.until(lambda f: f.completed, "the cancelled request's RequestCompleted", timeout=30)
    finally:
        feedback.close()
    code, body = wait_for(lambda: (r := http_status(request_id))[1]["status"] == "cancelled" and r, what="the cancelled row", timeout=20)
    assert code == 200 and (body["processed"], body["skipped"], body["cancel_requested"]) == (1, 1, True)
    assert body["completed_at_ms"] > 0
    exit_code, line, _ = cli_status(request_id)
    assert exit_code == 0 and line == (f"request {request_id} CANCELLED (campaign): 1 notifications: 0 delivered, 0 rejected,"
                                       " 0 failed, 1 skipped"), line


def test_a_finished_campaign_is_completed_with_its_counts():
    bundle = f"com.example.statusc{uuid.uuid4().hex[:8]}"
    seed(bundle, 300, bundle)
    request_id = f"status-campaign-{uuid.uuid4()}"
    feedback = Feedback(request_id)
    try:
        stack.send_request(audience_request(request_id, bundle))
        feedback.until(lambda f: f.completed, "the campaign's RequestCompleted")
    finally:
        feedback.close()
    # The row closes right after its RequestCompleted was acknowledged.
    code, body = wait_for(lambda: (r := http_status(request_id))[1].get("status") == "completed" and r, what="the completed row")
    assert code == 200 and body["campaign"] is True
    assert (body["processed"], body["delivered"], body["rejected"], body["failed"], body["skipped"]) == (300, 300, 0, 0, 0)
    assert 0 < body["started_at_ms"] <= body["completed_at_ms"]
    exit_code, line, as_json = cli_status(request_id)
    assert exit_code == 0 and as_json == body
    assert line == f"request {request_id} COMPLETED (campaign): 300 notifications: 300 delivered, 0 rejected, 0 failed, 0 skipped"


def test_an_immediate_request_is_completed_once_its_completion_is_recorded():
    bundle = f"com.example.statusi{uuid.uuid4().hex[:8]}"
    user = f"status-{uuid.uuid4()}"
    tokens = stack.insert_tokens(user, 3, bundle)
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    request_id = f"status-immediate-{uuid.uuid4()}"
    request = send.SendRequest(
        request_id=request_id, user_ids=send.UserIds(user_ids=[user]),
        notification=send.Notification(bundle_id=bundle, environment=common.Environment.Value("SANDBOX"),
                                        push_type=common.PushType.Value("PUSH_TYPE_ALERT"), payload='{"aps":{"alert":"now"}}'))
    feedback = Feedback(request_id)
    try:
        stack.send_request(request)
        feedback.until(lambda f: f.completed, "the RequestCompleted")
    finally:
        feedback.close()
    code, body = wait_for(lambda: (r := http_status(request_id))[1].get("status") == "completed" and r,
                          what="the recorded completion")
    assert code == 200 and body["campaign"] is False and (body["processed"], body["delivered"]) == (len(tokens), len(tokens))
    exit_code, line, _ = cli_status(request_id)
    assert exit_code == 0 and line.startswith(f"request {request_id} COMPLETED (immediate): 3 notifications: 3 delivered"), line


def test_an_unknown_request_is_not_found_and_a_bad_id_is_refused():
    request_id = f"status-never-{uuid.uuid4()}"
    code, body = http_status(request_id)
    assert code == 404 and body["error"] == "not_found" and request_id in body["message"]
    exit_code, message, _ = cli_status(request_id)
    assert exit_code == 5 and "no request" in message and request_id in message
    code, body = http_status("bad\x01id")
    assert code == 400 and body["error"] == "invalid_argument" and "control character" in body["message"]
    code, body = http_status("")
    assert code == 400 and "is required" in body["message"]
    status, _, _ = stack.admin("dispatcher", "/v1/requests/x", method="POST")
    assert status == 405
    assert pushctl("status").returncode == 2
