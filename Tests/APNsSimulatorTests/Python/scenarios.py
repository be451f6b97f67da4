"""Scenarios run by APNsSimulatorTests: `python3 scenarios.py <name>`. Each starts from a reset
simulator, drives it with outside clients (h2, httpx, aioapns) and asserts; exit 0 = pass."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import sys
import time

from simclient import (BUNDLE, DIR, ENV, H2, PORTS, TEAM, Failure, admin, advance_clock, alert_body, check,
                       clock_ms, expect_eq, expect_reason, make_jwt, set_clock_to_now, token)

SCENARIOS = {}


def scenario(function):
    SCENARIOS[function.__name__] = function
    return function


def headers(topic=BUNDLE, push_type="alert", priority="10", extra=()):
    result = []
    if topic is not None:
        result.append(("apns-topic", topic))
    if push_type is not None:
        result.append(("apns-push-type", push_type))
    if priority is not None:
        result.append(("apns-priority", priority))
    return result + list(extra)


@scenario
def request_checks():
    """Every request check of docs/apns-protocol.md §2 with Apple's status and JSON body."""
    jwt = make_jwt()
    c = H2("sandbox")
    t = token()
    ok = c.push(t, jwt=jwt, headers=headers(extra=[("apns-id", "123E4567-E89B-12D3-A456-426614174000")]))
    expect_eq(ok.status, 200, f"valid push ({ok!r})")
    expect_eq(ok.body, b"", "200 body")
    expect_eq(ok.header("apns-id"), "123e4567-e89b-12d3-a456-426614174000", "echoed apns-id")
    check(ok.header("apns-unique-id"), "sandbox answers carry apns-unique-id")
    generated = c.push(t, jwt=jwt)
    check(len(generated.header("apns-id") or "") == 36, f"generated apns-id {generated.header('apns-id')}")

    def send(path_token=t, hdrs=None, body=None, method="POST", path=None):
        hdrs = headers() if hdrs is None else hdrs
        sid = c.send(path or f"/3/device/{path_token}", hdrs + [("authorization", f"bearer {jwt}")],
                     alert_body() if body is None else body, method=method)
        return c.wait(sid)

    expect_reason(send(method="GET", body=b""), 405, "MethodNotAllowed")
    expect_reason(send(path="/3/devices/" + t), 404, "BadPath")
    expect_reason(send(path="/3/device/"), 400, "MissingDeviceToken")
    for bad in ["abc", "zz" * 32, "ab" * 31, "a" * 65, "ab" * 257]:
        expect_reason(send(path_token=bad), 400, "BadDeviceToken")
    expect_eq(send(path_token=token(80)).status, 200, "an 80-byte token is valid")
    expect_eq(send(path_token=token().upper()).status, 200, "upper-case hex is accepted (docs/semantics.md token rule)")
    expect_reason(send(hdrs=headers(push_type="bogus")), 400, "InvalidPushType")
    expect_reason(send(hdrs=headers(topic=None)), 400, "MissingTopic")
    expect_reason(send(hdrs=headers(topic="com.example app")), 400, "BadTopic")
    expect_reason(send(hdrs=headers(topic="")), 400, "BadTopic")
    expect_reason(send(hdrs=headers(push_type="voip")), 400, "TopicDisallowed")
    expect_reason(send(hdrs=headers(topic=BUNDLE + ".voip")), 400, "TopicDisallowed")
    expect_reason(send(hdrs=headers(topic=BUNDLE + ".voip-ptt", push_type="liveactivity")), 400, "TopicDisallowed")
    expect_reason(send(hdrs=headers(push_type="mdm")), 400, "TopicDisallowed")  # certificate only
    expect_eq(send(hdrs=headers(topic=BUNDLE + ".voip", push_type=None)).status, 200, "push type implied by a .voip topic")
    expect_eq(send(hdrs=headers(topic=BUNDLE + ".voip-ptt", push_type="pushtotalk", extra=[("apns-expiration", "0")])).status, 200, "pushtotalk")
    expect_eq(send(hdrs=headers(topic=BUNDLE + ".location-query", push_type="location")).status, 200, "location over token auth")
    expect_eq(send(hdrs=headers(topic=BUNDLE + ".push-type.liveactivity", push_type="liveactivity", priority="5")).status, 200, "liveactivity")
    expect_reason(send(hdrs=headers(priority="7")), 400, "BadPriority")
    expect_reason(send(hdrs=headers(priority="high")), 400, "BadPriority")
    background = b'{"aps":{"content-available":1}}'
    expect_reason(send(hdrs=headers(push_type="background", priority="10"), body=background), 400, "BadPriority")
    expect_reason(send(hdrs=headers(push_type="background", priority=None), body=background), 400, "BadPriority")
    expect_eq(send(hdrs=headers(push_type="background", priority="5"), body=background).status, 200, "background at 5")
    expect_eq(send(hdrs=headers(priority="1")).status, 200, "priority 1")
    expect_reason(send(hdrs=headers(extra=[("apns-expiration", "soon")])), 400, "BadExpirationDate")
    expect_reason(send(hdrs=headers(extra=[("apns-expiration", "-5")])), 400, "BadExpirationDate")
    expect_eq(send(hdrs=headers(extra=[("apns-expiration", str(int(time.time()) + 3600))])).status, 200, "expiration")
    bad_id = send(hdrs=headers(extra=[("apns-id", "not-a-uuid")]))
    expect_reason(bad_id, 400, "BadMessageId")
    check(bad_id.header("apns-id") != "not-a-uuid", "a bad apns-id is not echoed")
    expect_reason(send(hdrs=headers(extra=[("apns-collapse-id", "c" * 65)])), 400, "BadCollapseId")
    expect_eq(send(hdrs=headers(extra=[("apns-collapse-id", "c" * 64)])).status, 200, "64-byte collapse id")
    expect_reason(send(hdrs=headers(extra=[("apns-topic", BUNDLE)])), 400, "DuplicateHeaders")
    expect_reason(send(hdrs=headers(extra=[("x-custom", "1"), ("x-custom", "2")])), 400, "DuplicateHeaders")
    expect_reason(send(body=b""), 400, "PayloadEmpty")
    expect_eq(send(body=alert_body(4096)).status, 200, "4096-byte alert")
    expect_reason(send(body=alert_body(4097)), 413, "PayloadTooLarge")
    voip = headers(topic=BUNDLE + ".voip", push_type="voip")
    expect_eq(send(hdrs=voip, body=alert_body(5120)).status, 200, "5120-byte voip")
    expect_reason(send(hdrs=voip, body=alert_body(5121)), 413, "PayloadTooLarge")

    production = H2("production")
    answer = production.push(token(), jwt=jwt)
    expect_eq(answer.status, 200, "production push")
    check(answer.header("apns-unique-id") is None, "production answers carry no apns-unique-id")


