"""The scripts around the stack tell the truth: scripts/up stops on a failed build and on a port
another process holds (naming the PUSH_UP_* variable to change), scripts/restart NAME restarts one
service and waits for its /readyz, and the local PostgreSQL wants a password from every role over
TCP. Runs beside the stack started by scripts/up (it reads its stack.env)."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import time
import urllib.parse
from pathlib import Path

import pushstack as stack

ROOT = Path(__file__).resolve().parents[2]


def port_of(url: str) -> str:
    return str(urllib.parse.urlparse(url if "://" in url else "tcp://" + url).port)


def second_stack_env(tmp_path: Path, **ports: str) -> dict[str, str]:
    """An environment for another stack in `tmp_path` on free ports (`pushstack.free_ports`), except
    those given."""
    free = stack.free_ports()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSH_")}
    # Under /var/tmp: the postgres OS user must reach it (pytest's tmp_path is private to root).
    env["PUSH_VAR_DIR"] = f"/var/tmp/push-e2e-{tmp_path.name[-20:]}-{os.getpid()}"
    for name in ["PUSH_PG_PORT", "PUSH_UP_GRPC_PORT", "PUSH_UP_SIM_PRODUCTION_PORT", "PUSH_UP_SIM_SANDBOX_PORT",
                 "PUSH_UP_SIM_ADMIN_PORT", "PUSH_UP_REGISTRATION_ADMIN_PORT", "PUSH_UP_DISPATCHER_ADMIN_PORT",
                 "PUSH_UP_SIM_METRICS_ADMIN_PORT"]:
        env[name] = ports.get(name) or str(next(free))
    return env


def test_up_names_the_variable_of_a_port_another_process_holds(tmp_path):
    held = port_of(stack.stack_env()["PUSH_DISPATCHER_ADMIN_URL"])
    env = second_stack_env(tmp_path, PUSH_UP_DISPATCHER_ADMIN_PORT=held)
    started = time.monotonic()
    try:
        done = subprocess.run([str(ROOT / "scripts" / "up"), "--no-demo", "--debug"], env=env, capture_output=True, text=True, timeout=600)
    finally:
        pid_files = list((Path(env["PUSH_VAR_DIR"]) / "run").glob("*.pid")) if (Path(env["PUSH_VAR_DIR"]) / "run").exists() else []
        if not pid_files:
            subprocess.run(["rm", "-rf", env["PUSH_VAR_DIR"]])
    assert not pid_files, f"the second stack started {pid_files}"
    assert done.returncode != 0, done.stdout + done.stderr
    assert f"port {held} (dispatcher-admin) is already in use by pid" in done.stderr, done.stderr
    assert "set PUSH_UP_DISPATCHER_ADMIN_PORT=<free port>" in done.stderr
    assert "stack running" not in done.stdout
    assert time.monotonic() - started < 300


def test_up_stops_when_the_build_fails(tmp_path):
    # A `swift` whose build fails (as after a compile error) but that still names the old binaries:
    # scripts/up must stop instead of starting them.
    fake = tmp_path / "bin"
    fake.mkdir()
    real = subprocess.run(["which", "swift"], capture_output=True, text=True).stdout.strip()
    (fake / "swift").write_text(
        "#!/usr/bin/env bash\n"
        f'for a in "$@"; do [ "$a" = --show-bin-path ] && exec {real} "$@"; done\n'
        'echo "/src/Foo.swift:1:1: error: cannot find \'bar\' in scope"; exit 1\n')
    (fake / "swift").chmod(0o755)
    env = second_stack_env(tmp_path)
    env["PATH"] = f"{fake}:{env['PATH']}"
    try:
        done = subprocess.run([str(ROOT / "scripts" / "up"), "--no-demo", "--debug"], env=env, capture_output=True, text=True, timeout=600)
    finally:
        subprocess.run(["rm", "-rf", env["PUSH_VAR_DIR"]])
    assert done.returncode != 0, done.stdout + done.stderr
    assert "error: cannot find 'bar' in scope" in done.stdout + done.stderr
    assert "the build failed" in done.stderr and "stack running" not in done.stdout


def test_restart_restarts_one_service_and_waits_for_its_readiness():
    env = {**os.environ, "PUSH_VAR_DIR": str(stack.VAR_DIR)}
    run = stack.VAR_DIR / "run"
    before = (run / "registration-service.pid").read_text().strip()
    done = subprocess.run([str(ROOT / "scripts" / "restart"), "registration-service"], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    after = (run / "registration-service.pid").read_text().strip()
    assert after != before and "registration-service ready" in done.stdout
    status, _, _ = stack.admin("registration", "/readyz")
    assert status == 200
    owners = subprocess.run(["ss", "-ltnpH", f"( sport = :{port_of(stack.stack_env()['PUSH_GRPC_ADDRESS'])} )"],
                            capture_output=True, text=True).stdout
    assert f"pid={after}," in owners, owners
    assert subprocess.run([str(ROOT / "scripts" / "restart"), "kafka"], env=env, capture_output=True).returncode == 2


def test_restart_with_settings_changes_them_for_that_start_only():
    """`scripts/restart NAME VAR=VALUE …` starts the service with those settings on top of the saved
    ones (the last one given wins); the next restart without them goes back to scripts/up's; an
    argument that is not VAR=VALUE is refused before the running service is touched."""
    env = {**os.environ, "PUSH_VAR_DIR": str(stack.VAR_DIR)}
    run = stack.VAR_DIR / "run"
    restart = str(ROOT / "scripts" / "restart")

    saved = (run / "registration-service.env").read_bytes()
    try:
        done = subprocess.run([restart, "registration-service", "PUSH_KAFKA_LINGER_MS=7", "PUSH_KAFKA_LINGER_MS=8", "LOG_LEVEL=debug"],
                              env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "with PUSH_KAFKA_LINGER_MS=7 PUSH_KAFKA_LINGER_MS=8 LOG_LEVEL=debug" in done.stdout, done.stdout
        changed = stack.process_environ("registration-service")
        assert changed.get("PUSH_KAFKA_LINGER_MS") == "8" and changed.get("LOG_LEVEL") == "debug", changed
        status, body, _ = stack.admin("registration", "/metrics")
        assert status == 200 and re.search(r"^push_kafka_producer_linger_seconds 0\.008$", body, re.M), "the setting did not take"
        assert (run / "registration-service.env").read_bytes() == saved, "the saved settings changed"
        pid = (run / "registration-service.pid").read_text()
        refused = subprocess.run([restart, "registration-service", "LOG_LEVEL"], env=env, capture_output=True, text=True, timeout=30)
        assert refused.returncode == 2 and "'LOG_LEVEL' is not a VAR=VALUE setting" in refused.stderr, refused.stderr
        assert (run / "registration-service.pid").read_text() == pid and Path(f"/proc/{pid.strip()}").exists(), "a refused restart stopped it"
    finally:
        back = subprocess.run([restart, "registration-service"], env=env, capture_output=True, text=True, timeout=180)
    assert back.returncode == 0, back.stdout + back.stderr
    restored, kept = stack.process_environ("registration-service"), dict(item.split("=", 1) for item in saved.decode().split("\0") if "=" in item)
    for name in ("PUSH_KAFKA_LINGER_MS", "LOG_LEVEL"):
        assert restored.get(name) == kept.get(name), (name, restored.get(name), kept.get(name))


def test_bench_campaign_lanes_limit_is_half_the_unthrottled_rate_unless_told():
    """The lanes figure's campaign limit (issue setting: half the unthrottled campaign rate); a wrong
    BENCH_LANE_LIMIT is refused by name, and `half` without a measured rate is refused rather than
    run unthrottled."""
    import sys
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    import bench_campaign
    from benchlib import BenchError

    assert bench_campaign.lane_campaign_limit("half", 11_042) == (5_521, "half the unthrottled 11,042/s")
    assert bench_campaign.lane_campaign_limit("none", 11_042) == (0.0, "none")
    assert bench_campaign.lane_campaign_limit("3650", 11_042) == (3_650, "BENCH_LANE_LIMIT")
    for wrong in ("fast", "0", "-5", "", "nan", "inf"):
        try:
            bench_campaign.lane_campaign_limit(wrong, 11_042)
        except BenchError as error:
            assert f"BENCH_LANE_LIMIT must be half, none or a rate per second above 0, not {wrong!r}" in str(error)
        else:
            raise AssertionError(f"BENCH_LANE_LIMIT={wrong!r} was accepted")
    try:
        bench_campaign.lane_campaign_limit("half", 0)
    except BenchError as error:
        assert "needs a campaign rate" in str(error)
    else:
        raise AssertionError("half of no measured rate was accepted")


def test_every_role_needs_a_password_over_tcp_and_secrets_are_owner_only():
    superuser = stack.stack_env()["PUSH_PG_SUPERUSER_URL"]
    assert subprocess.run(["psql", superuser, "-Atc", "SELECT current_user"], capture_output=True, text=True).stdout.strip() == "postgres"
    bare = superuser.split("?")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGPASSFILE"] = "/nonexistent"
    refused = subprocess.run(["psql", bare, "-c", "SELECT 1"], capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "password" in refused.stderr, refused.stderr
    for path in [stack.VAR_DIR / "stack.env", stack.VAR_DIR / "credentials" / "registration-keys.json",
                 stack.VAR_DIR / "pg" / "pgpass", stack.VAR_DIR / "pg" / "superuser-password"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path} is {oct(stat.S_IMODE(path.stat().st_mode))}"


def test_readme_second_stack_bullet_names_every_variable_scripts_up_reads():
    script = (ROOT / "scripts" / "up").read_text() + (ROOT / "scripts" / "postgres-dev").read_text()
    read = set(re.findall(r"\b(PUSH_UP_[A-Z_]+|PUSH_PG_PORT|PUSH_VAR_DIR)\b", script)) - {"PUSH_UP_READY_TIMEOUT_S"}
    readme = (ROOT / "README.md").read_text()
    bullet = readme[readme.index("- To run a second stack beside the first"):]
    bullet = bullet[:bullet.index("\n- ") if "\n- " in bullet else len(bullet)]
    missing = sorted(name for name in read if f"`{name}" not in bullet)
    assert not missing, f"the second-stack bullet misses {missing}"
    assert "scripts/down" in bullet


def test_bench_reader_reports_a_stall_instead_of_waiting_out_its_deadline(monkeypatch):
    """A benchmark wait for RequestCompleted events that stop arriving fails as a stall after
    BENCH_STALL_S, naming what arrived and the dispatcher's engine gauges, long before its deadline
    (a run of scripts/bench-e2e once waited out its whole deadline for requests the engine had lost)."""
    import sys
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    import benchlib
    monkeypatch.setenv("BENCH_STALL_S", "2")
    env = stack.stack_env()
    pid = stack.Dispatcher.stack().pid
    reader = benchlib.CompletionReader(env["PUSH_KAFKA_BOOTSTRAP"], [stack.FEEDBACK], "stall-" + stack.random_token(4),
                                       group="stall-test-" + stack.random_token(4), dispatcher_pid=pid)
    try:
        started = time.monotonic()
        try:
            reader.wait(["never-sent-1", "never-sent-2"], timeout=120, what="stall check")
        except benchlib.BenchError as error:
            message = str(error)
        else:
            raise AssertionError("the wait returned for requests never sent")
        elapsed = time.monotonic() - started
    finally:
        reader.close()
    assert elapsed < 30, f"the stall was reported after {elapsed:.0f} s"
    assert "stall check: stalled: none for 2 s with 0/2 RequestCompleted arrived" in message, message
    assert "first missing: never-sent-1" in message, message
    assert "push_records_in_flight=0" in message, message


def test_bench_latency_verdict_refuses_a_floor_that_is_not_one():
    """(c) of scripts/bench-e2e is judged against the Kafka echo floor measured in the same run. A run
    whose floor has a p50 above BENCH_ECHO_MAX_P50_MS or a p99 above BENCH_ECHO_MAX_P99_MS measured a
    slowed broker, not the dispatcher: it is not judged, and with no sound run there is no verdict. (A
    long-lived stack gave '(c) PASS  p99 641 ms vs echo p99 2,233 ms'; later, two sound runs missing
    at p99 1,035 and 630 ms beside floors of 44 and 187 ms were printed as a PASS because three slowed
    runs' floors of 1,500-7,335 ms made the median floor 1,500 ms.)"""
    import sys
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    import bench_e2e

    def run(p99, echo50, echo99):
        return {"p99": p99, "echo50": echo50, "echo99": echo99}

    status, why = bench_e2e.latency_verdict([run(641, 258, 2_233)], 100, 250)
    assert status == "INVALID" and "BENCH_ECHO_MAX_P50_MS 100 ms" in why and "258/2,233 ms" in why and "restart the stack" in why, why
    # The case that misled: runs 3-5 had a p50 under the limit but a p99 of seconds.
    runs = [run(1_035, 27, 44), run(630, 31, 187), run(578, 62, 1_500), run(565, 198, 7_130), run(616, 160, 7_335)]
    status, why = bench_e2e.latency_verdict(runs, 100, 250)
    assert status == "MISS", why
    assert why == "p99 832 ms vs echo p99 116 ms + 50 ms (2 of 5 runs judged, 3 with a slowed echo floor left out)", why
    assert bench_e2e.latency_verdict([run(90, 25, 40)], 100, 250) == ("PASS", "p99 90 ms vs echo p99 40 ms + 50 ms (1 of 1 runs judged)")
    assert bench_e2e.latency_verdict([run(91, 25, 40)], 100, 250)[0] == "MISS"
    assert bench_e2e.latency_verdict([run(91, 100, 250)], 100, 250)[0] == "PASS", "a floor at the limits still judges"
    assert bench_e2e.latency_verdict([run(91, 100, 251)], 100, 250)[0] == "INVALID"
    assert bench_e2e.latency_verdict([run(91, 101, 40)], 100, 250)[0] == "INVALID"


def test_bench_ratio_judges_each_run_against_its_own_ceiling():
    """(h) of a real run: the runs' own ratios were 0.938, 1.027, 0.739, 1.126 and 1.008 while the load
    rose run after run; the median rate over the median ceiling (0.785) paired the runs wrongly."""
    import sys
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    import bench_e2e
    rows = [{"rate": r, "ceiling": c} for r, c in
            [(8_181, 8_721), (7_681, 7_483), (5_394, 7_294), (5_723, 5_081), (4_784, 4_746)]]
    assert round(bench_e2e.run_ratio(rows), 3) == 1.008
    assert bench_e2e.run_ratio([{"rate": 5, "ceiling": 10}, {"rate": 1, "ceiling": 0}]) == 0.5, "a run without a ceiling is left out"
    assert bench_e2e.run_ratio([]) != bench_e2e.run_ratio([]), "no run: NaN, never a pass"


def test_fault_matrix_hung_tokens_rate_comes_from_the_reports_own_times():
    """The hung-tokens row compares the healthy tokens' rate with the same request's without the fault.
    Both come from the dispatcher's times in the reports (`requested_at_ms` to the last first report's
    `completed_at_ms`), not from when the script saw the reports: a 10,000-token request takes about 2 s
    here, and polling every 0.1-0.2 s beside a busy reader thread failed the full-size row at 0.71-0.75
    when the same binaries, timed again, gave 0.86-1.10. A token without a report gives no rate; a
    repeated report does not move it."""
    import importlib.machinery
    import importlib.util
    import sys
    import types
    loader = importlib.machinery.SourceFileLoader("fault_matrix", str(ROOT / "scripts" / "fault-matrix"))
    spec = importlib.util.spec_from_loader("fault_matrix", loader)
    fault_matrix = importlib.util.module_from_spec(spec)
    sys.modules["fault_matrix"] = fault_matrix  # its dataclasses look their module up there
    loader.exec_module(fault_matrix)

    def report(token, requested, completed):
        return (token, "event-" + token, types.SimpleNamespace(requested_at_ms=requested, completed_at_ms=completed))

    reports = [report("a", 1_000, 1_500), report("b", 1_000, 3_000), report("hung", 1_000, 900_000)]
    assert fault_matrix.report_rate(reports, ["a", "b"]) == 1.0, "2 tokens in 2 s"
    # A later repeat of b's report (same event id, a redelivery) does not move b's first report.
    assert fault_matrix.report_rate(reports + [report("b", 1_000, 9_000)], ["a", "b"]) == 1.0
    assert fault_matrix.report_rate(reports, ["a", "b", "never"]) is None
    assert fault_matrix.report_rate([report("a", 1_000, 1_000)], ["a"]) is None
    assert fault_matrix.report_rate(reports, ["a", "b", "hung"]) == 3 * 1000 / 899_000
