"""The deployment files: the Docker image builds from exactly what its build stage copies, the
Prometheus configuration passes `promtool check config`, and the Grafana dashboard is valid JSON whose
every queried metric is one the services expose.

The dashboard check takes a /metrics text: `missing_metrics(text, dashboard)`. Run it against live
services with `python3 Tests/e2e/test_deploy.py http://127.0.0.1:PORT/metrics …` (or set
PUSH_METRICS_URLS, comma-separated, for the test `test_dashboard_metrics_are_served_live`)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "push-overview.json"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DATASOURCE = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"

# PromQL words that look like metric names but are not.
PROMQL_WORDS = {
    "sum", "by", "rate", "increase", "max", "min", "avg", "histogram_quantile", "le", "without", "count",
    "irate", "delta", "topk", "bottomk", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
}


def dashboard_metrics(dashboard: dict) -> dict[str, list[str]]:
    """Metric family names each panel queries (`_bucket`/`_sum`/`_count` mapped to the histogram),
    by panel title."""
    panels: dict[str, list[str]] = {}
    for panel in dashboard["panels"]:
        names: list[str] = []
        for target in panel.get("targets", []):
            expr = target["expr"]
            expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
            expr = re.sub(r'"[^"]*"', "", expr)
            for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
                if word in PROMQL_WORDS or not ("_" in word):
                    continue
                if re.fullmatch(r"\d+[smhd]", word):
                    continue
                family = re.sub(r"_(bucket|sum|count)$", "", word) if word.endswith(("_bucket", "_sum", "_count")) else word
                if family not in names:
                    names.append(family)
        panels[panel["title"]] = names
    return panels


def exposed_metrics(metrics_text: str) -> set[str]:
    """Metric family names in a Prometheus text exposition (TYPE lines and sample names)."""
    names: set[str] = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE ") or line.startswith("# HELP "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            sample = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            if sample:
                name = sample.group(0)
                names.add(name)
                names.add(re.sub(r"_(bucket|sum|count|total|created)$", "", name))
    return names


def missing_metrics(metrics_text: str, dashboard: dict) -> list[str]:
    """Dashboard metrics the /metrics text does not expose, as `metric (panel)`."""
    exposed = exposed_metrics(metrics_text)
    return [f"{name} ({title})" for title, names in dashboard_metrics(dashboard).items() for name in names if name not in exposed]


# The metric names the team agreed on (the services' registry declares them).
AGREED = """
push_apns_requests_total push_apns_request_duration_seconds push_apns_connections push_apns_active_streams
push_apns_ping_failures_total push_apns_connections_retired_total push_apns_jwt_mints_total push_apns_retries_total
push_apns_circuit_state push_apns_provider_token_faults_total push_notifications_total push_dead_letters_total
push_send_log_writes_total push_records_in_flight push_kafka_consumer_lag push_token_events_applied_total
push_pending_retries push_uncommitted_records push_registrations_total push_auth_failures_total push_rate_limited_total
push_http2_server_connections push_http2_server_limit_breaches_total process_resident_memory_bytes process_open_fds
process_start_time_seconds
""".split()


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_dashboard_is_valid_and_uses_the_provisioned_data_source():
    dashboard = load_dashboard()
    datasource_uid = yaml.safe_load(DATASOURCE.read_text())["datasources"][0]["uid"]
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == datasource_uid, panel["title"]
        assert panel["targets"], f"panel {panel['title']} queries nothing"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == datasource_uid
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
    # What the issue asks the dashboard to show.
    titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for topic in ["send rate", "latency", "errors by reason", "retries", "circuit", "lag", "connections", "provider-token"]:
        assert topic in titles, f"no panel about {topic}"


def test_dashboard_queries_only_agreed_metrics():
    for title, names in dashboard_metrics(load_dashboard()).items():
        assert names, f"panel {title}: no metric found in its queries"
        for name in names:
            assert name in AGREED, f"panel {title} queries {name}, which is not an agreed metric name"


def test_missing_metrics_names_what_a_metrics_text_lacks():
    dashboard = load_dashboard()
    everything = "\n".join(f"# TYPE {name} gauge\n{name} 1" for name in AGREED)
    assert missing_metrics(everything, dashboard) == []
    without = "\n".join(line for line in everything.splitlines() if "push_apns_circuit_state" not in line)
    assert missing_metrics(without, dashboard) == ["push_apns_circuit_state (Circuit state (0 closed, 1 half-open, 2 open))"]
    histogram = everything.replace("# TYPE push_apns_request_duration_seconds gauge\npush_apns_request_duration_seconds 1",
                                   'push_apns_request_duration_seconds_bucket{le="0.1"} 3')
    assert missing_metrics(histogram, dashboard) == []


def test_dashboard_metrics_are_served_live():
    """Every metric the dashboard queries is declared by a running service: the URLs in
    PUSH_METRICS_URLS, else the admin ports of the stack scripts/up started."""
    urls = [u for u in os.environ.get("PUSH_METRICS_URLS", "").split(",") if u]
    if not urls:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import pushstack
        env = pushstack.stack_env()
        urls = [env[key] + "/metrics" for key in
                ("PUSH_REGISTRATION_ADMIN_URL", "PUSH_DISPATCHER_ADMIN_URL", "PUSH_SIM_METRICS_ADMIN_URL")]
    text = "\n".join(urllib.request.urlopen(url, timeout=10).read().decode() for url in urls)
    assert missing_metrics(text, load_dashboard()) == []


def test_promtool_accepts_the_prometheus_configuration():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/install-deps installs the Debian package prometheus"
    done = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {job["job_name"] for job in yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]}
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name, service in compose.items():
        if service.get("image") == "push:dev" and service.get("restart") != "no":
            assert name in jobs, f"Prometheus does not scrape {name}"


def dockerfile_build_copies() -> list[str]:
    """The sources the Dockerfile's build stage copies (COPY lines before the second FROM)."""
    text = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)
    build = stages[1]
    sources: list[str] = []
    for line in build.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            parts = line.split()[1:]
            sources += parts[:-1]
    return sources


