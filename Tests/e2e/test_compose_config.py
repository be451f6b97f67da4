"""docker-compose.yml cannot be started here (no Docker engine), so it is checked by reading it:
every service's command is an executable the package builds, every PUSH_* variable it sets is one
that an executable reads, dependencies exist, and the topics it creates are the contract's."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PACKAGE = (ROOT / "Package.swift").read_text()
PRODUCTS = set(re.findall(r'\.executable\(name: "([^"]+)"', PACKAGE))


def read_variables() -> set[str]:
    """Every environment variable name an executable's main.swift (or a service library) reads."""
    names: set[str] = set()
    for path in (ROOT / "Sources").rglob("*.swift"):
        names.update(re.findall(r'"(PUSH_[A-Z0-9_]+|LOG_LEVEL)"', path.read_text()))
    return names


def test_every_command_is_a_built_executable_or_a_shipped_script():
    scripts = {p.name for p in (ROOT / "scripts").iterdir()}
    for name, service in SERVICES.items():
        command = service.get("command")
        if service.get("image", "").startswith(("postgres", "apache/kafka")) and "build" not in service:
            continue
        assert command, f"service {name} has no command"
        program = command[0] if isinstance(command, list) else command.split()[0]
        assert program in PRODUCTS or program in scripts, f"service {name} runs {program}, which nothing builds"


def test_every_push_variable_is_read_by_the_code():
    known = read_variables()
    for name, service in SERVICES.items():
        for variable in (service.get("environment") or {}):
            if variable.startswith("PUSH_") or variable == "LOG_LEVEL":
                assert variable in known, f"service {name} sets {variable}, which no executable reads"


def test_dependencies_exist_and_the_dockerfile_builds_every_product():
    for name, service in SERVICES.items():
        for dependency in (service.get("depends_on") or {}):
            assert dependency in SERVICES, f"service {name} depends on unknown service {dependency}"
    dockerfile = (ROOT / "Dockerfile").read_text()
    for product in PRODUCTS:
        assert f".build/release/{product}" in dockerfile, f"the Dockerfile does not install {product}"
    for copied in re.findall(r"\.build/release/([a-z0-9-]+)", dockerfile):
        assert copied in PRODUCTS, f"the Dockerfile copies {copied}, which the package does not build"
    assert "scripts/gen-dev-credentials" in dockerfile


def test_topics_are_the_contracts_topics():
    script = SERVICES["kafka-topics"]["command"][0]
    topics = dict(re.findall(r"(push\.[a-z-]+\.v1):(\d+)", script))
    assert set(topics) == {"push.token-events.v1", "push.send-requests.v1", "push.feedback.v1", "push.dead-letter.v1"}
    dispatcher = SERVICES["dispatcher"]["environment"]
    assert dispatcher["PUSH_APNS_KEY_FILE"].startswith("/credentials/")
    assert SERVICES["apns-simulator"]["environment"]["PUSH_SIM_KEYS"].split(":")[0] == dispatcher["PUSH_APNS_KEY_ID"]
