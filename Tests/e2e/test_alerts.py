"""Alerts as code: deploy/prometheus/alerts.yml passes `promtool check rules`, its cases in
alerts.test.yml pass `promtool test rules`, every alert has a firing and a silent case and a runbook
section in docs/operations.md, the compose Prometheus loads the file, and every metric an alert
queries is one the services register. Needs no running stack."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "alerts.yml"
CASES = PROMETHEUS_DIR / "alerts.test.yml"
RUNBOOKS = ROOT / "docs" / "operations.md"
# Metrics from outside the services: Prometheus's own scrape health.
OUTSIDE_METRICS = {"up"}
PROMQL_WORDS = {
    "sum", "by", "rate", "increase", "max", "min", "avg", "without", "count", "delta", "deriv", "and", "or",
    "unless", "on", "ignoring", "group_left", "group_right", "histogram_quantile", "le", "irate", "job", "instance",
}


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: scripts/install-deps installs the Debian package prometheus"
    return path


def alerts() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules():
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules():
    done = subprocess.run([promtool(), "test", "rules", CASES.name], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_silent_case():
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(CASES.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert len(names) >= 8
    assert names - firing == set(), f"alerts without a firing case: {names - firing}"
    assert names - silent == set(), f"alerts without a silent case: {names - silent}"


def test_every_alert_has_a_runbook_section():
    text = RUNBOOKS.read_text()
    headings = {line[3:].strip().lower() for line in text.splitlines() if line.startswith("## ")}
    for rule in alerts():
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/operations.md#{rule['alert'].lower()}", url
        assert rule["alert"].lower() in headings, f"no '## {rule['alert']}' in docs/operations.md"


def test_alerts_query_metrics_the_services_register():
    registered = set(re.findall(r'"(push_[a-z0-9_]+)"', "\n".join(p.read_text() for p in (ROOT / "Sources").rglob("*.swift"))))
    missing = []
    for rule in alerts():
        expr = re.sub(r'\{[^}]*\}', "", rule["expr"])
        expr = re.sub(r'\[[^\]]*\]', "", expr)
        for name in re.findall(r'\b([a-z_][a-z0-9_]*)\b', expr):
            if name in PROMQL_WORDS or name in OUTSIDE_METRICS or name in {"topic", "reason", "environment", "partition", "key_id", "broker"}:
                continue
            if name not in registered:
                missing.append(f"{rule['alert']}: {name}")
    assert not missing, f"alerts query metrics no service registers: {missing}"


def test_compose_prometheus_loads_the_rules():
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    assert "alerts.yml" in config.get("rule_files", [])
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
