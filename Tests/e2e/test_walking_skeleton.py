"""End to end on the real stack started the README's way (scripts/up): registration service over
gRPC, Kafka (the librdkafka broker), PostgreSQL, the dispatcher and the APNs simulator over TLS."""
from __future__ import annotations

import base64
import json
import time
import uuid

import grpc
import jwt
import pytest

import pushstack as stack


wait_for = stack.wait_for


def make_send_request(request_id: str, user_ids: list[str], bundle_id: str, payload: dict):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    return send.SendRequest(
        request_id=request_id,
        user_ids=send.UserIds(user_ids=user_ids),
        notification=send.Notification(
            bundle_id=bundle_id, push_type=common.PushType.Value("PUSH_TYPE_ALERT"),
            payload=json.dumps(payload, separators=(",", ":"))),
        created_at_ms=int(time.time() * 1000))


def test_registered_tokens_of_a_user_receive_a_push_and_reports_arrive():
    user = f"user-{uuid.uuid4()}"
    bundle = "com.example.e2e"
    tokens = [stack.random_token(), stack.random_token()]
    stack.simulator_admin("/admin/reset", "POST")
    for i, token in enumerate(tokens):
        # Upper case inside <…> with spaces: the service must normalize it.
        shown = "<" + " ".join(token[j:j + 8].upper() for j in range(0, len(token), 8)) + ">"
        reply = stack.register_token(shown, bundle, "SANDBOX", user_id=user, installation_id=f"inst-{i}-{user}")
        assert reply.device_token == token
        assert reply.event_id

    rows = wait_for(lambda: (r := stack.psql(
        "SELECT device_token, bundle_id, environment, user_id, status FROM device_tokens "
        f"WHERE user_id = '{user}' ORDER BY device_token")) and len(r) == 2 and r, what="two token rows")
    assert sorted(tokens) == [r[0] for r in rows]
    assert all(r[1:] == [bundle, "sandbox", user, "active"] for r in rows)

    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        request_id = f"req-{uuid.uuid4()}"
        stack.send_request(make_send_request(request_id, [user], bundle, {"aps": {"alert": "hello/world"}}))

        def complete(records):
            # Reports are keyed by token and the completion by request id: they arrive on different
            # partitions, in any order.
            events = stack.decode_feedback(records)
            done = any(e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id
                       for e in events)
            reports = {e.delivery_report.device_token for e in events
                       if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id}
            return done and reports == set(tokens)

        events = stack.decode_feedback(reader.read_until(complete, timeout=60))
    finally:
        reader.close()

    reports = [e.delivery_report for e in events
               if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id]
    feedback = stack.pb("feedback_pb2")
    assert sorted(r.device_token for r in reports) == sorted(tokens)
    assert all(r.outcome == feedback.DeliveryOutcome.Value("DELIVERED") for r in reports)
    assert all(r.http_status == 200 and r.apns_id and r.attempts == 1 and r.user_id == user for r in reports)
    completed = [e.request_completed for e in events
                 if e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id]
    assert len(completed) == 1
    assert (completed[0].total, completed[0].delivered) == (2, 2)

    mine = [r for token in tokens for r in stack.simulator_requests(token)]
    assert sorted(r["path"] for r in mine) == sorted(f"/3/device/{t}" for t in tokens)
    public_key = (stack.VAR_DIR / "credentials" / "apns-key.pub.pem").read_text()
    env = stack.stack_env()
    for r in mine:
        headers = {k: v for k, v in r["headers"]}
        assert headers["apns-topic"] == bundle
        assert headers["apns-push-type"] == "alert"
        assert headers["apns-priority"] == "10"
        assert r["body"] == '{"aps":{"alert":"hello/world"}}'
        token = headers["authorization"].removeprefix("bearer ")
        header = jwt.get_unverified_header(token)
        assert header["alg"] == "ES256" and header["kid"] == env["PUSH_APNS_KEY_ID"]
        claims = jwt.decode(token, public_key, algorithms=["ES256"])
        assert claims["iss"] == env["PUSH_APNS_TEAM_ID"]
        assert isinstance(claims["iat"], int)
        signature = base64.urlsafe_b64decode(token.split(".")[2] + "==")
        assert len(signature) == 64


