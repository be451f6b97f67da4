"""README "Guarantees" on the real stack: alert pushes carry a collapse id derived from the request
id, so that a copy sent again after a crash replaces the first (docs/contracts.md "Collapse ids")."""
from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid

import pushstack as stack


def alert(request_id: str, token: str, opt_out: bool = False, push_type: str = "PUSH_TYPE_ALERT", collapse_id: str = ""):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    payload = {"aps": {"content-available": 1}} if push_type == "PUSH_TYPE_BACKGROUND" else {"aps": {"alert": "guarantees"}}
    return send.SendRequest(
        request_id=request_id, device_tokens=send.DeviceTokens(device_tokens=[token]), created_at_ms=int(time.time() * 1000),
        notification=send.Notification(bundle_id="com.example.guarantees", environment=common.Environment.Value("SANDBOX"),
                                        push_type=common.PushType.Value(push_type), collapse_id=collapse_id,
                                        payload=json.dumps(payload), no_request_collapse_id=opt_out))


def pushes_to(token: str) -> list[dict]:
    return stack.simulator_requests(token)


def collapse_header(record: dict) -> str | None:
    return next((value for name, value in record["headers"] if name == "apns-collapse-id"), None)


def test_alert_pushes_carry_a_collapse_id_derived_from_the_request_id_unless_opted_out():
    derived = lambda rid: base64.urlsafe_b64encode(hashlib.sha256(rid.encode()).digest()[:16]).decode().rstrip("=")  # noqa: E731
    cases = {  # request id → (token, request, expected header)
        "plain": (stack.random_token(), {}, derived),
        "opted-out": (stack.random_token(), {"opt_out": True}, lambda rid: None),
        "caller": (stack.random_token(), {"collapse_id": "score-7"}, lambda rid: "score-7"),
        "background": (stack.random_token(), {"push_type": "PUSH_TYPE_BACKGROUND"}, lambda rid: None),
    }
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        ids = {}
        for name, (token, options, _) in cases.items():
            ids[name] = f"collapse-{name}-{uuid.uuid4()}"
            stack.send_request(alert(ids[name], token, **options))
        # Reports of different tokens land on different partitions in any order: read until all are in.
        wanted = set(ids.values())
        def all_reported(records):
            seen = {e.delivery_report.request_id for e in stack.decode_feedback(records) if e.WhichOneof("event") == "delivery_report"}
            return wanted <= seen
        reader.read_until(all_reported, timeout=60)
    finally:
        reader.close()
    for name, (token, _, expected) in cases.items():
        [push] = pushes_to(token)
        assert collapse_header(push) == expected(ids[name]), name
