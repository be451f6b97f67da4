"""`--check-config` on every executable: good settings print the effective configuration (secrets
masked) and exit 0; bad ones exit 2 and name every bad variable. Runs the debug build's binaries
(`swift build` first); needs no running stack."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("PUSH_BIN_DIR", ROOT / ".build" / "debug"))


def check(program: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    binary = BIN / program
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run swift build first")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PUSH_")}
    return subprocess.run([str(binary), "--check-config"], env={**clean, **env}, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def credentials(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("credentials")
    subprocess.run([str(ROOT / "scripts" / "gen-dev-credentials"), str(directory)], check=True)
    return directory


def dispatcher_env(credentials: Path) -> dict[str, str]:
    return {
        "PUSH_APNS_TEAM_ID": "DEVTEAM001", "PUSH_APNS_KEY_ID": "DEVKEY0001",
        "PUSH_APNS_KEY_FILE": str(credentials / "apns-key.p8"),
        "PUSH_PG_URL": "postgresql://push:inline-secret@db.example:5432/push",
        "PUSH_PG_PASSWORD_FILE": str(credentials / "pg-push-password"),
        "PUSH_TOPIC_FEEDBACK": "custom.feedback",
    }


def test_dispatcher_good_configuration_prints_effective_values_with_secrets_masked(credentials):
    done = check("dispatcher", dispatcher_env(credentials))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "configuration OK" in out
    assert "custom.feedback" in out and "PUSH_TOPIC_DEAD_LETTER" in out and "push.dead-letter.v1  (default)" in out
    assert "PUSH_MAX_IN_FLIGHT_NOTIFICATIONS" in out and "1000  (default)" in out
    # The feedback producer lingers 10 ms, not librdkafka's 5 (docs/capacity.md "Produce round trips").
    assert re.search(r"PUSH_KAFKA_LINGER_MS\s+= 10  \(default\)", out), out
    # Token hygiene: off until set, campaigns kept 30 days.
    assert "PUSH_TOKEN_STALE_AFTER_DAYS" in out and "PUSH_CAMPAIGN_RETENTION_DAYS" in out and "30  (default)" in out
    assert "inline-secret" not in out and "postgresql://push:********@db.example:5432/push" in out
    password = (credentials / "pg-push-password").read_text().strip()
    assert password not in out
    assert "BEGIN PRIVATE KEY" not in out


def test_the_generated_credentials_file_loads_its_three_keys(credentials):
    # What scripts/up gives the local dispatcher: three keys under two teams, .p8 paths relative to the file.
    env = {k: v for k, v in dispatcher_env(credentials).items() if not k.startswith("PUSH_APNS_")}
    done = check("dispatcher", {**env, "PUSH_APNS_CREDENTIALS_FILE": str(credentials / "apns-credentials.json")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "configuration OK" in done.stdout
    assert "BEGIN PRIVATE KEY" not in done.stdout
    keys = [key for app in json.loads((credentials / "apns-credentials.json").read_text())["apps"] for key in app["keys"]]
    assert sorted((k["team_id"], k["key_id"], k.get("environment", "")) for k in keys) == [
        ("DEVTEAM001", "DEVKEY0001", ""), ("DEVTEAM001", "DEVKEY0002", "sandbox"), ("DEVTEAM002", "DEVKEY0003", "production")]
    for key in keys:
        assert (credentials / key["p8_file"]).is_file() and (credentials / key["p8_file"].replace(".p8", ".pub.pem")).is_file()


def test_dispatcher_bad_configuration_names_every_bad_variable(credentials):
    env = {
        **dispatcher_env(credentials),
        "PUSH_APNS_KEY_FILE": "/nonexistent/key.p8",
        "PUSH_MAX_IN_FLIGHT_NOTIFICATIONS": "0",
        "PUSH_KAFKA_SESSION_TIMEOUT_MS": "soon",
        "PUSH_KAFKA_LINGER_MS": "900001",
        "PUSH_KAFKA_REBALANCE_PROTOCOL": "sticky",
        "PUSH_APNS_DEFAULT_ENVIRONMENT": "staging",
        "PUSH_APNS_PRODUCTION_URL": "http://api.push.apple.com",
        "PUSH_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "PUSH_KAFKA_PROPERTY_NOT_A_PROPERTY": "1",
        "PUSH_PG_PASSWORD_FILE": "/nonexistent/pw",
        "PUSH_TOKEN_STALE_AFTER_DAYS": "0",
        "PUSH_CAMPAIGN_RETENTION_DAYS": "forever",
        "PUSH_TOKEN_HYGIENE_INTERVAL_MS": "0",
        "PUSH_TYPO_SETTING": "x",
        "PUSH_APNS_OTHER_ENVIRONMENT_RETRY": "com.example.ok,com.example app",
    }
    del env["PUSH_APNS_TEAM_ID"]
    done = check("dispatcher", env)
    assert done.returncode == 2, done.stdout + done.stderr
    bad = [
        "PUSH_APNS_KEY_FILE", "PUSH_MAX_IN_FLIGHT_NOTIFICATIONS", "PUSH_KAFKA_SESSION_TIMEOUT_MS", "PUSH_KAFKA_LINGER_MS",
        "PUSH_KAFKA_REBALANCE_PROTOCOL", "PUSH_APNS_DEFAULT_ENVIRONMENT", "PUSH_APNS_PRODUCTION_URL",
        "PUSH_KAFKA_SASL_MECHANISM", "PUSH_KAFKA_SASL_USERNAME", "PUSH_KAFKA_SASL_PASSWORD_FILE",
        "PUSH_KAFKA_PROPERTY_NOT_A_PROPERTY", "PUSH_PG_PASSWORD_FILE", "PUSH_APNS_TEAM_ID",
        "PUSH_APNS_OTHER_ENVIRONMENT_RETRY",
        "PUSH_TOKEN_STALE_AFTER_DAYS", "PUSH_CAMPAIGN_RETENTION_DAYS", "PUSH_TOKEN_HYGIENE_INTERVAL_MS",
    ]
    for name in bad:
        assert f"error: {name}:" in done.stdout, f"{name} not named:\n{done.stdout}"
    assert f"{len(bad)} bad settings" in done.stdout
    assert "warning: PUSH_TYPO_SETTING is set" in done.stdout


def test_dispatcher_warns_when_opted_in_apps_cannot_try_an_environment(credentials):
    # Apps opted in to the other-environment try, but only production's URL is overridden: sandbox
    # stays at Apple's host and is not tried; valid, so exit 0, with a warning naming the variables.
    env = {**dispatcher_env(credentials), "PUSH_APNS_OTHER_ENVIRONMENT_RETRY": "com.example.a, com.example.b",
           "PUSH_APNS_PRODUCTION_URL": "https://127.0.0.1:2197"}
    done = check("dispatcher", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"PUSH_APNS_OTHER_ENVIRONMENT_RETRY +\= com\.example\.a, com\.example\.b\n", done.stdout), done.stdout
    assert ("warning: PUSH_APNS_OTHER_ENVIRONMENT_RETRY: PUSH_APNS_PRODUCTION_URL is set but PUSH_APNS_SANDBOX_URL is not,"
            " so sandbox is not tried") in done.stdout, done.stdout
    both = check("dispatcher", {**env, "PUSH_APNS_SANDBOX_URL": "https://127.0.0.1:2198"})
    assert both.returncode == 0 and "warning: PUSH_APNS_OTHER_ENVIRONMENT_RETRY" not in both.stdout, both.stdout


def test_registration_service_good_and_bad(credentials):
    good = check("registration-service", {"PUSH_GRPC_PORT": "50999", "PUSH_TOPIC_TOKEN_EVENTS": "custom.tokens",
                                          "PUSH_AUTH_KEYS_FILE": str(credentials / "registration-keys.json")})
    assert good.returncode == 0, good.stdout + good.stderr
    assert "custom.tokens" in good.stdout and "PUSH_KAFKA_BOOTSTRAP" in good.stdout and "configuration OK" in good.stdout
    # The token-event producer keeps librdkafka's 5 ms: each call waits for its record's acknowledgement.
    assert re.search(r"PUSH_KAFKA_LINGER_MS\s+= 5  \(default\)", good.stdout), good.stdout
    bad = check("registration-service", {
        "PUSH_GRPC_PORT": "70000", "PUSH_GRPC_TLS_KEY_FILE": str(credentials / "simulator-key.pem"),
        "PUSH_SHUTDOWN_GRACE_MS": "-1", "PUSH_KAFKA_SECURITY_PROTOCOL": "tls", "PUSH_KAFKA_LINGER_MS": "-1",
    })
    assert bad.returncode == 2, bad.stdout + bad.stderr
    for name in ["PUSH_GRPC_PORT", "PUSH_GRPC_TLS_CERT_FILE", "PUSH_SHUTDOWN_GRACE_MS", "PUSH_KAFKA_SECURITY_PROTOCOL",
                 "PUSH_KAFKA_LINGER_MS"]:
        assert f"error: {name}:" in bad.stdout, f"{name} not named:\n{bad.stdout}"


def test_apns_simulator_good_and_bad(credentials):
    base = {
        "PUSH_SIM_TLS_CERT_FILE": str(credentials / "simulator-cert.pem"),
        "PUSH_SIM_TLS_KEY_FILE": str(credentials / "simulator-key.pem"),
        "PUSH_SIM_KEYS": f"DEVKEY0001:DEVTEAM001:{credentials / 'apns-key.pub.pem'}",
    }
    good = check("apns-simulator", base)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "PUSH_SIM_ADMIN_PORT" in good.stdout and "8081  (default)" in good.stdout
    bad = check("apns-simulator", {**base, "PUSH_SIM_TLS_KEY_FILE": "/nonexistent/key.pem", "PUSH_SIM_KEYS": "garbage",
                                   "PUSH_SIM_ADMIN_PORT": "x", "PUSH_SIM_RECORD_LIMIT": "0"})
    assert bad.returncode == 2, bad.stdout + bad.stderr
    for name in ["PUSH_SIM_TLS_KEY_FILE", "PUSH_SIM_KEYS", "PUSH_SIM_ADMIN_PORT", "PUSH_SIM_RECORD_LIMIT"]:
        assert f"error: {name}:" in bad.stdout, f"{name} not named:\n{bad.stdout}"


def test_generated_secrets_are_owner_only(credentials):
    for name in ["apns-key.p8", "apns-key-2.p8", "apns-key-3.p8", "simulator-key.pem", "pg-push-password",
                 "pg-superuser-password", "grafana-admin-password"]:
        mode = (credentials / name).stat().st_mode & 0o777
        assert mode == 0o600, f"{name} has mode {oct(mode)}"
    for name in ["apns-key.pub.pem", "apns-key-2.pub.pem", "apns-key-3.pub.pem", "simulator-cert.pem", "apns-credentials.json"]:
        assert (credentials / name).stat().st_mode & 0o777 == 0o644


def test_registration_service_without_or_with_a_missing_key_file_fails(credentials):
    # Start refuses both; so must the check (it said "configuration OK").
    for env, problem in [({}, "authentication is on but no keys are configured"),
                         ({"PUSH_AUTH_KEYS_FILE": "/nonexistent/keys.json"}, "cannot read the key file /nonexistent/keys.json")]:
        done = check("registration-service", env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"error: PUSH_AUTH_KEYS_FILE: {problem}" in done.stdout, done.stdout


def test_dispatcher_admin_port_out_of_range_fails_and_admin_variables_are_read(credentials):
    env = {**dispatcher_env(credentials), "PUSH_ADMIN_PORT": "70000", "PUSH_ADMIN_HOST": "127.0.0.1",
           "PUSH_ADMIN_CONNECTION_LIMIT": "8", "PUSH_ADMIN_TEST_HOOKS": "false"}
    done = check("dispatcher", env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: PUSH_ADMIN_PORT: expected an integer between 0 and 65535, got 70000" in done.stdout, done.stdout
    assert "does not read" not in done.stdout, done.stdout


def test_one_bad_campaign_setting_leaves_the_apns_key_variables_read(credentials):
    done = check("dispatcher", {**dispatcher_env(credentials), "PUSH_CAMPAIGN_POLL_MS": "0"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: PUSH_CAMPAIGN_POLL_MS: must be positive" in done.stdout, done.stdout
    assert "does not read" not in done.stdout, done.stdout


@pytest.mark.parametrize("program", ["dispatcher", "registration-service", "apns-simulator", "kafka-dev-broker"])
def test_help_prints_usage_and_exits_without_starting(program, credentials):
    # A configuration that would start (the dispatcher then runs until stopped): --help must not.
    env = {**dispatcher_env(credentials), "PUSH_ADMIN_PORT": "0", "PUSH_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PUSH_")}
    done = subprocess.run([str(BIN / program), "--help"], env={**clean, **env}, capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"usage: {program}"), done.stdout
