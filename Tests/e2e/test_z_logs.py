"""Runs last (pytest takes files in name order): after the whole end-to-end run, every service's log is
one JSON object per line when the stack runs with LOG_FORMAT=json (scripts/test starts it so), and no
log holds key material, a JWT, an API key or a whole device token (docs/observability.md "Logs")."""
from __future__ import annotations

import json
import re

import pytest

import pushstack as stack

SERVICES = ["dispatcher", "registration-service", "apns-simulator"]
JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.")
WHOLE_TOKEN = re.compile(r"(?<![0-9a-f])[0-9a-f]{64,}(?![0-9a-f])")


def secrets() -> list[str]:
    """Values a log must never contain: the APNs signing keys' bodies and every secret-looking variable."""
    found = []
    for path in sorted((stack.VAR_DIR / "credentials").glob("apns-key*.p8")):
        found += [line for line in path.read_text().splitlines() if line and not line.startswith("-----") and len(line) >= 16]
    for service in SERVICES:
        for name, value in stack.process_environ(service).items():
            if re.search(r"KEY|SECRET|PASSWORD|TOKEN", name) and not name.endswith(("_FILE", "_ID")) and len(value) >= 8:
                found.append(value)
    return found


def test_logs_are_json_lines_without_secrets_or_whole_tokens():
    if stack.process_environ("dispatcher").get("LOG_FORMAT", "").lower() != "json":
        pytest.skip("the stack runs with logfmt logs (scripts/test starts it with LOG_FORMAT=json)")
    forbidden = secrets()
    checked = 0
    for service in SERVICES:
        path = stack.VAR_DIR / "log" / f"{service}.log"
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            record = json.loads(line)  # one JSON object per line, or this fails naming the line
            assert isinstance(record, dict) and {"ts", "level", "logger", "msg"} <= record.keys(), (service, number, line)
            assert "BEGIN" not in line or "PRIVATE KEY" not in line, (service, number)
            assert not JWT.search(line), (service, number, line)
            assert not WHOLE_TOKEN.search(line), (service, number, line)
            for secret in forbidden:
                assert secret not in line, (service, number)
            checked += 1
    assert checked > 20