@scenario
def provider_token_rejections():
    """MissingProviderToken, InvalidProviderToken (garbage, unknown kid, wrong team, wrong key,
    missing iat), then a DER-signed token is accepted; the stream limit stays 1 until then."""
    c = H2("sandbox")
    expect_eq(c.max_streams_seen, [1], "initial SETTINGS_MAX_CONCURRENT_STREAMS")
    t = token()
    expect_reason(c.push(t), 403, "MissingProviderToken")
    sid = c.send(f"/3/device/{t}", headers() + [("authorization", "")], alert_body())
    expect_reason(c.wait(sid), 403, "MissingProviderToken")
    expect_reason(c.push(t, jwt="not.a.jwt"), 403, "InvalidProviderToken")
    expect_reason(c.push(t, jwt=make_jwt(kid="UNKNOWN001")), 403, "InvalidProviderToken")
    expect_reason(c.push(t, jwt=make_jwt(team="OTHERTEAM1")), 403, "InvalidProviderToken")
    expect_reason(c.push(t, jwt=make_jwt(key="untrusted")), 403, "InvalidProviderToken")
    expect_eq(c.max_streams_seen, [1], "the limit stays 1 while no request succeeded")
    ok = c.push(t, jwt=make_jwt(der=True))
    expect_eq(ok.status, 200, f"DER-signed token ({ok!r})")
    c.pump(lambda: len(c.max_streams_seen) >= 2, what="the raised stream limit")
    expect_eq(c.max_streams_seen, [1, 1000], "SETTINGS_MAX_CONCURRENT_STREAMS after the first success")


@scenario
def stream_limit():
    """One stream until a request with a valid token succeeded, then the configured limit."""
    # A client that does not wait for SETTINGS sends two streams at once; the first fails (no token),
    # so the connection is still limited to one stream and the second is refused.
    jwt = make_jwt()
    early = H2("sandbox", wait_settings=False)
    first = early.send_push(token(), jwt=None, flush=False)
    second = early.send_push(token(), jwt=jwt, flush=False)
    early.flush()
    early.pump(lambda: early.responses[second].reset is not None or early.goaway is not None or early.closed,
               what="the refusal of the second stream")
    check(early.responses[second].status is None, "the second stream got no answer")
    if early.responses[second].reset is not None:
        expect_eq(early.responses[second].reset, 7, "RST_STREAM REFUSED_STREAM")  # nghttp2 before SETTINGS ACK
    expect_reason(early.wait(first), 403, "MissingProviderToken")

    c = H2("sandbox")
    expect_eq(c.max_streams_seen, [1], "initial limit")
    expect_eq(c.push(token(), jwt=jwt).status, 200, "first push")
    c.pump(lambda: len(c.max_streams_seen) >= 2, what="the raised limit")
    expect_eq(c.max_streams_seen[-1], 1000, "raised limit")
    sids = [c.send_push(token(), jwt=jwt, flush=False) for _ in range(50)]
    c.flush()
    for sid in sids:
        expect_eq(c.wait(sid).status, 200, f"concurrent stream {sid}")


@scenario
def expired_provider_token():
    """ExpiredProviderToken for iat older than one hour, judged by the injected clock."""
    set_clock_to_now()
    now = clock_ms() // 1000
    c = H2("sandbox")
    t = token()
    expect_reason(c.push(t, jwt=make_jwt(iat=now - 3601)), 403, "ExpiredProviderToken")
    fresh = make_jwt(iat=now)
    expect_eq(c.push(t, jwt=fresh).status, 200, "fresh token")
    advance_clock(3600 * 1000)
    expect_eq(c.push(t, jwt=fresh).status, 200, "exactly one hour old")
    advance_clock(1000)
    expect_reason(c.push(t, jwt=fresh), 403, "ExpiredProviderToken")
    # The expired token may be replaced at once, even within 20 minutes of installing it.
    expect_eq(c.push(t, jwt=make_jwt()).status, 200, "new token after expiry")


@scenario
def too_many_provider_token_updates():
    """A different JWT on the same connection within 20 minutes → 429; after 20 minutes or on a new
    connection it is accepted."""
    set_clock_to_now()
    now = clock_ms() // 1000
    a, b = make_jwt(iat=now), make_jwt(iat=now - 1)
    c = H2("sandbox")
    t = token()
    expect_eq(c.push(t, jwt=a).status, 200, "token A")
    expect_reason(c.push(t, jwt=b), 429, "TooManyProviderTokenUpdates")
    expect_eq(c.push(t, jwt=a).status, 200, "token A still accepted")
    other = H2("sandbox")
    expect_eq(other.push(t, jwt=b).status, 200, "token B on a new connection")
    advance_clock(19 * 60 * 1000)
    expect_reason(c.push(t, jwt=b), 429, "TooManyProviderTokenUpdates")
    advance_clock(60 * 1000)
    expect_eq(c.push(t, jwt=b).status, 200, "token B after 20 minutes")