def test_bad_token_is_refused_with_invalid_argument_and_publishes_nothing():
    reader = stack.TopicReader(stack.TOKEN_EVENTS)
    try:
        for bad in ["abc", "zz" * 32, "ab" * 31, "a" * 65]:
            with pytest.raises(grpc.RpcError) as caught:
                stack.register_token(bad, "com.example.e2e", "SANDBOX", user_id="nobody")
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "device.device_token" in caught.value.details()
        good = stack.random_token()
        stack.register_token(good, "com.example.e2e", "SANDBOX", user_id="somebody")
        records = reader.read_until(lambda rs: any(m.key() == good.encode() for m in rs), timeout=30)
    finally:
        reader.close()
    # Only the valid registration reached the topic.
    assert [m.key().decode() for m in records] == [good]


def test_undecodable_send_request_goes_to_dead_letter_and_the_next_is_delivered():
    user = f"user-{uuid.uuid4()}"
    bundle = "com.example.e2e"
    token = stack.random_token()
    stack.register_token(token, bundle, "SANDBOX", user_id=user)
    wait_for(lambda: stack.psql(f"SELECT 1 FROM device_tokens WHERE device_token = '{token}'"), what="token row")

    dead = stack.TopicReader(stack.DEAD_LETTER)
    feedback_reader = stack.TopicReader(stack.FEEDBACK)
    try:
        bad_id = f"bad-{uuid.uuid4()}"
        stack.produce(stack.SEND_REQUESTS, bad_id.encode(), b"\xff\xff\xff not protobuf",
                      "application/x-protobuf; message=push.v1.SendRequest")
        good_id = f"req-{uuid.uuid4()}"
        stack.send_request(make_send_request(good_id, [user], bundle, {"aps": {"alert": "after the bad one"}}))

        dl = dead.read_until(lambda rs: any(m.key() == bad_id.encode() for m in rs), timeout=60)
        letters = stack.pb("dead_letter_pb2")
        letter = letters.DeadLetter()
        letter.ParseFromString([m for m in dl if m.key() == bad_id.encode()][0].value())
        assert letter.original_value == b"\xff\xff\xff not protobuf"
        assert letter.source_topic == stack.SEND_REQUESTS
        assert letter.error

        def delivered(records):
            events = stack.decode_feedback(records)
            return any(e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == good_id
                       for e in events) and any(e.WhichOneof("event") == "request_completed"
                                                and e.request_completed.request_id == bad_id for e in events)

        events = stack.decode_feedback(feedback_reader.read_until(delivered, timeout=60))
    finally:
        dead.close()
        feedback_reader.close()
    report = [e.delivery_report for e in events
              if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == good_id][0]
    assert report.device_token == token
    assert report.outcome == stack.pb("feedback_pb2").DeliveryOutcome.Value("DELIVERED")
    refused = [e.request_completed for e in events if e.WhichOneof("event") == "request_completed"
               and e.request_completed.request_id == bad_id][0]
    assert refused.total == 0 and refused.error.startswith("undecodable SendRequest")


