"""`pushctl` end to end on the local stack (scripts/up): register, send --wait, follow, token show,
simulator faults, dead-letter re-drive, and its exit statuses."""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import pushstack as stack

ROOT = Path(__file__).resolve().parents[2]
PUSHCTL = Path(os.environ.get("PUSH_BIN_DIR", ROOT / ".build" / "debug")) / "pushctl"
BUNDLE = "com.example.pushctl"


def pushctl(*arguments: str, timeout: float = 120) -> subprocess.CompletedProcess:
    if not PUSHCTL.exists():
        pytest.fail(f"{PUSHCTL} is missing: run swift build first")
    return subprocess.run([str(PUSHCTL), "--env-file", str(stack.VAR_DIR / "stack.env"), *arguments],
                          capture_output=True, text=True, timeout=timeout)


def test_register_show_and_send_wait_delivers():
    token = stack.random_token()
    user = f"pushctl-{uuid.uuid4()}"
    done = pushctl("register", "--token", token.upper(), "--bundle", BUNDLE, "--environment", "sandbox", "--user", user, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deviceToken"] == token
    shown = stack.wait_for(lambda: (r := pushctl("token", "show", token, "--json")).returncode == 0 and r, "token row")
    row = json.loads(shown.stdout)
    assert row["device_token"] == token and row["user_id"] == user and row["status"] == "active" and row["environment"] == "sandbox"
    request_id = f"pushctl-wait-{uuid.uuid4()}"
    done = pushctl("send", "--user", user, "--bundle", BUNDLE, "--title", "Hello", "--body", "from pushctl", "--wait",
                   "--request-id", request_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"request {request_id} COMPLETED: 1 notifications: 1 delivered, 0 rejected, 0 failed, 0 skipped" in done.stdout
    assert "100%" in done.stderr  # the progress line


def test_send_wait_exits_4_when_apple_rejects_and_sim_commands_drive_the_simulator():
    token = stack.random_token()
    assert pushctl("register", "--token", token, "--bundle", BUNDLE).returncode == 0
    stack.wait_for(lambda: pushctl("token", "show", token).returncode == 0, "token row")
    done = pushctl("sim", "unregister", token)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reason"] == "Unregistered"
    done = pushctl("send", "--token", token, "--bundle", BUNDLE, "--payload", '{"aps":{"badge":1}}', "--wait", "--json")
    assert done.returncode == 4, done.stdout + done.stderr
    completed = json.loads(done.stdout)
    assert completed["rejected"] == 1 and completed.get("delivered", 0) == 0
    faults = pushctl("sim", "faults")
    assert faults.returncode == 0 and json.loads(faults.stdout) is not None
    assert pushctl("sim", "counters").returncode == 0


def test_follow_prints_the_requests_events_as_json_lines():
    token = stack.random_token()
    assert pushctl("register", "--token", token, "--bundle", BUNDLE, "--environment", "sandbox").returncode == 0
    stack.wait_for(lambda: pushctl("token", "show", token).returncode == 0, "token row")
    request_id = f"pushctl-follow-{uuid.uuid4()}"
    follower = subprocess.Popen(
        [str(PUSHCTL), "follow", "--json", "--request", request_id, "--count", "2", "--timeout", "90",
         "--env-file", str(stack.VAR_DIR / "stack.env")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # It says "joining …" at once and "following …" once it has its partitions.
        line = follower.stderr.readline()
        assert "joining push.feedback.v1" in line, line
        line = follower.stderr.readline()
        assert "following push.feedback.v1" in line, line
        sent = pushctl("send", "--token", token, "--bundle", BUNDLE, "--title", "t", "--request-id", request_id)
        assert sent.returncode == 0, sent.stderr
        out, err = follower.communicate(timeout=100)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert len(events) == 2
    # The report (keyed by token) and the RequestCompleted (keyed by request id) are on different
    # partitions, so they may come in either order.
    [report] = [e["deliveryReport"] for e in events if "deliveryReport" in e]
    [completed] = [e["requestCompleted"] for e in events if "requestCompleted" in e]
    assert report["requestId"] == request_id and report["outcome"] == "DELIVERED"
    assert completed["requestId"] == request_id


def test_follow_readable_lines():
    done = pushctl("follow", "--from-beginning", "--count", "1", "--timeout", "30")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1
    first = done.stdout.split()
    assert first[0].endswith("Z") and first[1] in {"DELIVERED", "REJECTED", "FAILED", "SKIPPED", "TOKEN_INVALIDATED"} | {
        f"REQUEST_{s}" for s in ("COMPLETED", "CANCELLED")}


def find_dead_letter(key: bytes) -> dict:
    def found():
        done = pushctl("dead-letters", "list", "--json", "--idle", "2")
        for line in done.stdout.splitlines():
            entry = json.loads(line)
            if entry["deadLetter"].get("originalKey") == __import__("base64").b64encode(key).decode():
                return entry
        return None
    return stack.wait_for(found, "the dead letter", timeout=60)


def test_dead_letters_are_listed_and_redriven_to_their_source_topic():
    import base64
    key = f"pushctl-dead-{uuid.uuid4()}".encode()
    value = b"\xff\xff not a SendRequest"
    stack.produce(stack.SEND_REQUESTS, key, value, "application/x-protobuf; message=push.v1.SendRequest")
    first = find_dead_letter(key)
    assert first["deadLetter"]["sourceTopic"] == stack.SEND_REQUESTS
    partition, offset = str(first["partition"]), str(first["offset"])

    dry = pushctl("dead-letters", "redrive", "--partition", partition, "--from", offset, "--to", offset, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would re-drive {stack.DEAD_LETTER}[{partition}]@{offset} → {stack.SEND_REQUESTS}" in dry.stdout

    done = pushctl("dead-letters", "redrive", "--partition", partition, "--from", offset, "--to", offset)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "re-drove 1, skipped 0" in done.stderr
    target = done.stdout.split("→")[1].strip()  # push.send-requests.v1[P]@O
    new_offset = int(target.rsplit("@", 1)[1])
    # The dispatcher handled the original again: still malformed, so a second dead letter with the
    # same original, whose source is the re-driven record.
    def second():
        out = pushctl("dead-letters", "list", "--json", "--idle", "2").stdout
        entries = [json.loads(line) for line in out.splitlines()]
        return [e for e in entries if e["deadLetter"].get("originalKey") == base64.b64encode(key).decode()
                and int(e["deadLetter"].get("sourceOffset", 0)) == new_offset] or None
    again = stack.wait_for(second, "the re-driven record's dead letter", timeout=60)[0]
    assert base64.b64decode(again["deadLetter"]["originalValue"]) == value


def test_redrive_to_another_topic_copies_key_value_and_headers():
    from confluent_kafka import Consumer
    key = f"pushctl-dead-copy-{uuid.uuid4()}".encode()
    value = b"\x0a\x03bad"
    stack.produce(stack.SEND_REQUESTS, key, value, "application/x-protobuf; message=push.v1.SendRequest")
    entry = find_dead_letter(key)
    target = f"pushctl.redrive-test.{uuid.uuid4().hex[:8]}"
    done = pushctl("dead-letters", "redrive", "--partition", str(entry["partition"]), "--from", str(entry["offset"]),
                   "--to", str(entry["offset"]), "--to-topic", target)
    assert done.returncode == 0, done.stdout + done.stderr
    consumer = Consumer({**stack.kafka_config(), "group.id": f"e2e-{uuid.uuid4()}", "auto.offset.reset": "earliest"})
    consumer.subscribe([target])
    try:
        message = stack.wait_for(lambda: (m := consumer.poll(0.5)) is not None and not m.error() and m, "the re-driven record")
    finally:
        consumer.close()
    assert message.key() == key and message.value() == value
    assert dict(message.headers())["content-type"] == b"application/x-protobuf; message=push.v1.SendRequest"


def test_help_usage_errors_and_unreachable_services_have_their_exit_statuses():
    overview = subprocess.run([str(PUSHCTL), "--help"], capture_output=True, text=True)
    assert overview.returncode == 0 and "exit status:" in overview.stdout
    for line in overview.stdout.split("commands:")[1].split("\n\n")[0].splitlines():
        name = line.split("  ")[1] if line.startswith("  ") else ""
        words = line.strip().split("  ")[0].split()
        help_ = subprocess.run([str(PUSHCTL), *words, "--help"], capture_output=True, text=True)
        assert help_.returncode == 0 and f"usage: pushctl {' '.join(words)}" in help_.stdout, words
    bad = pushctl("send", "--user", "u", "--bundle", "b", "--payload", "{}", "--priority", "7")
    assert bad.returncode == 2 and "--priority" in bad.stderr
    assert pushctl("frobnicate").returncode == 2
    unreachable = pushctl("register", "--token", stack.random_token(), "--bundle", BUNDLE, "--grpc", "127.0.0.1:1")
    assert unreachable.returncode == 3, unreachable.stderr
    assert pushctl("token", "show", stack.random_token()).returncode == 5


def env_file() -> str:
    return str(stack.VAR_DIR / "stack.env")


def register_readme_style(bundle: str) -> str:
    """A token registered as the README does: no --environment (the registration default, sandbox)."""
    token = stack.random_token()
    done = pushctl("register", "--token", token, "--bundle", bundle)
    assert done.returncode == 0, done.stderr
    stack.wait_for(lambda: pushctl("token", "show", token).returncode == 0, "token row")
    return token


def test_send_app_after_a_readme_registration_reaches_both_environments_and_prints_the_audience():
    bundle = f"com.example.pushctlapp{uuid.uuid4().hex[:8]}"
    register_readme_style(bundle)
    done = pushctl("send", "--app", bundle, "--bundle", bundle, "--title", "hi", "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"audience: 1 active token (app {bundle}, both environments)" in done.stderr, done.stderr
    assert "COMPLETED: 1 notifications: 1 delivered" in done.stdout, done.stdout
    # One environment only when asked: production has nobody.
    only = pushctl("send", "--app", bundle, "--bundle", bundle, "--title", "hi", "--app-environment", "production")
    assert only.returncode == 6, only.stdout + only.stderr
    assert f"audience: 0 active tokens (app {bundle}, production)" in only.stderr


def test_send_refuses_an_empty_audience_unless_allowed_and_dry_run_sends_nothing():
    bundle = f"com.example.nobody{uuid.uuid4().hex[:8]}"
    empty = pushctl("send", "--app", bundle, "--bundle", bundle, "--title", "hi")
    assert empty.returncode == 6, empty.stdout + empty.stderr
    assert "nothing to send: the audience is empty" in empty.stderr and "sent request" not in empty.stdout
    nobody = pushctl("send", "--user", f"nobody-{uuid.uuid4()}", "--bundle", bundle, "--title", "hi")
    assert nobody.returncode == 6, nobody.stderr
    allowed = pushctl("send", "--app", bundle, "--bundle", bundle, "--title", "hi", "--allow-empty")
    assert allowed.returncode == 0 and "sent request" in allowed.stdout, allowed.stderr
    register_readme_style(bundle)
    request_id = f"pushctl-dry-{uuid.uuid4()}"
    dry = pushctl("send", "--app", bundle, "--bundle", bundle, "--title", "hi", "--dry-run", "--request-id", request_id)
    assert dry.returncode == 0, dry.stderr
    assert f"dry run: request {request_id} not sent; audience 1" in dry.stdout
    time.sleep(0)  # nothing to wait for: a request never produced has no status
    assert pushctl("status", request_id).returncode == 5


def test_global_options_before_the_command_and_help_through_an_alias():
    bootstrap = stack.stack_env()["PUSH_KAFKA_BOOTSTRAP"]
    bundle = f"com.example.global{uuid.uuid4().hex[:8]}"
    token = register_readme_style(bundle)
    done = subprocess.run([str(PUSHCTL), "--bootstrap", bootstrap, "--env-file", env_file(), "send", "--token", token,
                           "--bundle", bundle, "--title", "hi", "--wait"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # The README's alias puts --env-file first; --help after it is pushctl's own help.
    helped = subprocess.run([str(PUSHCTL), "--env-file", env_file(), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: pushctl"), helped.stdout + helped.stderr
    command_help = subprocess.run([str(PUSHCTL), "--env-file", env_file(), "send", "--help"], capture_output=True, text=True)
    assert command_help.returncode == 0 and "--allow-empty" in command_help.stdout and "--send-at" in command_help.stdout


def test_send_at_schedules_and_cancel_cancels():
    bundle = f"com.example.later{uuid.uuid4().hex[:8]}"
    register_readme_style(bundle)
    request_id = f"pushctl-later-{uuid.uuid4()}"
    sent = pushctl("send", "--app", bundle, "--bundle", bundle, "--title", "later", "--send-at", "+120", "--request-id", request_id)
    assert sent.returncode == 0, sent.stderr
    assert "scheduled for" in sent.stderr
    status = stack.wait_for(lambda: (r := pushctl("status", request_id, "--json")).returncode == 0 and json.loads(r.stdout),
                            "the scheduled request's status")
    assert status["status"] == "scheduled", status
    cancelled = pushctl("cancel", request_id)
    assert cancelled.returncode == 0 and f"cancel of {request_id} sent" in cancelled.stdout, cancelled.stderr
    stack.wait_for(lambda: json.loads(pushctl("status", request_id, "--json").stdout)["status"] == "cancelled",
                   "the request cancelled", timeout=60)
    assert pushctl("cancel").returncode == 2


def test_follow_honours_its_timeout_and_shows_campaign_progress():
    started = time.monotonic()
    idle = pushctl("follow", "--timeout", "4")
    elapsed = time.monotonic() - started
    assert idle.returncode == 0, idle.stderr
    assert elapsed < 6.5, f"follow --timeout 4 ran {elapsed:.1f} s"
    bundle = f"com.example.progress{uuid.uuid4().hex[:8]}"
    register_readme_style(bundle)
    request_id = f"pushctl-progress-{uuid.uuid4()}"
    follower = subprocess.Popen(
        [str(PUSHCTL), "--env-file", env_file(), "follow", "--request", request_id, "--timeout", "90"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while "following" not in (line := follower.stderr.readline()):
            assert line, "follow ended before following"
        assert pushctl("send", "--app", bundle, "--bundle", bundle, "--title", "t", "--request-id", request_id).returncode == 0
        lines: list[str] = []
        while not any("REQUEST_COMPLETED" in l for l in lines) or not any("CAMPAIGN_DONE" in l for l in lines):
            line = follower.stdout.readline()
            assert line, f"follow ended early: {lines}"
            lines.append(line)
    finally:
        follower.kill()
    done = [l for l in lines if "CAMPAIGN_DONE" in l]
    assert f"request={request_id}" in done[0] and "processed=1 delivered=1" in done[0], lines


def test_the_contracts_partitioner_murmur2_random_puts_a_key_where_pushctl_puts_it():
    # README "Contracts": producers of push.send-requests.v1 partition by murmur2 of the key
    # (librdkafka partitioner=murmur2_random, Java's default), so a CancelRequest lands on its
    # SendRequest's partition whoever produced each. librdkafka's own default (CRC32) does not.
    import re
    from confluent_kafka import Producer
    topic = f"partitioner-check-{uuid.uuid4().hex[:8]}"
    assert stack.kafka_control(f"create {topic}:6") == ["ok"]
    keys = [f"request-{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    by_pushctl = {}
    for key in keys:
        done = subprocess.run([str(PUSHCTL), "--env-file", env_file(), "send", "--token", "ab" * 32, "--bundle", BUNDLE,
                               "--title", "t", "--request-id", key],
                              env={**os.environ, "PUSH_TOPIC_SEND_REQUESTS": topic}, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        by_pushctl[key] = int(re.search(rf"\({re.escape(topic)}\[(\d+)\]@", done.stdout).group(1))

    def partitions(config: dict) -> dict[str, int]:
        producer = Producer({**stack.kafka_config(), **config})
        found: dict[str, int] = {}
        for key in keys:
            producer.produce(topic, key=key.encode(), value=b"x",
                             on_delivery=lambda err, msg: found.__setitem__(msg.key().decode(), msg.partition()))
        producer.flush(30)
        return found
    assert partitions({"partitioner": "murmur2_random"}) == by_pushctl
    assert partitions({}) != by_pushctl, "librdkafka's default happened to agree on every key"


def test_errors_point_to_the_api_key_and_the_env_file():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSH_")}
    env["PUSH_GRPC_ADDRESS"] = stack.stack_env()["PUSH_GRPC_ADDRESS"]
    done = subprocess.run([str(PUSHCTL), "register", "--token", stack.random_token(), "--bundle", BUNDLE],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "pass --api-key KEY or set PUSH_API_KEY" in done.stderr and "--env-file" in done.stderr, done.stderr