@scenario
def key_binding():
    """UnrelatedKeyIdInToken for a second key on one connection; BadEnvironmentKeyIdInToken for a key
    restricted to production used on sandbox."""
    c = H2("sandbox")
    t = token()
    expect_eq(c.push(t, jwt=make_jwt()).status, 200, "key 1")
    expect_reason(c.push(t, jwt=make_jwt(key="key2", kid="KEY0000002")), 403, "UnrelatedKeyIdInToken")
    expect_eq(H2("sandbox").push(t, jwt=make_jwt(key="key2", kid="KEY0000002")).status, 200, "key 2 on its own connection")
    production_only = make_jwt(key="key3", kid="KEY0000003")
    expect_reason(H2("sandbox").push(t, jwt=production_only), 403, "BadEnvironmentKeyIdInToken")
    expect_eq(H2("production").push(t, jwt=production_only).status, 200, "production-only key on production")


@scenario
def topic_scoped_keys():
    """A topic-specific key serves its bundle IDs only (TopicDisallowed for another); a connection keeps
    the scope its first push bound, so a bundle ID added later needs a new connection; the admin API
    reports each connection's key, team and bound scope."""
    scoped = make_jwt(key="key4", kid="KEY0000004")
    t = token()
    warm = H2("sandbox")
    expect_eq(warm.push(t, jwt=scoped).status, 200, "a listed bundle ID")
    expect_eq(warm.push(t, jwt=scoped, headers=headers(topic="com.example.scoped")).status, 200, "the other listed bundle ID")
    expect_reason(warm.push(t, jwt=scoped, headers=headers(topic="com.example.later")), 400, "TopicDisallowed")
    expect_reason(H2("production").push(t, jwt=scoped), 403, "BadEnvironmentKeyIdInToken")
    answer = admin("/admin/keys/topics", "PUT", {"key_id": "KEY0000004", "topics": ["com.example.app", "com.example.later"]})
    expect_eq(answer, {"key_id": "KEY0000004", "topics": ["com.example.app", "com.example.later"]}, "admin answer")
    expect_reason(warm.push(t, jwt=scoped, headers=headers(topic="com.example.later")), 400, "TopicDisallowed")
    fresh = H2("sandbox")
    expect_eq(fresh.push(t, jwt=scoped, headers=headers(topic="com.example.later")).status, 200,
              "a new connection serves the added bundle ID")
    expect_eq(H2("sandbox").push(t, jwt=make_jwt(), headers=headers(topic="com.example.later")).status, 200,
              "a team-scoped key covers every topic")
    bound = [c for c in admin("/admin/connections")["connections"] if c.get("key_id") == "KEY0000004"]
    expect_eq(sorted(tuple(c["key_topics"]) for c in bound),
              [("com.example.app", "com.example.later"), ("com.example.app", "com.example.scoped")], "bound scopes")
    check(all(c["team_id"] == TEAM for c in bound), f"every connection reports its team: {bound}")
    admin("/admin/keys/topics", "PUT", {"key_id": "NOSUCHKEY1", "topics": None}, status=400)
    admin("/admin/reset", "POST")
    expect_reason(H2("sandbox").push(t, jwt=scoped, headers=headers(topic="com.example.later")), 400, "TopicDisallowed")


