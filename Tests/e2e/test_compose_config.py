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
        if "build" not in service:  # an official image (PostgreSQL, Kafka, Prometheus, Grafana)
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
    env = SERVICES["kafka-topics"]["environment"]
    topics = dict(re.findall(r'"\$\$(PUSH_TOPIC_[A-Z_]+):(\d+)"', script))
    assert {env[name] for name in topics} == {"push.token-events.v1", "push.send-requests.v1", "push.feedback.v1", "push.dead-letter.v1"}
    dispatcher = SERVICES["dispatcher"]["environment"]
    assert dispatcher["PUSH_APNS_KEY_FILE"].startswith("/credentials/")
    assert SERVICES["apns-simulator"]["environment"]["PUSH_SIM_KEYS"].split(":")[0] == dispatcher["PUSH_APNS_KEY_ID"]
    # Every service reads the same topic names.
    for name in ["dispatcher", "registration-service"]:
        for variable, value in env.items():
            if variable.startswith("PUSH_TOPIC_"):
                assert SERVICES[name]["environment"][variable] == value


def test_every_long_running_service_has_a_health_check():
    for name, service in SERVICES.items():
        if service.get("restart") == "no":
            continue
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"service {name} has no health check"
        if service.get("image") == "push:dev":
            assert "/healthz" in " ".join(check["test"]) and "PUSH_ADMIN_PORT" in " ".join(check["test"])
            assert service["environment"]["PUSH_ADMIN_PORT"]
    assert "curl" in (ROOT / "Dockerfile").read_text().split("FROM debian")[1], "the runtime image has no curl for the health checks"


def test_kafka_keeps_its_data_and_is_reachable_from_the_host():
    kafka = SERVICES["kafka"]
    log_dir = kafka["environment"]["KAFKA_LOG_DIRS"]
    assert any(volume.split(":")[1] == log_dir for volume in kafka["volumes"]), "the Kafka log is not on a volume"
    assert "EXTERNAL://localhost" in kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert any("29092" in port for port in kafka["ports"])
    assert kafka["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_postgres_role_is_not_the_superuser_and_its_password_comes_from_a_file():
    dispatcher = SERVICES["dispatcher"]["environment"]
    url = dispatcher["PUSH_PG_URL"]
    assert url.startswith("postgresql://push@"), url
    assert ":" not in url.split("//")[1].split("@")[0], "password in the URL"
    assert dispatcher["PUSH_PG_PASSWORD_FILE"].startswith("/credentials/")
    postgres = SERVICES["postgres"]
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"].startswith("/credentials/")
    init = [v for v in postgres["volumes"] if "docker-entrypoint-initdb.d" in v]
    script = (ROOT / init[0].split(":")[0]).read_text()
    assert "NOSUPERUSER" in script and "CREATE SCHEMA push AUTHORIZATION push" in script


def test_secrets_are_group_readable_only_by_the_container_user():
    assert SERVICES["credentials"]["command"][:3] == ["gen-dev-credentials", "--group", "push"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER push" in dockerfile and "--gid 10001 push" in dockerfile
    for name in ["postgres", "grafana"]:
        assert "10001" in SERVICES[name]["group_add"]


def test_grafana_and_prometheus_are_provisioned():
    assert SERVICES["prometheus"]["image"].startswith("prom/prometheus:")
    mounts = " ".join(SERVICES["grafana"]["volumes"])
    assert "deploy/grafana/provisioning" in mounts and "deploy/grafana/dashboards" in mounts
