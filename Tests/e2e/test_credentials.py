"""Several apps, Apple teams and keys on the local stack (README "APNs credentials"): scripts/up gives the
dispatcher a credentials file with three keys under two teams and the simulator trusts the same three
keys with the same scopes (scripts/gen-dev-credentials):

  com.example.*     DEVTEAM001/DEVKEY0001  every environment
  com.sample.beta   DEVTEAM001/DEVKEY0002  sandbox only
  com.acquired.app  DEVTEAM002/DEVKEY0003  production only, topic com.acquired.app only

Concurrent requests to the three apps are delivered, each signed by its own key on connections that
carry one team; a bundle id without a key and a notification outside its key's environment are
refused before any Apple request; a key removed from the file drains its connections.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

import pushstack as stack

# (bundle id, environment, the key that must sign it, its team)
APPS = [("com.example.e2e", "SANDBOX", "DEVKEY0001", "DEVTEAM001"),
        ("com.sample.beta", "SANDBOX", "DEVKEY0002", "DEVTEAM001"),
        ("com.acquired.app", "PRODUCTION", "DEVKEY0003", "DEVTEAM002")]
TOKENS_PER_APP = 20


def request_to(tokens: list[str], bundle: str, environment: str):
    """A SendRequest of one alert to `tokens` (never registered: the request's environment picks the host)."""
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    notification = send.Notification(bundle_id=bundle, environment=common.Environment.Value(environment),
                                     push_type=common.PushType.Value("PUSH_TYPE_ALERT"),
                                     payload=json.dumps({"aps": {"alert": f"hello {bundle}"}}, separators=(",", ":")))
    return send.SendRequest(request_id=f"credentials-{uuid.uuid4()}", device_tokens=send.DeviceTokens(device_tokens=tokens),
                            notification=notification, created_at_ms=int(time.time() * 1000))


def send_all(requests: list) -> dict[str, list]:
    """Produces every request before waiting (they run concurrently), then reads the feedback topic until
    each completed and reported every token (reports are keyed by token, so they come on other partitions
    than the RequestCompleted, in any order); returns each request's delivery reports by request id."""
    reader = stack.TopicReader(stack.FEEDBACK)
    expected = {r.request_id: len(r.device_tokens.device_tokens) for r in requests}

    def split(records):
        reports: dict[str, list] = {request_id: [] for request_id in expected}
        done: set[str] = set()
        for event in stack.decode_feedback(records):
            kind = event.WhichOneof("event")
            if kind == "delivery_report" and event.delivery_report.request_id in reports:
                reports[event.delivery_report.request_id].append(event.delivery_report)
            elif kind == "request_completed":
                done.add(event.request_completed.request_id)
        return reports, done
    try:
        for request in requests:
            stack.send_request(request)

        def finished(records) -> bool:
            reports, done = split(records)
            return set(expected) <= done and all(len(reports[r]) >= n for r, n in expected.items())
        records = reader.read_until(finished, timeout=120)
        records += reader.drain(seconds=0.5)  # a repeated report would show here
    finally:
        reader.close()
    return split(records)[0]


def simulator_clock_ms() -> int:
    return stack.simulator_admin("/admin/clock")["now_ms"]


def test_three_apps_under_two_teams_are_delivered_each_with_its_own_key_on_one_team_per_connection():
    feedback = stack.pb("feedback_pb2")
    since = simulator_clock_ms()
    tokens = {bundle: [stack.random_token() for _ in range(TOKENS_PER_APP)] for bundle, _, _, _ in APPS}
    requests = [request_to(tokens[bundle], bundle, environment) for bundle, environment, _, _ in APPS]
    reports = send_all(requests)

    for request, (bundle, environment, _, _) in zip(requests, APPS):
        got = reports[request.request_id]
        assert sorted(r.device_token for r in got) == sorted(tokens[bundle]), f"{bundle}: one report per token"
        assert {feedback.DeliveryOutcome.Name(r.outcome) for r in got} == {"DELIVERED"}, (bundle, got[:1])

    records = stack.simulator_requests(since_ms=since, timeout=60)
    for bundle, environment, key_id, team_id in APPS:
        mine = [r for r in records if r["path"].rsplit("/", 1)[-1] in set(tokens[bundle])]
        assert len(mine) == TOKENS_PER_APP, f"{bundle}: {len(mine)} requests at the simulator"
        # Signed by the app's own key and team, answered 200 on the environment's listener.
        assert {(r["jwt"]["header"]["kid"], r["jwt"]["claims"]["iss"], r["environment"], r["status"]) for r in mine} \
            == {(key_id, team_id, environment.lower(), 200)}, bundle

    # Every connection the simulator saw carried one team: the one it is bound to, and every request on it.
    connections = {(c["environment"], c["connection"]): c for c in stack.simulator_admin("/admin/connections")["connections"]}
    teams_seen: dict[tuple[str, int], set[str]] = {}
    for r in records:
        if "jwt" in r:
            teams_seen.setdefault((r["environment"], r["connection"]), set()).add(r["jwt"]["claims"]["iss"])
    assert teams_seen, "no token-authenticated request recorded"
    for key, teams in teams_seen.items():
        assert len(teams) == 1, f"connection {key} carried the teams {teams}"
        if key in connections:  # a connection closed since (idle, GOAWAY) is no longer listed
            assert connections[key].get("team_id") in teams, (key, connections[key], teams)
    bound = {(c["key_id"], c["team_id"]) for c in connections.values() if "key_id" in c}
    assert {(key_id, team_id) for _, _, key_id, team_id in APPS} <= bound, bound
    acquired = [c for c in connections.values() if c.get("key_id") == "DEVKEY0003"]
    assert acquired and all(c["environment"] == "production" and c.get("key_topics") == ["com.acquired.app"]
                            for c in acquired), acquired


def test_a_bundle_id_without_a_key_or_outside_its_keys_environment_is_refused_without_an_apple_request():
    feedback = stack.pb("feedback_pb2")
    since = simulator_clock_ms()
    refused = [("com.unknown.app", "SANDBOX"),       # no entry of the credentials file matches it
               ("com.acquired.app", "SANDBOX"),      # its only key is scoped to production
               ("com.sample.beta", "PRODUCTION")]    # its only key is scoped to sandbox
    tokens = {case: [stack.random_token() for _ in range(3)] for case in refused}
    requests = [request_to(tokens[case], *case) for case in refused]
    reports = send_all(requests)

    for request, case in zip(requests, refused):
        got = reports[request.request_id]
        assert sorted(r.device_token for r in got) == sorted(tokens[case]), case
        assert {(feedback.DeliveryOutcome.Name(r.outcome), feedback.OutcomeReason.Name(r.outcome_reason),
                 r.http_status, r.apns_reason) for r in got} == {("REJECTED", "OUTCOME_REASON_NO_CREDENTIAL", 0, "")}, case
    every_token = {t for ts in tokens.values() for t in ts}
    at_simulator = [r for r in stack.simulator_requests(since_ms=since, timeout=60)
                    if r["path"].rsplit("/", 1)[-1] in every_token]
    assert at_simulator == [], at_simulator
    # A refusal for want of a key never deactivates: the tokens were never stored, and stay so.
    listed = ",".join(f"'{t}'" for t in every_token)
    assert stack.psql(f"SELECT device_token FROM device_tokens WHERE device_token IN ({listed})") == []


def test_a_key_removed_from_the_file_drains_its_connections():
    """The dispatcher re-reads its credentials file on SIGHUP: a key the file no longer holds has its
    connections closed once its sends finished (README "Rotating the .p8 key"); the file is restored after."""
    feedback = stack.pb("feedback_pb2")
    path = stack.VAR_DIR / "credentials" / "apns-credentials.json"
    original = path.read_text()
    dispatcher = stack.Dispatcher.stack()
    tokens = [stack.random_token() for _ in range(3)]
    reports = send_all([request_to(tokens, "com.sample.beta", "SANDBOX")])
    assert {feedback.DeliveryOutcome.Name(r.outcome) for r in next(iter(reports.values()))} == {"DELIVERED"}

    def bound(key_id: str) -> list[dict]:
        return [c for c in stack.simulator_admin("/admin/connections")["connections"] if c.get("key_id") == key_id]
    assert bound("DEVKEY0002"), "com.sample.beta's key has a connection"
    others = {c["connection"] for c in bound("DEVKEY0001")}
    log = stack.LogMark(dispatcher.log)
    try:
        without = json.loads(original)
        without["apps"] = [app for app in without["apps"] if app["bundle_id"] != "com.sample.beta"]
        path.write_text(json.dumps(without))
        os.kill(dispatcher.pid, signal.SIGHUP)
        stack.wait_for(lambda: not bound("DEVKEY0002"), what="DEVKEY0002's connections to close", timeout=30)
        assert "APNs pool drained" in log.text()
        # The other keys' connections stay.
        assert others <= {c["connection"] for c in bound("DEVKEY0001")}
        # And com.sample.beta has no key now.
        refused = send_all([request_to([stack.random_token()], "com.sample.beta", "SANDBOX")])
        assert [feedback.OutcomeReason.Name(r.outcome_reason) for r in next(iter(refused.values()))] == ["OUTCOME_REASON_NO_CREDENTIAL"]
    finally:
        path.write_text(original)
        os.kill(dispatcher.pid, signal.SIGHUP)
        stack.wait_for(lambda: "APNs credentials reloaded" in log.text().rsplit("APNs keys removed", 1)[-1], what="the file restored", timeout=30)
    again = send_all([request_to([stack.random_token()], "com.sample.beta", "SANDBOX")])
    assert [feedback.DeliveryOutcome.Name(r.outcome) for r in next(iter(again.values()))] == ["DELIVERED"]


PUSHCTL = stack.ROOT / ".build" / "debug" / "pushctl"


def test_the_dispatcher_reports_each_keys_last_mint_and_last_refusal_and_pushctl_shows_them():
    """GET /v1/credentials on the dispatcher's admin port and `pushctl credentials list --admin URL`: per
    key its state, last provider-token mint and APNs's last refusal (a refusal made here by the
    simulator treating every token of the next hour as expired), never key material."""
    send_all([request_to([stack.random_token()], bundle, environment) for bundle, environment, _, _ in APPS])
    status, body, headers = stack.admin("dispatcher", "/v1/credentials")
    content_type = {name.lower(): value for name, value in headers.items()}.get("content-type", "")
    assert status == 200 and content_type.startswith("application/json"), (status, content_type, body)
    report = json.loads(body)
    assert report["source"] == stack.stack_env()["PUSH_APNS_CREDENTIALS_FILE"]
    by_key = {(k["bundle_id"], k["key_id"]): k for k in report["keys"]}
    assert set(by_key) == {("com.example.*", "DEVKEY0001"), ("com.sample.beta", "DEVKEY0002"), ("com.acquired.app", "DEVKEY0003")}
    for key in by_key.values():
        assert key["state"] == "serving" and key["last_mint_at"], key
    assert "PRIVATE KEY" not in body and ".p8" not in body

    # APNs refuses DEVKEY0002's tokens (every iat up to an hour from now "expired", the renewed one too).
    now_s = stack.simulator_admin("/admin/clock")["now_ms"] // 1000
    stack.simulator_admin("/admin/faults", "PUT", {"provider_tokens_expired_through_iat": now_s + 3600})
    try:
        refused = send_all([request_to([stack.random_token()], "com.sample.beta", "SANDBOX")])
    finally:
        stack.simulator_admin("/admin/faults", "PUT", {})
    assert [r.apns_reason for r in next(iter(refused.values()))] == ["ExpiredProviderToken"]
    key = {k["key_id"]: k for k in json.loads(stack.admin("dispatcher", "/v1/credentials")[1])["keys"]}["DEVKEY0002"]
    assert key["last_refusal_reason"] == "ExpiredProviderToken" and key["last_refusal_at"], key

    admin_url = stack.stack_env()["PUSH_DISPATCHER_ADMIN_URL"]
    listed = subprocess.run([str(PUSHCTL), "--env-file", str(stack.VAR_DIR / "stack.env"), "credentials", "list", "--admin", admin_url],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[1]: line for line in listed.stdout.splitlines()}
    assert "dispatcher: serving" in lines["DEVTEAM001/DEVKEY0002"] and "last refusal " in lines["DEVTEAM001/DEVKEY0002"]
    assert "ExpiredProviderToken" in lines["DEVTEAM001/DEVKEY0002"]
    assert "last mint never" not in lines["DEVTEAM002/DEVKEY0003"]
    as_json = subprocess.run([str(PUSHCTL), "--env-file", str(stack.VAR_DIR / "stack.env"), "credentials", "list", "--json", "--admin", admin_url],
                             capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    rows = {row["key_id"]: row for row in map(json.loads, as_json.stdout.splitlines())}
    assert rows["DEVKEY0002"]["last_refusal_reason"] == "ExpiredProviderToken" and rows["DEVKEY0001"]["dispatcher_state"] == "serving"
    unreachable = subprocess.run([str(PUSHCTL), "--env-file", str(stack.VAR_DIR / "stack.env"), "credentials", "list",
                                  "--admin", "http://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert unreachable.returncode != 0 and "127.0.0.1:1" in unreachable.stderr
