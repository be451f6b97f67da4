"""scripts/bench-campaign: a campaign (an app audience, docs/campaigns.md) against the same stack's
fan-out of one request to one user with as many tokens, for each size in BENCH_CAMPAIGN_SIZES.

For each size: the tokens are seeded straight into PostgreSQL (INSERT … SELECT, set-up, not
measured), all of one user of one app, so that the same rows are both an audience and a user's
tokens. Each run sends (1) one user_ids request to that user and (2) one audience request to the app,
and measures from produce to the RequestCompleted seen on push.feedback.v1. Printed: the median of
BENCH_RUNS runs of each, the ratio campaign/fan-out (goal ≥ 0.9), the dispatcher's peak RSS during
the campaigns (goal < 300 MB; each run's campaign goes before its fan-out, whose RSS would
otherwise be counted), with the load average. When the dispatcher runs with a campaign
rate limit for the bench's app (PUSH_CAMPAIGN_RATE_LIMITS=com.example.benchcampaign=5000), the
campaign rate is also compared with it (goal within 5%).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import benchlib as B  # noqa: E402
from benchlib import BenchError, out  # noqa: E402

BUNDLE = "com.example.benchcampaign"
PAYLOAD = '{"aps":{"alert":"bench"}}'
GOAL_RATIO = 0.9
GOAL_RSS_KIB = 300 * 1024


def main() -> int:
    sizes = [int(s) for s in os.environ.get("BENCH_CAMPAIGN_SIZES", "100000,1000000").split(",") if s.strip()]
    runs = B.env_int("BENCH_RUNS", 3)
    env = B.stack_env()
    pg = B.Postgres(env["PUSH_PG_URL"])
    run_id = os.urandom(4).hex()
    prefix = f"benchc-{run_id}-"
    dispatcher = B.pid_of("dispatcher")
    send_pb, common_pb = B.pb("send_request_pb2"), B.pb("common_pb2")
    producer = B.Producer(env["PUSH_KAFKA_BOOTSTRAP"])
    reader = B.CompletionReader(env["PUSH_KAFKA_BOOTSTRAP"], [B.FEEDBACK], prefix, group=f"bench-campaign-{run_id}",
                                dispatcher_pid=dispatcher)
    sampler = B.RSSSampler(dispatcher)
    notification = send_pb.Notification(bundle_id=BUNDLE, push_type=common_pb.PushType.Value("PUSH_TYPE_ALERT"), payload=PAYLOAD)
    summary = []
    # The dispatcher's own per-app limit, when it runs with one for the bench's app (PUSH_CAMPAIGN_RATE_LIMITS
    # or PUSH_CAMPAIGN_RATE_PER_APP): the measured campaign rate is then compared with it.
    denv = B.process_env(dispatcher)
    limits = dict(pair.strip().split("=", 1) for pair in denv.get("PUSH_CAMPAIGN_RATE_LIMITS", "").split(",") if "=" in pair)
    limit = float(limits.get(BUNDLE, denv.get("PUSH_CAMPAIGN_RATE_PER_APP", "0")) or 0)
    try:
        out(f"bench-campaign: sizes {sizes}, {runs} run(s); dispatcher pid {dispatcher}; loadavg {B.loadavg()}")
        for size in sizes:
            user = f"{prefix}u{size}"
            started = time.monotonic()
            pg.run(f"""
                DELETE FROM device_tokens WHERE bundle_id = '{BUNDLE}';
                INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id, status,
                                           last_event_at_ms, registered_at_ms)
                SELECT '{run_id}' || lpad(to_hex({size}), 8, '0') || lpad(to_hex(i), 48, '0'), '{BUNDLE}', 'sandbox',
                       'standard', '{user}', 'active', 1, 1
                  FROM generate_series(0, {size - 1}) AS i;
                ANALYZE device_tokens;""", timeout=B.deadline_for(size, 300))
            out(f"size {size:,}: seeded in {time.monotonic() - started:.1f} s")
            fanout, campaign, peaks = [], [], []
            for run in range(runs):
                # The campaign first: a user fan-out holds all its tokens in memory, and the RSS it leaves
                # behind would be counted against the campaign that follows it.
                for kind in ("campaign", "fanout"):
                    request_id = f"{prefix}{size}-{run}-{kind}"
                    target = ({"user_ids": send_pb.UserIds(user_ids=[user])} if kind == "fanout"
                              else {"audience": send_pb.AppAudience(environment=common_pb.Environment.Value("SANDBOX"))})
                    request = send_pb.SendRequest(request_id=request_id, notification=notification,
                                                  created_at_ms=int(time.time() * 1000), **target)
                    load = B.loadavg()
                    sampler.phase()
                    rss_before = sampler.status("VmRSS")
                    t0 = time.time()
                    producer.produce(B.SEND_REQUESTS, request_id.encode(), request.SerializeToString(), B.SEND_REQUEST_CONTENT_TYPE)
                    producer.flush(kind)
                    (seen_ms, completed), = reader.wait([request_id], B.deadline_for(size), f"{kind} of {size:,}")
                    elapsed = seen_ms / 1000 - t0
                    rate = completed.total / elapsed
                    (fanout if kind == "fanout" else campaign).append(rate)
                    if kind == "campaign":
                        peaks.append(sampler.peak())
                        out(f"  run {run + 1} campaign: dispatcher VmRSS {rss_before:,} KiB at the start, peak {peaks[-1][0]:,} KiB")
                    out(f"  run {run + 1} {kind:8} {completed.total:,} tokens ({completed.delivered:,} delivered) in {elapsed:.2f} s:"
                        f" {rate:,.0f} notifications/s | loadavg {load}")
            f, c = B.median(fanout), B.median(campaign)
            sampled = max(p[0] for p in peaks)
            hwm = max(p[1] for p in peaks)
            line = (f"size {size:,}: campaign {c:,.0f}/s vs fan-out {f:,.0f}/s (median of {runs}): ratio {c / f:.3f}"
                    f" (goal ≥ {GOAL_RATIO}) {'PASS' if c / f >= GOAL_RATIO else 'MISS'}; dispatcher peak RSS {sampled:,} KiB"
                    f" sampled, VmHWM {hwm:,} KiB (goal < {GOAL_RSS_KIB:,}) {'PASS' if max(sampled, hwm) < GOAL_RSS_KIB else 'MISS'}"
                    f" | loadavg {B.loadavg()}")
            if limit:
                line += (f"\n  rate limit {limit:,.0f}/s for {BUNDLE}: measured campaign rate {c:,.0f}/s,"
                         f" {100 * (c / limit - 1):+.1f}% (goal within 5%) {'PASS' if abs(c / limit - 1) <= 0.05 else 'MISS'}")
            summary.append(line)
            out(line)
        out()
        for line in summary:
            out(line)
        return 0
    except BenchError as error:
        out(f"bench-campaign: FAILED: {error}")
        return 1
    finally:
        reader.close()
        sampler.close()
        if os.environ.get("BENCH_KEEP") != "1":
            pg.run(f"DELETE FROM device_tokens WHERE bundle_id = '{BUNDLE}'; DELETE FROM send_log WHERE request_id LIKE '{prefix}%';"
                   f" DELETE FROM campaigns WHERE request_id LIKE '{prefix}%';", timeout=600)


if __name__ == "__main__":
    sys.exit(main())
