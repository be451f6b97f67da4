"""Token hygiene on the real stack (docs/token-hygiene.md): a dispatcher configured with
PUSH_TOKEN_STALE_AFTER_DAYS and PUSH_TOKEN_DELETE_INACTIVE_AFTER_DAYS announces every stale token on
the feedback topic with OUTCOME_REASON_TOKEN_STALE, deactivates it, deletes old inactive rows, logs a
line per pass and counts it in its metrics.

The job walks the whole token table, so it runs in a replica of its own: the stack's binary and
environment with a database, a consumer group and input topics of its own (nothing else of the stack
changes), and the stack's real feedback topic.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import uuid

import pushstack as stack
from pushstack import Dispatcher

wait_for = stack.wait_for
DAY_MS = 86_400_000


def superuser_url(database: str) -> str:
    """The stack's PostgreSQL server as its superuser (with the server's password file), database `database`."""
    parsed = urllib.parse.urlparse(stack.stack_env()["PUSH_PG_SUPERUSER_URL"])
    return urllib.parse.urlunparse(parsed._replace(path=f"/{database}"))


def psql_at(url: str, sql: str) -> list[list[str]]:
    out = subprocess.run(["psql", url, "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def token(i: int, run: str) -> str:
    return (run + "%056x" % i)[:64]


def test_stale_tokens_are_announced_on_the_feedback_topic_and_deactivated_and_old_inactive_rows_deleted(tmp_path):
    run = uuid.uuid4().hex[:8]
    database = f"push_hygiene_{run}"
    url = superuser_url(database)
    psql_at(superuser_url("postgres"), f"CREATE DATABASE {database}")
    group, token_events, send_requests = f"hygiene-{run}", f"hygiene.token-events.{run}", f"hygiene.send-requests.{run}"
    stack.kafka_control(f"create {token_events}:1", f"create {send_requests}:1")
    argv, env = Dispatcher.stack().launch_spec()
    env = {k: v for k, v in env.items() if k != "PUSH_PG_PASSWORD_FILE"}
    env.update({
        "PUSH_PG_URL": url, "PUSH_CONSUMER_GROUP": group, "PUSH_TOPIC_TOKEN_EVENTS": token_events,
        "PUSH_TOPIC_SEND_REQUESTS": send_requests, "PUSH_TOPIC_FEEDBACK": stack.FEEDBACK, "PUSH_INSTANCE_ID": f"hygiene-{run}",
        "PUSH_ADMIN_PORT": "0", "PUSH_CAMPAIGN_RUNNER": "false",
        "PUSH_TOKEN_STALE_AFTER_DAYS": "90", "PUSH_TOKEN_DELETE_INACTIVE_AFTER_DAYS": "30",
        "PUSH_TOKEN_HYGIENE_INTERVAL_MS": "1000", "PUSH_TOKEN_HYGIENE_BATCH_SIZE": "7",
    })
    reader = stack.TopicReader(stack.FEEDBACK)
    replica = Dispatcher.start(argv, env, tmp_path / "hygiene.log")
    try:
        now = int(time.time() * 1000)
        rows = []
        stale = {token(i, run) for i in range(0, 40)}
        fresh = {token(i, run) for i in range(40, 60)}
        old_inactive = {token(i, run) for i in range(60, 70)}
        recent_inactive = {token(i, run) for i in range(70, 75)}
        for t in stale:
            rows.append(f"('{t}', 'com.example.hyg', 'sandbox', 'standard', 'user-{t[-4:]}', 'active', NULL, NULL, {now - 91 * DAY_MS}, {now - 91 * DAY_MS})")
        for t in fresh:
            rows.append(f"('{t}', 'com.example.other', 'production', 'standard', NULL, 'active', NULL, NULL, {now - 89 * DAY_MS}, {now - 89 * DAY_MS})")
        for t in old_inactive:
            rows.append(f"('{t}', 'com.example.hyg', 'sandbox', 'standard', NULL, 'inactive', 'unregistered', {now - 31 * DAY_MS}, 1, 1)")
        for t in recent_inactive:
            rows.append(f"('{t}', 'com.example.hyg', 'sandbox', 'standard', NULL, 'inactive', 'unregistered', {now - 29 * DAY_MS}, 1, 1)")
        psql_at(url, "INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id, status,"
                     " inactive_reason, inactive_at_ms, last_event_at_ms, registered_at_ms) VALUES " + ", ".join(rows))

        # Every stale token's TokenInvalidated reaches the feedback topic, with the stale reason.
        feedback = stack.pb("feedback_pb2")

        def announced(records):
            return stale <= {e.token_invalidated.device_token for e in stack.decode_feedback(records)
                             if e.WhichOneof("event") == "token_invalidated"}
        events = [e for e in stack.decode_feedback(reader.read_until(announced, timeout=120))
                  if e.WhichOneof("event") == "token_invalidated" and e.token_invalidated.device_token.startswith(run)]
        assert {e.token_invalidated.device_token for e in events} == stale
        assert all(e.token_invalidated.outcome_reason == feedback.OUTCOME_REASON_TOKEN_STALE for e in events)
        assert all(e.token_invalidated.bundle_id == "com.example.hyg" and e.token_invalidated.environment == 1 for e in events)
        assert all(e.token_invalidated.user_id == "user-" + e.token_invalidated.device_token[-4:] for e in events)

        # The rows: stale ones inactive (reason stale), old inactive ones gone, the rest untouched.
        def table():
            return {r[0]: (r[1], r[2]) for r in psql_at(url, "SELECT device_token, status, coalesce(inactive_reason, '') FROM device_tokens")}
        rows_now = wait_for(lambda: (t := table()) and all(t.get(x) == ("inactive", "stale") for x in stale)
                            and not (old_inactive & t.keys()) and t, what="the pass to commit", timeout=60)
        assert set(rows_now) == stale | fresh | recent_inactive
        assert all(rows_now[x] == ("active", "") for x in fresh)
        assert all(rows_now[x] == ("inactive", "unregistered") for x in recent_inactive)

        # One line per pass (logfmt or JSON lines), and the metrics.
        def field(line: str, name: str) -> str:
            found = re.search(name + r'(?:=|":")"?([^"\s]*)', line)
            return found.group(1) if found else ""
        log = (tmp_path / "hygiene.log").read_text(errors="replace")
        passes = [line for line in log.splitlines() if "token hygiene pass" in line]
        completed = [line for line in passes if field(line, "outcome") == "completed"]
        assert sum(int(field(line, "stale_deactivated")) for line in completed) == 40, completed[-3:]
        assert sum(int(field(line, "inactive_deleted")) for line in completed) == 10, completed[-3:]
        port = int(field(log, "admin_port"))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert re.search(r'push_token_hygiene_rows_total\{action="stale_deactivated"\} 40\b', metrics), metrics
        assert re.search(r'push_token_hygiene_rows_total\{action="inactive_deleted"\} 10\b', metrics)
        assert re.search(r'push_token_hygiene_passes_total\{outcome="completed"\} [1-9]', metrics)

        # A stale token registered again is active again (a newer registration wins).
        again = sorted(stale)[0]
        psql_at(url, f"UPDATE device_tokens SET status = 'active', inactive_reason = NULL, inactive_at_ms = NULL,"
                     f" registered_at_ms = {now}, last_event_at_ms = {now} WHERE device_token = '{again}'")
        before, seen = table(), (tmp_path / "hygiene.log").read_text(errors="replace").count("token hygiene pass")
        wait_for(lambda: (tmp_path / "hygiene.log").read_text(errors="replace").count("token hygiene pass") >= seen + 2,
                 what="two more passes", timeout=30)
        assert table() == before and before[again] == ("active", "")
    finally:
        reader.close()
        if replica.alive():
            os.kill(replica.pid, signal.SIGTERM)
            replica.exit_status(timeout=60)
        psql_at(superuser_url("postgres"), f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
