"""scripts/soak: does the dispatcher's memory stay flat under a long, faulty, steady load?

Small requests (one device token each) are produced at SOAK_RATE per second for SOAK_SECS while the
simulator answers SOAK_5XX_SHARE of the pushes with 500 or 503 (half each) and never answers
SOAK_HUNG_SHARE of the tokens. The dispatcher runs with the settings the stack gave it. Its VmRSS is
sampled every second; the run is cut into fifths, and the goal (issue 28 (e)) is that the median RSS of
the last fifth is at most 1.1 × that of the second fifth: bounded caches reach their plateau or their
bound within the first fifth. Also printed: the requests completed by the end, and how many wait for a
hung token (they end at the retry horizon, after the soak).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402
from benchlib import BenchError, out  # noqa: E402

BUNDLE = "com.example.soak"


def env_float(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    try:
        return float(text) if text else default
    except ValueError:
        raise BenchError(f"{name}={text!r} is not a number") from None


class RSSSeries:
    """VmRSS of `pid` (KiB) once a second, with the seconds since the start, in a thread."""

    def __init__(self, pid: int):
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-series", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for line in open(f"/proc/{self.pid}/status"):
                    if line.startswith("VmRSS:"):
                        self.samples.append((time.monotonic() - self.started, int(line.split()[1])))
            except OSError:
                return
            self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


def fifths(samples: list[tuple[float, int]], seconds: float) -> list[list[int]]:
    parts: list[list[int]] = [[] for _ in range(5)]
    for at, rss in samples:
        if at < seconds:
            parts[min(4, int(at * 5 / seconds))].append(rss)
    return parts


def main() -> int:
    rate = B.env_int("SOAK_RATE", 300)
    seconds = B.env_int("SOAK_SECS", 600)
    errors = env_float("SOAK_5XX_SHARE", 0.10)
    hung = env_float("SOAK_HUNG_SHARE", 0.001)
    env = B.stack_env()
    dispatcher = B.pid_of("dispatcher")
    settings = B.process_env(dispatcher)
    horizon = settings.get("PUSH_APNS_RETRY_HORIZON_MS", "default")
    out(f"soak: {rate}/s single-token requests for {seconds} s; Apple answers {errors:.0%} with 5xx, never answers "
        f"{hung:.2%} of the tokens; dispatcher pid {dispatcher}, PUSH_APNS_RETRY_HORIZON_MS={horizon}; loadavg {B.loadavg()}")
    send, common = B.pb("send_request_pb2"), B.pb("common_pb2")
    run = uuid.uuid4().hex[:8]
    prefix = f"soak-{run}-"
    producer = B.Producer(env["PUSH_KAFKA_BOOTSTRAP"])
    reader = B.CompletionReader(env["PUSH_KAFKA_BOOTSTRAP"], [B.FEEDBACK], prefix, f"soak-{run}", dispatcher)
    share = errors / 2
    B.pushstack.simulator_admin("/admin/faults", "PUT", {"status_shares": {"500": share, "503": share},
                                                        "hung_tokens": {"share": hung}})
    series = RSSSeries(dispatcher)
    ids: list[str] = []
    try:
        t0 = time.perf_counter()
        n = rate * seconds
        for k in range(n):
            target = t0 + k / rate
            while (now := time.perf_counter()) < target:
                producer.poll(min(0.005, target - now))
            request_id = f"{prefix}{k}"
            ids.append(request_id)
            request = send.SendRequest(
                request_id=request_id, created_at_ms=int(time.time() * 1000),
                device_tokens=send.DeviceTokens(device_tokens=[os.urandom(32).hex()]),
                notification=send.Notification(bundle_id=BUNDLE, environment=common.Environment.Value("SANDBOX"),
                                                push_type=common.PushType.Value("PUSH_TYPE_ALERT"),
                                                payload='{"aps":{"alert":"soak"}}'))
            producer.produce(B.SEND_REQUESTS, request_id.encode(), request.SerializeToString(), B.SEND_REQUEST_CONTENT_TYPE)
            producer.poll(0)
            if k and k % (rate * 60) == 0:
                done = sum(1 for i in ids if i in reader.completed)
                last = series.samples[-1][1] if series.samples else 0
                out(f"soak: {time.perf_counter() - t0:5.0f} s produced {k:,}, completed {done:,}, VmRSS {last:,} KiB, "
                    f"loadavg {B.loadavg()}")
            if not Path(f"/proc/{dispatcher}").exists():
                raise BenchError(f"the dispatcher (pid {dispatcher}) exited during the soak")
        producer.flush("soak produce")
        elapsed = time.perf_counter() - t0
    finally:
        series.close()
        try:
            B.pushstack.simulator_admin("/admin/faults", "PUT", {})
        except Exception as error:  # the summary still matters
            out(f"soak: could not clear the simulator's faults: {error}")
    time.sleep(2)
    done = sum(1 for i in ids if i in reader.completed)
    reader.close()
    parts = fifths(series.samples, seconds)
    medians = [statistics.median(p) if p else float("nan") for p in parts]
    out(f"soak: produced {len(ids):,} in {elapsed:.0f} s ({len(ids) / elapsed:,.0f}/s); completed by the end {done:,} "
        f"({len(ids) - done:,} still waiting: hung tokens retry until the horizon, and the last seconds' requests)")
    out("soak: VmRSS median per fifth (KiB): " + ", ".join(f"{m:,.0f}" for m in medians)
        + f"; max {max(r for _, r in series.samples):,} KiB")
    ratio = medians[4] / medians[1]
    verdict = "PASS" if ratio <= 1.1 else "MISS"
    out(f"soak: last fifth / second fifth = {ratio:.3f} (goal ≤ 1.1) {verdict} | loadavg {B.loadavg()}")
    if os.environ.get("SOAK_SERIES"):
        Path(os.environ["SOAK_SERIES"]).write_text(json.dumps(series.samples))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        out(f"soak: {error}")
        sys.exit(2)