def test_json_over_http2_registers_and_names_the_bad_field():
    import httpx
    address = stack.stack_env()["PUSH_GRPC_ADDRESS"]
    token = stack.random_token()
    with httpx.Client(http1=False, http2=True, timeout=10) as client:
        ok = client.post(f"http://{address}/push.v1.TokenRegistry/RegisterToken", headers=stack.auth_headers(),
                         json={"device": {"deviceToken": token.upper(), "bundleId": "com.example.e2e",
                                          "environment": "PRODUCTION", "userId": "json-user"}})
        assert ok.status_code == 200, ok.text
        assert ok.json()["deviceToken"] == token
        bad = client.post(f"http://{address}/push.v1.TokenRegistry/RegisterToken", headers=stack.auth_headers(),
                          json={"device": {"deviceToken": "xyz", "bundleId": "com.example.e2e", "environment": "PRODUCTION"}})
        assert bad.status_code == 400
        assert bad.json()["code"] == "INVALID_ARGUMENT"
        assert bad.json()["message"].startswith("device.device_token:")
    wait_for(lambda: stack.psql(f"SELECT environment FROM device_tokens WHERE device_token = '{token}'") == [["production"]],
             what="the JSON-registered token row")


def test_json_send_request_to_an_explicit_token_is_delivered_byte_for_byte():
    token = stack.random_token()
    bundle = "com.example.json"
    request_id = f"json-{uuid.uuid4()}"
    payload = '{"aps":{"alert":"caf\\u00e9 \\/ 1.50e+2"},"n":1.50e+2}'
    body = json.dumps({"requestId": request_id, "deviceTokens": {"deviceTokens": [token]},
                       "notification": {"bundleId": bundle, "environment": "SANDBOX", "pushType": "PUSH_TYPE_ALERT",
                                        "priority": 5, "collapseId": "score", "expiration": "0", "payload": payload}})
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        stack.produce(stack.SEND_REQUESTS, request_id.encode(), body.encode(), "application/json")
        report = stack.delivery_report(reader, request_id)
    finally:
        reader.close()
    assert report.outcome == stack.pb("feedback_pb2").DeliveryOutcome.Value("DELIVERED")
    assert report.environment == stack.pb("common_pb2").Environment.Value("SANDBOX")
    received = stack.simulator_requests(token)
    assert len(received) == 1
    headers = {k: v for k, v in received[0]["headers"]}
    assert received[0]["environment"] == "sandbox"
    assert received[0]["body"] == payload  # never re-serialized
    assert (headers["apns-priority"], headers["apns-collapse-id"], headers["apns-expiration"]) == ("5", "score", "0")


def send_to_unregistered_token(invalidated_at_ms):
    """Registers a token, makes the simulator answer 410 Unregistered for it with Apple's timestamp
    `invalidated_at_ms`, sends it a push and returns (token, report, token_invalidated events)."""
    user = f"user-{uuid.uuid4()}"
    bundle = "com.example.e2e"
    token = stack.random_token()
    stack.register_token(token, bundle, "PRODUCTION", user_id=user, installation_id=f"inst-{user}")
    wait_for(lambda: stack.psql(f"SELECT 1 FROM device_tokens WHERE device_token = '{token}'"), what="token row")
    stack.simulator_admin("/admin/tokens/unregistered", "POST", {"token": token, "timestamp_ms": invalidated_at_ms})
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        request_id = f"req-{uuid.uuid4()}"
        stack.send_request(make_send_request(request_id, [user], bundle, {"aps": {"alert": "are you there?"}}))
        # The report and a TokenInvalidated are keyed by token, the completion by request id: wait
        # for the completion and the report, then drain briefly for an invalidation.
        events = stack.decode_feedback(reader.read_until(
            lambda rs: {"request_completed", "delivery_report"} <= {
                e.WhichOneof("event") for e in stack.decode_feedback(rs)
                if request_id in (e.request_completed.request_id, e.delivery_report.request_id)}, timeout=60))
        events += stack.decode_feedback(reader.drain(seconds=1.0))
    finally:
        reader.close()
    report = [e.delivery_report for e in events if e.WhichOneof("event") == "delivery_report"
              and e.delivery_report.request_id == request_id][0]
    invalidations = [e.token_invalidated for e in events if e.WhichOneof("event") == "token_invalidated"
                     and e.token_invalidated.device_token == token]
    return token, user, report, invalidations