@scenario
def broadcast_channels():
    """Channel management (/1/apps/<bundle>/channels, all-channels) and broadcast
    (/4/broadcasts/apps/<bundle>) with Apple's statuses and reasons, the per-app quota (3 in this test),
    the storage policy's expiration rule, the subscriber count as a broadcast's fan-out."""
    jwt = make_jwt()
    auth = [("authorization", f"bearer {jwt}")]
    c = H2("sandbox")
    request_id = "0a1b2c3d-0000-4000-8000-00000000abcd"

    def call(method, path, headers=(), body=b""):
        return c.wait(c.send(path, auth + list(headers), body, method=method))

    def create(policy=1, bundle=BUNDLE, raw=None):
        body = raw if raw is not None else json.dumps({"message-storage-policy": policy, "push-type": "LiveActivity"}).encode()
        return call("POST", f"/1/apps/{bundle}/channels", [("apns-request-id", request_id)], body)

    def broadcast(channel, bundle=BUNDLE, push_type="liveactivity", priority="10", expiration="0", body=None, extra=()):
        headers = [("apns-channel-id", channel)] if channel is not None else []
        for name, value in (("apns-push-type", push_type), ("apns-priority", priority), ("apns-expiration", expiration)):
            if value is not None:
                headers.append((name, value))
        payload = b'{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}' if body is None else body
        return call("POST", f"/4/broadcasts/apps/{bundle}", headers + list(extra), payload)

    created = create()
    expect_eq(created.status, 201, f"create ({created!r})")
    expect_eq(created.header("apns-request-id"), request_id, "apns-request-id echoed")
    check(created.header("apns-id") is None, "channel answers carry apns-request-id, not apns-id")
    stored = created.header("apns-channel-id")
    check(bool(stored) and base64.b64decode(stored), f"a base64 channel id: {stored!r}")
    got = call("GET", f"/1/apps/{BUNDLE}/channels", [("apns-channel-id", stored)])
    expect_eq((got.status, got.json), (200, {"message-storage-policy": 1, "push-type": "LiveActivity"}), "read the channel")
    expect_eq(call("GET", f"/1/apps/{BUNDLE}/all-channels").json, {"channels": [stored]}, "all-channels")
    expect_reason(create(raw=b'{"push-type":"LiveActivity"}'), 400, "BadRequestPayload")
    expect_reason(create(policy=2), 400, "BadRequestPayload")
    expect_reason(create(bundle=BUNDLE + ".push-type.liveactivity"), 400, "TopicDisallowed")
    expect_reason(call("PUT", f"/1/apps/{BUNDLE}/channels"), 405, "MethodNotAllowed")
    expect_reason(call("POST", f"/1/apps/{BUNDLE}/all-channels"), 405, "MethodNotAllowed")
    expect_reason(call("GET", f"/1/apps/{BUNDLE}/channel"), 404, "BadPath")
    expect_reason(call("GET", f"/1/apps/{BUNDLE}/channels"), 400, "MissingChannelId")
    expect_reason(call("GET", f"/1/apps/{BUNDLE}/channels", [("apns-channel-id", "%%%")]), 400, "BadChannelId")
    unknown = base64.b64encode(os.urandom(16)).decode()
    expect_reason(call("GET", f"/1/apps/{BUNDLE}/channels", [("apns-channel-id", unknown)]), 400, "ChannelNotRegistered")
    expect_reason(c.wait(c.send(f"/1/apps/{BUNDLE}/all-channels", [], method="GET")), 403, "MissingProviderToken")

    # Broadcast checks, in order.
    expect_reason(broadcast(None), 400, "MissingChannelId")
    expect_reason(broadcast("%%%"), 400, "BadChannelId")
    expect_reason(broadcast(unknown), 400, "ChannelNotRegistered")
    expect_reason(broadcast(stored, push_type=None), 400, "MissingPushType")
    expect_reason(broadcast(stored, push_type="alert"), 400, "InvalidPushType")
    expect_reason(broadcast(stored, priority="7"), 400, "BadPriority")
    expect_reason(broadcast(stored, priority=None), 400, "BadPriority")
    expect_reason(broadcast(stored, expiration=None), 400, "BadExpirationDate")
    expect_reason(broadcast(stored, body=b""), 400, "PayloadEmpty")
    expect_reason(broadcast(stored, body=b"x" * 5121), 413, "PayloadTooLarge")
    expect_reason(broadcast(stored, extra=[("apns-request-id", "not-a-uuid")]), 400, "BadMessageId")
    admin("/admin/channels/subscribers", "PUT", {"channel_id": stored, "subscribers": 3})
    sent = broadcast(stored, body=b'{"aps":{"timestamp":1,"event":"update","content-state":{}}}' + b" " * (5120 - 59),
                     expiration=str(clock_ms() // 1000 + 3600))
    expect_eq(sent.status, 200, f"broadcast accepted ({sent!r})")
    check(len(sent.header("apns-unique-id") or "") == 36, f"apns-unique-id {sent.header('apns-unique-id')}")
    check(len(sent.header("apns-request-id") or "") == 36, "a generated apns-request-id")
    counters = admin("/admin/counters")["counters"]
    expect_eq((counters.get("broadcast 200"), counters.get("broadcast_reached")), (1, 3), "one broadcast reaching 3 devices")

    # No Message Stored: only expiration 0.
    nothing_stored = create(policy=0).header("apns-channel-id")
    expect_reason(broadcast(nothing_stored, expiration="1"), 400, "BadExpirationDate")
    expect_eq(broadcast(nothing_stored, expiration="0").status, 200, "expiration 0 on a No-Message-Stored channel")

    # Channels belong to one environment.
    production = H2("production")
    other = production.wait(production.send(f"/4/broadcasts/apps/{BUNDLE}", auth + [
        ("apns-channel-id", stored), ("apns-push-type", "liveactivity"), ("apns-priority", "10"), ("apns-expiration", "0")],
        b'{"aps":{}}'))
    expect_reason(other, 400, "ChannelNotRegistered")

    # The quota: 3 per app and environment in this test.
    expect_eq(create().status, 201, "the third channel")
    expect_reason(create(), 400, "CannotCreateChannelConfig")
    expect_eq(call("DELETE", f"/1/apps/{BUNDLE}/channels", [("apns-channel-id", stored)]).status, 204, "delete")
    expect_reason(broadcast(stored), 400, "ChannelNotRegistered")
    expect_eq(create().status, 201, "room again after a delete")
    listed = admin("/admin/channels")["channels"]
    expect_eq(len(listed), 3, f"admin channels: {listed}")

    admin("/admin/broadcast", "PUT", {"bundle_id": BUNDLE, "enabled": False})
    expect_reason(create(), 400, "FeatureNotEnabled")
    admin("/admin/channels/subscribers", "PUT", {"channel_id": unknown, "subscribers": 1}, status=400)


@scenario
def token_registry():
    """Registered tokens: other environment → BadDeviceToken, other app → DeviceTokenNotForTopic, a
    token neither environment issued → BadDeviceToken on both; unregistered tokens → 410 with the
    timestamp in ms."""
    jwt = make_jwt()
    sandbox, production = H2("sandbox"), H2("production")
    t = token()
    admin("/admin/tokens", "POST", {"token": t.upper(), "environment": "sandbox", "bundle_id": BUNDLE})
    expect_eq(sandbox.push(t, jwt=jwt).status, 200, "own environment")
    expect_reason(production.push(t, jwt=jwt), 400, "BadDeviceToken")
    expect_reason(sandbox.push(t, jwt=jwt, headers=headers(topic="com.other.app")), 400, "DeviceTokenNotForTopic")
    expect_eq(sandbox.push(t, jwt=jwt, headers=headers(topic=BUNDLE + ".voip", push_type="voip")).status, 200,
              "the app's VoIP topic")
    expect_eq(sandbox.push(token(), jwt=jwt, headers=headers(topic="com.other.app")).status, 200, "unknown tokens: any topic")
    neither = token()
    admin("/admin/tokens", "POST", {"token": neither, "environment": "none"})
    expect_reason(sandbox.push(neither, jwt=jwt), 400, "BadDeviceToken")
    expect_reason(production.push(neither, jwt=jwt), 400, "BadDeviceToken")
    admin("/admin/tokens", "POST", {"token": token(), "environment": "staging"}, status=400)

    gone = token()
    answer = admin("/admin/tokens/unregistered", "POST", {"token": gone, "timestamp_ms": 1_700_000_000_123})
    expect_eq(answer["timestamp_ms"], 1_700_000_000_123, "admin answer")
    r = sandbox.push(gone, jwt=jwt)
    expect_eq(r.status, 410, "unregistered status")
    expect_eq(r.json, {"reason": "Unregistered", "timestamp": 1_700_000_000_123}, "410 body")
    expired = token()
    admin("/admin/tokens/unregistered", "POST", {"token": expired, "reason": "ExpiredToken"})
    r = production.push(expired, jwt=jwt)
    expect_eq((r.status, r.reason), (410, "ExpiredToken"), "ExpiredToken")
    expect_eq(r.json["timestamp"], clock_ms(), "default timestamp is the simulator clock's now")
    scoped = token()
    admin("/admin/tokens/unregistered", "POST", {"token": scoped, "bundle_id": BUNDLE, "timestamp_ms": 5})
    expect_eq(sandbox.push(scoped, jwt=jwt).status, 410, "scoped invalidation, its app")
    expect_eq(sandbox.push(scoped, jwt=jwt, headers=headers(topic="com.other.app")).status, 200, "another app")
    admin("/admin/tokens", "POST", {"token": "xyz", "environment": "sandbox"}, status=400)
    admin("/admin/tokens/unregistered", "POST", {"token": token(), "reason": "BadTopic"}, status=400)


@scenario
def certificate_auth():
    """Certificate connections: topics from Apple's extension or the subject UID, no provider token."""
    multi = H2("sandbox", cert="client-multi.pem", key="client-multi-key.pem")
    expect_eq(multi.max_streams_seen, [1], "initial limit")
    t = token()
    ok = multi.push(t)  # no authorization header
    expect_eq(ok.status, 200, f"certificate push ({ok!r})")
    multi.pump(lambda: len(multi.max_streams_seen) >= 2, what="the raised limit")
    expect_eq(multi.push(t, headers=headers(topic=BUNDLE + ".voip", push_type="voip")).status, 200, "listed VoIP topic")
    expect_eq(multi.push(t, jwt="ignored.garbage.token").status, 200, "authorization is ignored")
    expect_reason(multi.push(t, headers=headers(topic="com.other.app")), 400, "TopicDisallowed")
    expect_reason(multi.push(t, headers=headers(topic=None)), 400, "MissingTopic")
    expect_reason(multi.push(t, headers=headers(topic=BUNDLE + ".location-query", push_type="location")), 400,
                  "TopicDisallowed")

    single = H2("production", cert="client-single.pem", key="client-single-key.pem")
    expect_eq(single.push(t, headers=headers(topic=None)).status, 200, "topic from the certificate UID")
    expect_reason(single.push(t, headers=headers(topic=BUNDLE)), 400, "TopicDisallowed")
    records = [r for r in admin("/admin/requests")["requests"] if r["environment"] == "production"]
    check(records and "UID=com.example.single" in records[-1]["certificate_subject"], f"certificate subject in {records[-1:]}")
    connections = admin("/admin/connections")["connections"]
    check(any(c["auth"] == "certificate" and c["certificate_topics"] == [BUNDLE, BUNDLE + ".voip"] for c in connections),
          f"certificate topics in {connections}")

    try:
        rogue = H2("sandbox", cert="rogue.pem", key="rogue-key.pem")
        r = rogue.push(t)
        raise Failure(f"a certificate from another CA was accepted: {r!r}")
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError, Failure) as error:
        if isinstance(error, Failure) and "was accepted" in str(error):
            raise
    # Without a certificate the same listener is a token-auth listener.
    expect_reason(H2("sandbox").push(t), 403, "MissingProviderToken")


@scenario
def status_shares():
    jwt = make_jwt()
    c = H2("sandbox")
    c.push(token(), jwt=jwt)
    admin("/admin/faults", "PUT", {"status_shares": {"503": 1.0}})
    expect_reason(c.push(token(), jwt=jwt), 503, "ServiceUnavailable")
    admin("/admin/faults", "PUT", {"status_shares": {"429": 0.5, "500": 0.5}})
    sids = [c.send_push(token(), jwt=jwt, flush=False) for _ in range(60)]
    c.flush()
    seen = {}
    for sid in sids:
        r = c.wait(sid)
        seen[(r.status, r.reason)] = seen.get((r.status, r.reason), 0) + 1
    expect_eq(set(seen), {(429, "TooManyRequests"), (500, "InternalServerError")}, "injected answers")
    counters = admin("/admin/counters")["counters"]
    expect_eq(counters.get("429 TooManyRequests", 0) + counters.get("500 InternalServerError", 0), 60, f"counters {counters}")
    admin("/admin/faults", "PUT", {"reason_shares": {"Shutdown": 1.0}})
    expect_reason(c.push(token(), jwt=jwt), 503, "Shutdown")
    admin("/admin/faults", "PUT", {"reason_shares": {"IdleTimeout": 0.5, "ExpiredProviderToken": 0.5}})
    seen = {(r.status, r.reason) for r in (c.push(token(), jwt=jwt) for _ in range(30))}
    expect_eq(seen, {(400, "IdleTimeout"), (403, "ExpiredProviderToken")}, "reason shares")
    admin("/admin/faults", "PUT", {"status_shares": {"429": 0.9, "500": 0.2}}, status=400)
    admin("/admin/faults", "PUT", {"status_shares": {"429": 0.9}, "reason_shares": {"Shutdown": 0.2}}, status=400)
    admin("/admin/faults", "PUT", {"reason_shares": {"NoSuchReason": 0.2}}, status=400)
    admin("/admin/faults", "PUT", {})
    expect_eq(c.push(token(), jwt=jwt).status, 200, "faults cleared")


@scenario
def token_rate_limit():
    set_clock_to_now()
    jwt = make_jwt()
    c = H2("sandbox")
    admin("/admin/faults", "PUT", {"token_rate_limit": {"max_pushes": 3, "window_ms": 60000}})
    t = token()
    for i in range(3):
        expect_eq(c.push(t, jwt=jwt).status, 200, f"push {i + 1} within the limit")
    expect_reason(c.push(t, jwt=jwt), 429, "TooManyRequests")
    expect_eq(c.push(token(), jwt=jwt).status, 200, "another token")
    advance_clock(60_000)
    expect_eq(c.push(t, jwt=jwt).status, 200, "a new window")


@scenario
def latency():
    jwt = make_jwt()
    c = H2("sandbox")
    c.push(token(), jwt=jwt)
    admin("/admin/faults", "PUT", {"latency": {"min_ms": 300, "max_ms": 300}})
    start = time.monotonic()
    sids = [c.send_push(token(), jwt=jwt, flush=False) for _ in range(20)]
    c.flush()
    for sid in sids:
        expect_eq(c.wait(sid).status, 200, "delayed answer")
    elapsed = time.monotonic() - start
    check(0.29 <= elapsed < 1.5, f"20 concurrent answers delayed 300 ms each took {elapsed:.3f}s (must overlap)")
    # The event loop is not blocked meanwhile: the admin API and other connections answer.
    records = admin("/admin/requests")["requests"]
    expect_eq(records[-1]["delay_ms"], 300, "recorded delay")
    admin("/admin/faults", "PUT", {"latency": {"distribution": "exponential", "mean_ms": 5, "max_ms": 50, "share": 0.5}})
    for _ in range(10):
        expect_eq(c.push(token(), jwt=jwt).status, 200, "exponential latency")
    delays = [r["delay_ms"] for r in admin("/admin/requests")["requests"][-10:]]
    check(all(0 <= d <= 50 for d in delays), f"delays capped at 50 ms: {delays}")


@scenario
def goaway_after_streams():
    jwt = make_jwt()
    admin("/admin/faults", "PUT", {"goaway": {"after_streams": 3, "reason": "Shutdown"}})
    c = H2("sandbox")
    statuses = [c.push(token(), jwt=jwt).status for _ in range(3)]
    expect_eq(statuses, [200, 200, 200], "answers before GOAWAY")
    c.pump(lambda: c.goaway is not None, what="GOAWAY")
    expect_eq(c.goaway.error_code, 0, "GOAWAY error code NO_ERROR")
    expect_eq(c.goaway.last_stream_id, 5, "last-stream-id")
    expect_eq(json.loads(c.goaway.additional_data), {"reason": "Shutdown"}, "GOAWAY debug data")
    expect_eq(admin("/admin/counters")["counters"].get("goaway"), 1, "goaway counter")


@scenario
def goaway_every():
    jwt = make_jwt()
    admin("/admin/faults", "PUT", {"goaway": {"every_ms": 200, "reason": "IdleTimeout", "error_code": 0}})
    c = H2("sandbox")
    start = time.monotonic()
    expect_eq(c.push(token(), jwt=jwt).status, 200, "first push")
    c.pump(lambda: c.goaway is not None, timeout=3, what="the periodic GOAWAY")
    elapsed = time.monotonic() - start
    check(0.15 <= elapsed < 2, f"GOAWAY after {elapsed:.3f}s, expected about 0.2s")
    expect_eq(json.loads(c.goaway.additional_data), {"reason": "IdleTimeout"}, "debug data")
    # Admin-triggered GOAWAY on every connection.
    admin("/admin/faults", "PUT", {})
    d = H2("production")
    expect_eq(d.push(token(), jwt=jwt).status, 200, "push")
    ids = admin("/admin/connections/goaway", "POST", {"environment": "production", "reason": "Shutdown"})["connections"]
    check(len(ids) >= 1, f"goaway targets {ids}")
    d.pump(lambda: d.goaway is not None, what="the admin GOAWAY")
    expect_eq(admin("/admin/counters")["counters"].get("goaway"), 1 + len(ids), "goaway counter (timer + admin)")
    expect_eq(json.loads(d.goaway.additional_data), {"reason": "Shutdown"}, "admin GOAWAY debug data")


@scenario
def drop_without_goaway():
    jwt = make_jwt()
    admin("/admin/faults", "PUT", {"drop_after_streams": 2})
    c = H2("sandbox")
    expect_eq(c.push(token(), jwt=jwt).status, 200, "first push")
    sid = c.send_push(token(), jwt=jwt)
    c.wait_closed()
    expect_eq(c.goaway, None, "no GOAWAY before the drop")
    expect_eq(c.responses[sid].status, None, "the second push got no answer")
    expect_eq(admin("/admin/counters")["counters"].get("dropped"), 1, "dropped counter")
    admin("/admin/faults", "PUT", {})
    d = H2("sandbox")
    expect_eq(d.push(token(), jwt=jwt).status, 200, "push")
    admin("/admin/connections/drop", "POST", {})
    d.wait_closed()
    expect_eq(d.goaway, None, "admin drop sends no GOAWAY")


@scenario
def unanswered():
    jwt = make_jwt()
    c = H2("sandbox")
    c.push(token(), jwt=jwt)
    admin("/admin/faults", "PUT", {"unanswered_share": 1.0})
    sid = c.send_push(token(), jwt=jwt)
    try:
        c.wait(sid, timeout=0.7)
        raise Failure("an unanswered request was answered")
    except Failure as error:
        check("timed out" in str(error), str(error))
    records = admin("/admin/requests")["requests"]
    expect_eq((records[-1]["fault"], records[-1]["status"]), ("unanswered", None), "record")
    expect_eq(admin("/admin/counters")["counters"].get("unanswered"), 1, "unanswered counter")
    admin("/admin/faults", "PUT", {})
    expect_eq(c.push(token(), jwt=jwt).status, 200, "others are answered again")


@scenario
def hold():
    """The `hold` fault: answers for chosen tokens wait until released (one token, then all); the
    other streams of the connection are answered meanwhile; a held answer keeps its status."""
    jwt = make_jwt()
    c = H2("sandbox")
    c.push(token(), jwt=jwt)
    first, second, free = token(), token(), token()
    admin("/admin/faults", "PUT", {"hold": {"tokens": [first.upper(), second]}})
    expect_eq(admin("/admin/faults")["hold"], {"tokens": sorted([first, second])}, "faults in force")
    held_first = c.send_push(first, jwt=jwt)
    held_second = c.send_push(second, jwt=jwt)
    deadline = time.monotonic() + 5
    while len(admin("/admin/held")["held"]) < 2:  # both checked before the registration below
        check(time.monotonic() < deadline, "two answers held within 5 s")
        time.sleep(0.02)
    admin("/admin/tokens", "POST", {"token": second, "environment": "production"})
    held_bad = c.send_push(second, jwt=jwt)
    expect_eq(c.push(free, jwt=jwt).status, 200, "a token not held is answered at once")
    for sid in (held_first, held_second, held_bad):
        try:
            c.wait(sid, timeout=0.3)
            raise Failure(f"a held answer (stream {sid}) was sent before its release")
        except Failure as error:
            check("timed out" in str(error), str(error))
    held = admin("/admin/held")["held"]
    expect_eq([(h["token"], h["status"], h["environment"]) for h in held],
              [(first, 200, "sandbox"), (second, 200, "sandbox"), (second, 400, "sandbox")], "held answers")
    expect_eq(admin("/admin/held/release", "POST", {"token": first}), {"released": 1}, "release one token")
    expect_eq(c.wait(held_first).status, 200, "the released answer")
    try:
        c.wait(held_second, timeout=0.3)
        raise Failure("releasing one token released another")
    except Failure as error:
        check("timed out" in str(error), str(error))
    admin("/admin/held/release", "POST", {"token": "xyz"}, status=400)
    expect_eq(admin("/admin/held/release", "POST"), {"released": 2}, "release all")
    expect_eq(c.wait(held_second).status, 200, "second token, first answer")
    expect_reason(c.wait(held_bad), 400, "BadDeviceToken")
    records = [r for r in admin("/admin/requests")["requests"] if r.get("fault") == "held"]
    expect_eq(len(records), 3, "held records")
    expect_eq(admin("/admin/counters")["counters"].get("held"), 3, "held counter")
    expect_eq(admin("/admin/held")["held"], [], "nothing held after the release")
    admin("/admin/faults", "PUT", {})


@scenario
def settings_schedule():
    jwt = make_jwt()
    admin("/admin/faults", "PUT", {"max_concurrent_streams": 500, "max_concurrent_streams_schedule": [
        {"after_ms": 200, "value": 5}, {"after_ms": 500, "value": 50}]})
    c = H2("sandbox")
    expect_eq(c.push(token(), jwt=jwt).status, 200, "first push")
    c.pump(lambda: len(c.max_streams_seen) >= 4, timeout=3, what="the scheduled SETTINGS")
    expect_eq(c.max_streams_seen, [1, 500, 5, 50], "SETTINGS_MAX_CONCURRENT_STREAMS sequence")
    connections = admin("/admin/connections")["connections"]
    check(any(x["max_concurrent_streams"] == 50 for x in connections), f"connections {connections}")


@scenario
def observability():
    set_clock_to_now()
    jwt = make_jwt()
    c = H2("sandbox")
    t = token()
    body = b'{"aps":{"alert":"hello/world"},"k":"\\u00e9"}'
    expect_eq(c.push(t, jwt=jwt, body=body).status, 200, "push")
    expect_reason(c.push("abc", jwt=jwt), 400, "BadDeviceToken")
    data = admin("/admin/requests")
    first, second = data["requests"]
    expect_eq(first["environment"], "sandbox", "environment")
    expect_eq(first["path"], f"/3/device/{t}", "path")
    expect_eq(first["method"], "POST", "method")
    expect_eq(first["body"], body.decode(), "body text, byte for byte")
    expect_eq(first["status"], 200, "status")
    check("reason" not in first, "no reason on 200")
    expect_eq(dict(first["headers"])["apns-topic"], BUNDLE, "headers")
    expect_eq(first["jwt"]["header"], {"alg": "ES256", "kid": "KEY0000001", "typ": "JWT"}, "JWT header")
    expect_eq(first["jwt"]["claims"]["iss"], TEAM, "JWT claims")
    expect_eq(first["received_at_ms"], clock_ms(), "time from the simulator clock")
    expect_eq(first["connection"], second["connection"], "same connection id")
    check(len(first["apns_id"]) == 36, "apns_id")
    expect_eq((second["status"], second["reason"]), (400, "BadDeviceToken"), "second record")
    # Query parameters narrow the list: by token (any case), by time, the newest n.
    expect_eq(admin(f"/admin/requests?device_token={t.upper()}")["requests"], [first], "device_token filter")
    expect_eq(admin("/admin/requests?limit=1")["requests"], [second], "limit keeps the newest")
    expect_eq(admin(f"/admin/requests?since_ms={first['received_at_ms'] + 1}")["requests"], [], "since_ms filter")
    expect_eq(len(admin(f"/admin/requests?since_ms={first['received_at_ms']}&limit=5")["requests"]), 2, "since_ms and limit")
    bad = admin("/admin/requests?limit=0", status=400)
    check("limit" in bad["error"], f"the error names the parameter: {bad}")
    bad = admin("/admin/requests?token=ab", status=400)
    check("unknown query parameter" in bad["error"] and "token" in bad["error"], f"an unknown parameter is named: {bad}")
    counters = admin("/admin/counters")
    expect_eq(counters, {"counters": {"200": 1, "400 BadDeviceToken": 1}, "total": 2}, "counters")
    faults = admin("/admin/faults")
    expect_eq(faults["max_concurrent_streams"], 1000, "default faults")
    admin("/admin/faults", "PUT", {"latency": {"min_ms": 1, "max_ms": 2, "typo": 3}}, status=400)
    admin("/admin/nothing", status=404)
    admin("/admin/reset", "POST")
    expect_eq(admin("/admin/requests"), {"requests": []}, "reset requests")
    expect_eq(admin("/admin/counters"), {"counters": {}, "total": 0}, "reset counters")


@scenario
def config_file():
    """Started with a config file (faults + token lists); reset restores it."""
    jwt = make_jwt()
    faults = admin("/admin/faults")
    expect_eq(faults["status_shares"], {"500": 1.0}, "faults from the file")
    c = H2("sandbox")
    expect_reason(c.push(token(), jwt=jwt), 500, "InternalServerError")
    admin("/admin/faults", "PUT", {})
    expect_eq(c.push(token(), jwt=jwt).status, 200, "faults replaced at runtime")
    gone = ENV["SIM_FILE_UNREGISTERED"]
    r = c.push(gone, jwt=jwt)
    expect_eq((r.status, r.json), (410, {"reason": "Unregistered", "timestamp": 42}), "unregistered from the file")
    expect_reason(c.push(ENV["SIM_FILE_PRODUCTION_TOKEN"], jwt=jwt), 400, "BadDeviceToken")
    admin("/admin/reset", "POST")
    expect_eq(admin("/admin/faults")["status_shares"], {"500": 1.0}, "reset restores the file's faults")


@scenario
def aioapns_client():
    """aioapns (token and certificate auth) against the simulator."""
    import aioapns
    from aioapns import APNs, NotificationRequest, PushType
    import aioapns.connection as connection

    set_clock_to_now()  # aioapns signs with the real time
    connection.APNsDevelopmentClientProtocol.APNS_SERVER = "127.0.0.1"
    connection.APNsDevelopmentClientProtocol.APNS_PORT = PORTS["sandbox"]
    connection.APNsProductionClientProtocol.APNS_SERVER = "127.0.0.1"
    connection.APNsProductionClientProtocol.APNS_PORT = PORTS["production"]

    async def run():
        context = ssl.create_default_context(cafile=ENV["SIM_CA"])
        client = APNs(key=key_text("key1"), key_id="KEY0000001", team_id=TEAM, topic=BUNDLE, use_sandbox=True,
                      ssl_context=context)
        t, gone = token(), token()
        admin("/admin/tokens/unregistered", "POST", {"token": gone, "timestamp_ms": 1234})
        result = await client.send_notification(NotificationRequest(device_token=t, message={"aps": {"alert": "hi"}},
                                                                    push_type=PushType.ALERT))
        expect_eq((result.status, result.description), ("200", None), "aioapns push")
        results = await asyncio.gather(*[client.send_notification(NotificationRequest(
            device_token=token(), message={"aps": {"alert": str(i)}})) for i in range(30)])
        expect_eq({r.status for r in results}, {"200"}, "30 concurrent aioapns pushes")
        result = await client.send_notification(NotificationRequest(device_token=gone, message={"aps": {"alert": "x"}}))
        expect_eq((result.status, result.description, result.timestamp), ("410", "Unregistered", 1234), "410 via aioapns")
        result = await client.send_notification(NotificationRequest(device_token="abcd", message={"aps": {"alert": "x"}}))
        expect_eq((result.status, result.description), ("400", "BadDeviceToken"), "BadDeviceToken via aioapns")
        result = await client.send_notification(NotificationRequest(
            device_token=t, message={"aps": {"content-available": 1}}, push_type=PushType.BACKGROUND, priority=10))
        expect_eq((result.status, result.description), ("400", "BadPriority"), "background at priority 10")
        admin("/admin/faults", "PUT", {"status_shares": {"503": 1.0}})
        result = await client.send_notification(NotificationRequest(device_token=t, message={"aps": {"alert": "x"}}))
        expect_eq((result.status, result.description), ("503", "ServiceUnavailable"), "injected 503 via aioapns")
        admin("/admin/faults", "PUT", {})
        # GOAWAY: aioapns drops the connection and reconnects for the next push.
        admin("/admin/connections/goaway", "POST", {"reason": "Shutdown"})
        await asyncio.sleep(0.2)
        result = await client.send_notification(NotificationRequest(device_token=t, message={"aps": {"alert": "x"}}))
        expect_eq(result.status, "200", "push after GOAWAY")

        cert_client = APNs(client_cert=f"{DIR}/client-single-combined.pem", topic="com.example.single",
                           use_sandbox=False, ssl_context=ssl.create_default_context(cafile=ENV["SIM_CA"]))
        result = await cert_client.send_notification(NotificationRequest(device_token=t, message={"aps": {"alert": "c"}}))
        expect_eq(result.status, "200", "aioapns certificate push")
        records = admin("/admin/requests")["requests"]
        aioapns_records = [r for r in records if r["path"].endswith(t) and r["status"] == 200]
        check(any(r.get("jwt", {}).get("claims", {}).get("iss") == TEAM for r in aioapns_records), "aioapns JWT recorded")
        check(any(r.get("certificate_subject") for r in aioapns_records), "certificate push recorded")

    asyncio.run(run())


def key_text(name):
    with open(f"{DIR}/{name}.p8") as f:
        return f.read()


if __name__ == "__main__":
    name = sys.argv[1]
    admin("/admin/reset", "POST")
    if ENV.get("SIM_CLEAR_FAULTS"):  # a simulator started with faults in its config file
        admin("/admin/faults", "PUT", {})
    try:
        SCENARIOS[name]()
    except Failure as failure:
        print(f"FAIL {name}: {failure}", file=sys.stderr)
        sys.exit(1)
    print(f"ok {name}")
