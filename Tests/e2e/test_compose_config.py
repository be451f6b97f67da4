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


def render(value, environment: dict[str, str] | None = None):
    """The compose file as `docker compose config` renders it with `environment` (default: none
    set): `${VAR:-default}` and `${VAR}` substituted, `$$` made `$`."""
    environment = environment or {}
    if isinstance(value, dict):
        return {key: render(item, environment) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, environment) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        return environment.get(name) or (default if default is not None else "")
    return re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", substitute, value)


RENDERED = render(COMPOSE)["services"]


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


def broker_properties() -> dict[str, str]:
    """The broker's server.properties as the kafka service's command writes them (the heredoc)."""
    script = RENDERED["kafka"]["command"][0]
    body = script.split("cat > /tmp/server.properties <<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    return dict(line.split("=", 1) for line in body.splitlines() if line and not line.startswith("#"))


def test_kafka_keeps_its_data_and_is_reachable_from_the_host():
    kafka = RENDERED["kafka"]
    properties = broker_properties()
    log_dir = properties["log.dirs"]
    assert any(volume.split(":")[1] == log_dir for volume in kafka["volumes"]), "the Kafka log is not on a volume"
    assert "EXTERNAL://localhost:${ADVERTISED_HOST_PORT}" in properties["advertised.listeners"]
    assert kafka["environment"]["ADVERTISED_HOST_PORT"] == "29092"
    assert kafka["ports"] == ["127.0.0.1:29092:29092"]
    moved = render(COMPOSE, {"PUSH_KAFKA_HOST_PORT": "39092"})["services"]["kafka"]
    assert moved["ports"] == ["127.0.0.1:39092:29092"] and moved["environment"]["ADVERTISED_HOST_PORT"] == "39092"
    assert properties["auto.create.topics.enable"] == "false"


# The principals and what each may do (README "Security"; issue 23's table). `operator` reads the
# dead-letter topic through pushctl's consumer groups (`pushctl-<uuid>`), hence its group prefix.
ACL_TABLE = {
    ("registration", "Write", "literal", "topic", "push.token-events.v1"),
    ("dispatcher", "Read", "literal", "topic", "push.token-events.v1"),
    ("dispatcher", "Read", "literal", "topic", "push.send-requests.v1"),
    ("dispatcher", "Read", "literal", "group", "push-dispatcher"),
    ("dispatcher", "Write", "literal", "topic", "push.feedback.v1"),
    ("dispatcher", "Write", "literal", "topic", "push.dead-letter.v1"),
    ("producers", "Write", "literal", "topic", "push.send-requests.v1"),
    ("analytics", "Read", "literal", "topic", "push.feedback.v1"),
    ("analytics", "Read", "literal", "group", "push-analytics"),
    ("operator", "Read", "literal", "topic", "push.dead-letter.v1"),
    ("operator", "Read", "prefixed", "group", "pushctl-"),
    ("operator", "Write", "literal", "topic", "push.send-requests.v1"),
    ("operator", "Write", "literal", "topic", "push.token-events.v1"),
}


def test_no_kafka_listener_takes_a_client_without_sasl():
    properties = broker_properties()
    listeners = {entry.split("://")[0] for entry in properties["listeners"].split(",")}
    protocols = dict(entry.split(":") for entry in properties["listener.security.protocol.map"].split(","))
    assert listeners == set(protocols), "every listener has a security protocol"
    assert all(protocol.startswith("SASL_") for protocol in protocols.values()), protocols
    assert protocols["EXTERNAL"] == "SASL_SSL" and protocols["INTERNAL"] == "SASL_PLAINTEXT"
    assert properties["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert properties["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    # The KRaft controller listens on the container's loopback only (PLAIN, a static admin).
    assert "CONTROLLER://127.0.0.1:9093" in properties["listeners"].split(",")
    assert properties["listener.name.external.ssl.keystore.location"].startswith("/credentials/kafka/")
    # ACLs decide; nothing is allowed without one; only the admin is a super user.
    assert properties["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert properties["allow.everyone.if.no.acl.found"] == "false"
    assert properties["super.users"] == "User:admin"
    # Every client of the broker's own jobs and health check logs in as the admin over SCRAM.
    for name in ["kafka-topics", "kafka-acls"]:
        script = RENDERED[name]["command"][0]
        assert "security.protocol=SASL_PLAINTEXT" in script and "--command-config /tmp/admin.properties" in script, name
    assert "--command-config /tmp/admin.properties" in " ".join(RENDERED["kafka"]["healthcheck"]["test"])


def test_every_published_port_is_bound_to_loopback():
    published = 0
    for name, service in SERVICES.items():
        for port in service.get("ports") or []:
            published += 1
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), f"service {name} publishes {port} beyond 127.0.0.1"
    assert published >= 4  # registration, Kafka, Prometheus, Grafana


def test_the_acl_job_grants_exactly_the_table():
    job = RENDERED["kafka-acls"]
    env = job["environment"]
    script = job["command"][0]
    grants = set()
    for line in script.splitlines():
        words = line.split()
        if words[:1] != ["acl"]:
            continue
        principal, operation, pattern, resource, name = words[1:]
        name = name.strip('"')
        if name.startswith("$"):
            name = env[name[1:]]
        grants.add((principal, operation, pattern, resource, name))
    assert grants == ACL_TABLE
    # The dispatcher's group is the one the dispatcher joins.
    assert env["DISPATCHER_GROUP"] == RENDERED["dispatcher"]["environment"]["PUSH_CONSUMER_GROUP"]
    # Every principal of the table gets a SCRAM credential from its own password file, and only those.
    principals = {line.split()[1] for line in script.splitlines() if line.split()[:1] == ["principal"]}
    assert principals == {grant[0] for grant in ACL_TABLE}
    made = RENDERED["kafka-credentials"]["command"][0]
    assert all(principal in made.split("for name in ")[1].split(";")[0].split() for principal in principals | {"admin"})
    # `acl` passes exactly those words to kafka-acls.sh, and grants only (--add, --allow-principal).
    assert '--allow-principal "User:$1" --operation "$2" --resource-pattern-type "$3" "--$4" "$5"' in script
    assert "--deny-principal" not in script and "--remove" not in script


def test_every_kafka_client_logs_in_with_its_own_principal_and_a_password_file():
    clients = {name: service for name, service in SERVICES.items() if "PUSH_KAFKA_BOOTSTRAP" in (service.get("environment") or {})}
    assert set(clients) == {"registration-service", "dispatcher"}
    principals = {"registration-service": "registration", "dispatcher": "dispatcher"}
    for name, service in clients.items():
        env = service["environment"]
        assert env["PUSH_KAFKA_SECURITY_PROTOCOL"] == "sasl_plaintext", name
        assert env["PUSH_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512", name
        assert env["PUSH_KAFKA_SASL_USERNAME"] == principals[name], name
        assert env["PUSH_KAFKA_SASL_PASSWORD_FILE"] == f"/credentials/kafka/{principals[name]}-password", name
        assert "PUSH_KAFKA_SASL_PASSWORD" not in env, "a password in the environment"
        assert any(volume.startswith("credentials:/credentials") for volume in service["volumes"]), name
        assert "kafka-acls" in service["depends_on"], f"{name} starts before its principal exists"


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
    for name in ["postgres", "grafana", "kafka", "kafka-topics", "kafka-acls"]:
        assert "10001" in SERVICES[name]["group_add"]


def test_grafana_and_prometheus_are_provisioned():
    assert SERVICES["prometheus"]["image"].startswith("prom/prometheus:")
    mounts = " ".join(SERVICES["grafana"]["volumes"])
    assert "deploy/grafana/provisioning" in mounts and "deploy/grafana/dashboards" in mounts