def test_unregistered_token_is_deactivated_and_announced():
    invalidated_at = int(time.time() * 1000) + 5_000  # Apple's word is newer than the registration
    token, user, report, invalidations = send_to_unregistered_token(invalidated_at)
    assert report.outcome == stack.pb("feedback_pb2").DeliveryOutcome.Value("REJECTED")
    assert (report.http_status, report.apns_reason) == (410, "Unregistered")
    assert [(i.apns_timestamp_ms, i.user_id, i.apns_reason) for i in invalidations] == [(invalidated_at, user, "Unregistered")]
    assert stack.psql(f"SELECT status, apns_invalidated_at_ms FROM device_tokens WHERE device_token = '{token}'") \
        == [["inactive", str(invalidated_at)]]


def test_a_registration_newer_than_apples_410_timestamp_keeps_the_token():
    invalidated_at = int(time.time() * 1000) - 60_000  # the app registered again after this
    token, _, report, invalidations = send_to_unregistered_token(invalidated_at)
    assert (report.http_status, report.apns_reason) == (410, "Unregistered")
    assert invalidations == []
    assert stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{token}'") == [["active"]]


def test_oversized_registrations_are_refused_without_buffering_them():
    import httpx
    address = stack.stack_env()["PUSH_GRPC_ADDRESS"]
    huge = {"device": {"deviceToken": stack.random_token(), "bundleId": "com.example.e2e", "environment": "SANDBOX",
                       "userId": "x" * 1_500_000}}
    with httpx.Client(http1=False, http2=True, timeout=30) as client:
        reply = client.post(f"http://{address}/push.v1.TokenRegistry/RegisterToken", json=huge, headers=stack.auth_headers())
        assert reply.status_code == 413
        wrong_type = client.post(f"http://{address}/push.v1.TokenRegistry/RegisterToken", content=b"x",
                                 headers={"content-type": "text/plain", **stack.auth_headers()})
        assert wrong_type.status_code == 415
    common, registry = stack.pb("common_pb2"), stack.pb("token_registry_pb2")
    with stack.grpc_channel() as channel:
        call = channel.unary_unary("/push.v1.TokenRegistry/RegisterToken",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=registry.RegisterTokenResponse.FromString)
        device = common.Device(device_token=stack.random_token(), bundle_id="com.example.e2e",
                               environment=common.Environment.Value("SANDBOX"), user_id="y" * 1_200_000)
        with pytest.raises(grpc.RpcError) as caught:
            call(registry.RegisterTokenRequest(device=device), timeout=10)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_notification_whose_expiration_passed_is_not_sent():
    token = stack.random_token()
    request_id = f"expired-{uuid.uuid4()}"
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    request = send.SendRequest(
        request_id=request_id, device_tokens=send.DeviceTokens(device_tokens=[token]),
        notification=send.Notification(bundle_id="com.example.e2e", environment=common.Environment.Value("SANDBOX"),
                                       push_type=common.PushType.Value("PUSH_TYPE_ALERT"),
                                       expiration=int(time.time()) - 60, payload='{"aps":{"alert":"too late"}}'))
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        stack.send_request(request)
        report = stack.delivery_report(reader, request_id)
    finally:
        reader.close()
    feedback = stack.pb("feedback_pb2")
    assert report.outcome == feedback.DeliveryOutcome.Value("FAILED")
    # The dispatcher's own reason, not Apple's: apns_reason stays empty (nothing was sent).
    assert report.outcome_reason == feedback.OutcomeReason.Value("OUTCOME_REASON_EXPIRED")
    assert (report.apns_reason, report.attempts, report.http_status) == ("", 0, 0)
    assert report.event_id == feedback_event_id(f"delivery-report\n{request_id}\n{token}")
    assert not stack.simulator_requests(token)


def token_request(request_id: str, token: str):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    return send.SendRequest(
        request_id=request_id, device_tokens=send.DeviceTokens(device_tokens=[token]),
        notification=send.Notification(bundle_id="com.example.e2e", environment=common.Environment.Value("SANDBOX"),
                                       push_type=common.PushType.Value("PUSH_TYPE_ALERT"), payload='{"aps":{"alert":"x"}}'))