def test_the_image_builds_from_exactly_what_the_dockerfile_copies():
    """No Docker engine here: copy what the build stage copies into an empty directory and build the
    package's products there (debug, for time), as `swift build` in the image would."""
    copies = dockerfile_build_copies()
    assert copies and "Package.swift" in copies
    assert "Tests" not in copies
    with tempfile.TemporaryDirectory(prefix="image-context-") as directory:
        for source in copies:
            src = ROOT / source
            if src.is_dir():
                shutil.copytree(src, Path(directory) / source)
            else:
                shutil.copy2(src, Path(directory) / source)
        package = json.loads(subprocess.run(["swift", "package", "dump-package"], cwd=directory, capture_output=True, text=True,
                                             check=True, timeout=600).stdout)
        products = [p["name"] for p in package["products"] if "executable" in p["type"]]
        assert {"registration-service", "dispatcher", "apns-simulator", "kafka-dev-broker", "pushctl"} <= set(products)
        done = subprocess.run(["swift", "build", "--scratch-path", str(Path(directory) / ".build")],
                              cwd=directory, capture_output=True, text=True, timeout=3600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        for product in products:
            assert (Path(directory) / ".build" / "debug" / product).exists(), f"{product} was not built"
        # The Dockerfile installs every product it builds.
        dockerfile = (ROOT / "Dockerfile").read_text()
        for product in products:
            assert f".build/release/{product}" in dockerfile, f"the Dockerfile does not install {product}"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: test_deploy.py METRICS_URL…  (checks the dashboard's metrics against live /metrics)")
        sys.exit(2)
    served = "\n".join(urllib.request.urlopen(url, timeout=10).read().decode() for url in sys.argv[1:])
    missing = missing_metrics(served, load_dashboard())
    for title, names in dashboard_metrics(load_dashboard()).items():
        print(f"{title}: {', '.join(names)}")
    print("missing: " + (", ".join(missing) if missing else "none"))
    sys.exit(1 if missing else 0)


def test_the_registration_connections_panel_counts_only_the_registration_service():
    # The simulator's listeners export push_http2_server_connections too; a panel without the job
    # label added its connections to the service's.
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if "HTTP/2 connections" in p.get("title", "")]
    assert panels, "no HTTP/2 connections panel"
    for panel in panels:
        for target in panel["targets"]:
            if "push_http2_server_connections" in target["expr"]:
                assert 'job="registration-service"' in target["expr"], target["expr"]