def test_a_stuck_request_holds_back_only_its_own_partition():
    stuck_token, free_token = stack.random_token(), stack.random_token()
    stuck_id, free_id = f"stuck-{uuid.uuid4()}", f"free-{uuid.uuid4()}"
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        stack.simulator_admin("/admin/faults", "PUT", {"unanswered_share": 1.0})
        stack.send_request(token_request(stuck_id, stuck_token), partition=0)
        wait_for(lambda: stack.simulator_requests(stuck_token), what="the stuck push reaching the simulator")
        stack.simulator_admin("/admin/faults", "PUT", {})
        stack.send_request(token_request(free_id, free_token), partition=1)

        # Delivered while the other partition still waits for Apple's answer (30 s request timeout).
        stack.delivery_report(reader, free_id, timeout=15)
        # Dropping the connection makes the client resend the unanswered push; now it is answered.
        stack.simulator_admin("/admin/connections/drop", "POST", {})
        report = stack.delivery_report(reader, stuck_id)
    finally:
        stack.simulator_admin("/admin/faults", "PUT", {})
        reader.close()
    assert report.outcome == stack.pb("feedback_pb2").DeliveryOutcome.Value("DELIVERED")


# docs/contracts.md "Event ids": the project's namespace for feedback event ids (UUIDv5).
FEEDBACK_EVENT_NAMESPACE = uuid.UUID("26a8710c-1894-4fc1-b8dc-e7e709f9240b")


def feedback_event_id(name: str) -> str:
    return str(uuid.uuid5(FEEDBACK_EVENT_NAMESPACE, name))


def test_a_finished_request_delivered_again_publishes_and_sends_nothing_and_its_events_carry_stable_ids_and_the_trace():
    token = stack.random_token()
    request_id = f"twice-{uuid.uuid4()}"
    trace_parent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    request = token_request(request_id, token)
    request.trace_parent = trace_parent
    feedback = stack.pb("feedback_pb2")
    partition = 5

    def completions(records):
        return [e for e in stack.decode_feedback(records)
                if e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id]

    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        stack.send_request(request, partition=partition)
        first = reader.read_until(lambda rs: len(completions(rs)) >= 1, timeout=60)
        # The same SendRequest again (same request_id): what Kafka delivers again when an offset
        # commit was lost (broker outage, rebalance) or a producer retried.
        _, offset = stack.send_request(request, partition=partition)
        wait_for(lambda: stack.committed(stack.SEND_REQUESTS, partition) > offset,
                 what="the second record's offset to be committed", timeout=60)
        events = stack.decode_feedback(first + reader.drain(2.0))
    finally:
        reader.close()

    done = [e for e in events if e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id]
    reports = [e for e in events if e.WhichOneof("event") == "delivery_report" and e.delivery_report.request_id == request_id]
    # Handled again, the finished request published nothing more.
    assert len(done) == 1 and len(reports) == 1, (done, reports)
    assert done[0].event_id == feedback_event_id(f"request-completed\n{request_id}")
    assert done[0].request_completed.status == feedback.RequestStatus.Value("REQUEST_STATUS_COMPLETED")
    assert (done[0].request_completed.total, done[0].request_completed.delivered) == (1, 1)
    assert reports[0].event_id == feedback_event_id(f"delivery-report\n{request_id}\n{token}")
    assert reports[0].delivery_report.event_id == reports[0].event_id
    assert reports[0].delivery_report.outcome == feedback.DeliveryOutcome.Value("DELIVERED")
    assert reports[0].delivery_report.outcome_reason == feedback.OutcomeReason.Value("OUTCOME_REASON_UNSPECIFIED")
    # The producer's trace is on every feedback event of the request.
    assert {e.trace_parent for e in done + reports} == {trace_parent}
    # Sent once.
    assert len(stack.simulator_requests(token)) == 1
