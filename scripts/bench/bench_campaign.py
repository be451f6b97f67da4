"""scripts/bench-campaign: a campaign (an app audience, docs/campaigns.md) against the same stack's
fan-out of one request to one user with as many tokens, for each size in BENCH_CAMPAIGN_SIZES.

For each size: the tokens are seeded straight into PostgreSQL (INSERT … SELECT, set-up, not
measured), all of one user of one app, so that the same rows are both an audience and a user's
tokens. Each run sends (1) one user_ids request to that user and (2) one audience request to the app,
and measures from produce to the RequestCompleted seen on push.feedback.v1. Printed: the median of
BENCH_RUNS runs of each, the ratio campaign/fan-out (goal ≥ 0.9), the dispatcher's peak RSS during
the campaigns (goal < 300 MB; each run's campaign goes before its fan-out, and from the second run
on waits until the RSS the fan-out before it freed was returned, so that only the campaign's memory
is counted; the fan-out's own peak is printed beside it), the CPU per notification of the dispatcher,
PostgreSQL and the broker from /proc for each run (their medians for the dispatcher and PostgreSQL
together), with the load average. When the dispatcher runs with a campaign
rate limit for the bench's app (PUSH_CAMPAIGN_RATE_LIMITS=com.example.benchcampaign=5000), the
campaign rate is also compared with it (goal within 5%).

Then the lanes figure (BENCH_LANE=0 skips it): single-user requests of another app paced at
BENCH_LANE_RATE (100)/s for BENCH_LANE_SECS (15) s, p99 from created_at_ms to the RequestCompleted seen,
first with no campaign running, then while a campaign of the last size runs (cancelled once the paced
load ends, so a large audience need not finish), BENCH_RUNS times, after 5 s of the same paced load
not counted. Goal: the median of the runs' p99
with the campaign / p99 without ≤ 2, with the campaign limited to half its unthrottled rate
(docs/campaigns.md "The CPU"). BENCH_LANE_LIMIT says which limit: `half` (default) restarts the
stack's dispatcher (scripts/restart, its other settings kept) with
PUSH_CAMPAIGN_RATE_LIMITS=com.example.benchcampaign=<half the last size's median campaign rate>, and
restarts it with its own settings again afterwards; a number sets that limit the same way; `none`
runs the campaign unthrottled. A dispatcher that already runs with a limit for the bench's app keeps
it, and nothing is restarted.
"""
from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import benchlib as B  # noqa: E402
from benchlib import BenchError, out  # noqa: E402

BUNDLE = "com.example.benchcampaign"
LANE_BUNDLE = "com.example.benchlane"
PAYLOAD = '{"aps":{"alert":"bench"}}'
GOAL_RATIO = 0.9
GOAL_RSS_KIB = 300 * 1024
GOAL_LANE_P99 = 2.0
LANE_WARM_UP_SECS = 5
CANCEL_CONTENT_TYPE = b"application/x-protobuf; message=push.v1.CancelRequest"


def paced_p99(producer, reader, send_pb, notification, users: list[str], rate: int, secs: int, tag: str) -> tuple[float, float, float]:
    """Single-user requests to `users` in turn, `rate` per second for `secs` seconds; the p50, p99 and
    achieved rate of created_at_ms → RequestCompleted seen."""
    n = rate * secs
    ids = [f"{tag}-{k}" for k in range(n)]
    created: dict[str, int] = {}
    t0 = time.perf_counter()
    for k, request_id in enumerate(ids):
        target = t0 + k / rate
        while (now := time.perf_counter()) < target:
            producer.poll(min(0.001, target - now))
        created[request_id] = int(time.time() * 1000)
        request = send_pb.SendRequest(request_id=request_id, notification=notification, created_at_ms=created[request_id],
                                      user_ids=send_pb.UserIds(user_ids=[users[k % len(users)]]))
        producer.produce(B.SEND_REQUESTS, request_id.encode(), request.SerializeToString(), B.SEND_REQUEST_CONTENT_TYPE)
        producer.poll(0)
    achieved = n / (time.perf_counter() - t0)
    producer.flush(f"lane requests {tag}")
    got = reader.wait(ids, B.deadline_for(n), f"paced lane requests ({tag})")
    values = sorted(seen - created[i] for i, (seen, _) in zip(ids, got))
    return B.percentile(values, 0.5), B.percentile(values, 0.99), achieved


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
    cpu = B.CPUMeter()
    notification = send_pb.Notification(bundle_id=BUNDLE, push_type=common_pb.PushType.Value("PUSH_TYPE_ALERT"), payload=PAYLOAD)
    summary = []
    last_campaign_rate = 0.0
    # The dispatcher's own per-app limit, when it runs with one for the bench's app (PUSH_CAMPAIGN_RATE_LIMITS
    # or PUSH_CAMPAIGN_RATE_PER_APP): the measured campaign rate is then compared with it.
    denv = B.process_env(dispatcher)
    limits = dict(pair.strip().split("=", 1) for pair in denv.get("PUSH_CAMPAIGN_RATE_LIMITS", "").split(",") if "=" in pair)
    limit = float(limits.get(BUNDLE, denv.get("PUSH_CAMPAIGN_RATE_PER_APP", "0")) or 0)
    try:
        lane_setting = os.environ.get("BENCH_LANE_LIMIT", "half")
        lane_campaign_limit(lane_setting, 1.0)  # a wrong setting fails now, not after the campaigns
        out(f"bench-campaign: sizes {sizes}, {runs} run(s); dispatcher pid {dispatcher}; loadavg {B.loadavg()}")
        for size in sizes:
            user = f"{prefix}u{size}"
            started = time.monotonic()
            # VACUUM, not only ANALYZE: the first read of rows just inserted sets their hint bits, and
            # autovacuum follows a large insert; the first run's campaign (it runs first) paid for both
            # (PostgreSQL 30.7 µs per notification against 11.8 to 14.7 µs in later campaigns, 100,000 tokens).
            pg.run(f"""
                DELETE FROM device_tokens WHERE bundle_id = '{BUNDLE}';
                INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id, status,
                                           last_event_at_ms, registered_at_ms)
                SELECT '{run_id}' || lpad(to_hex({size}), 8, '0') || lpad(to_hex(i), 48, '0'), '{BUNDLE}', 'sandbox',
                       'standard', '{user}', 'active', 1, 1
                  FROM generate_series(0, {size - 1}) AS i;
                VACUUM (ANALYZE) device_tokens;""", timeout=B.deadline_for(size, 300))
            out(f"size {size:,}: seeded in {time.monotonic() - started:.1f} s")
            fanout, campaign, peaks, fanout_peaks = [], [], [], []
            cpu_used: dict[str, list[float]] = {"campaign": [], "fanout": []}
            for run in range(runs):
                # The campaign first: the RSS a user fan-out leaves behind (its pages, its sends' buffers)
                # would be counted against the campaign that follows it.
                for kind in ("campaign", "fanout"):
                    request_id = f"{prefix}{size}-{run}-{kind}"
                    target = ({"user_ids": send_pb.UserIds(user_ids=[user])} if kind == "fanout"
                              else {"audience": send_pb.AppAudience(environment=common_pb.Environment.Value("SANDBOX"))})
                    request = send_pb.SendRequest(request_id=request_id, notification=notification,
                                                  created_at_ms=int(time.time() * 1000), **target)
                    if kind == "campaign" and run > 0:
                        # The fan-out before it freed its tokens; the trim thread returns that memory
                        # within its interval, and it is not the campaign's.
                        was, now, waited = sampler.settle()
                        out(f"  run {run + 1} campaign: waited {waited:.1f} s for the dispatcher's RSS to settle ({was:,} → {now:,} KiB)")
                    load = B.loadavg()
                    sampler.phase()
                    rss_before = sampler.status("VmRSS")
                    cpu_before = cpu.read()
                    t0 = time.time()
                    producer.produce(B.SEND_REQUESTS, request_id.encode(), request.SerializeToString(), B.SEND_REQUEST_CONTENT_TYPE)
                    producer.flush(kind)
                    (seen_ms, completed), = reader.wait([request_id], B.deadline_for(size), f"{kind} of {size:,}")
                    elapsed = seen_ms / 1000 - t0
                    used = B.CPUMeter.per_item(cpu_before, cpu.read(), max(1, completed.total))
                    cpu_used[kind].append(used["dispatcher"] + used["postgres"])
                    rate = completed.total / elapsed
                    (fanout if kind == "fanout" else campaign).append(rate)
                    if kind == "campaign":
                        peaks.append(sampler.peak())
                        out(f"  run {run + 1} campaign: dispatcher VmRSS {rss_before:,} KiB at the start, peak {peaks[-1][0]:,} KiB")
                    else:
                        fanout_peaks.append(sampler.peak()[0])
                    out(f"  run {run + 1} {kind:8} {completed.total:,} tokens ({completed.delivered:,} delivered) in {elapsed:.2f} s:"
                        f" {rate:,.0f} notifications/s | CPU per notification: dispatcher {used['dispatcher']:,.1f} µs +"
                        f" PostgreSQL {used['postgres']:,.1f} µs + broker {used['broker']:,.1f} µs | loadavg {load}")
            f, c = B.median(fanout), B.median(campaign)
            last_campaign_rate = c
            sampled = max(p[0] for p in peaks)
            hwm = max(p[1] for p in peaks)
            line = (f"size {size:,}: campaign {c:,.0f}/s vs fan-out {f:,.0f}/s (median of {runs}): ratio {c / f:.3f}"
                    f" (goal ≥ {GOAL_RATIO}) {'PASS' if c / f >= GOAL_RATIO else 'MISS'}; dispatcher peak RSS {sampled:,} KiB"
                    f" sampled, VmHWM {hwm:,} KiB (goal < {GOAL_RSS_KIB:,}) {'PASS' if max(sampled, hwm) < GOAL_RSS_KIB else 'MISS'}"
                    f" (the fan-out's own peak: {max(fanout_peaks):,} KiB, a user's tokens read in pages of PUSH_CAMPAIGN_PAGE_SIZE);"
                    f" dispatcher + PostgreSQL CPU per notification {B.median(cpu_used['campaign']):,.1f} µs vs"
                    f" {B.median(cpu_used['fanout']):,.1f} µs (medians) | loadavg {B.loadavg()}")
            if limit:
                line += (f"\n  rate limit {limit:,.0f}/s for {BUNDLE}: measured campaign rate {c:,.0f}/s,"
                         f" {100 * (c / limit - 1):+.1f}% (goal within 5%) {'PASS' if abs(c / limit - 1) <= 0.05 else 'MISS'}")
            summary.append(line)
            out(line)
        if sizes and os.environ.get("BENCH_LANE", "1") != "0":
            lane_limit, limited_by = limit, "the dispatcher's own"
            restarted = None
            if not limit:
                lane_limit, limited_by = lane_campaign_limit(lane_setting, last_campaign_rate)
            if lane_limit and not limit:
                restarted = B.changed_settings("dispatcher")
                others = denv.get("PUSH_CAMPAIGN_RATE_LIMITS", "")
                setting = ",".join(filter(None, [others, f"{BUNDLE}={lane_limit:.0f}"]))
                out(f"lanes: restarting the dispatcher with PUSH_CAMPAIGN_RATE_LIMITS={setting} ({limited_by})")
                reader.dispatcher_pid = B.restart("dispatcher", {**restarted, "PUSH_CAMPAIGN_RATE_LIMITS": setting})
            try:
                summary.append(lane_figure(pg, producer, reader, send_pb, common_pb, notification, prefix, sizes[-1],
                                           lane_limit, limited_by))
            finally:
                if restarted is not None:
                    out("lanes: restarting the dispatcher with its own settings")
                    reader.dispatcher_pid = B.restart("dispatcher", restarted)
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
            pg.run(f"DELETE FROM device_tokens WHERE bundle_id IN ('{BUNDLE}', '{LANE_BUNDLE}'); DELETE FROM send_log WHERE request_id LIKE '{prefix}%'; DELETE FROM send_log_v2 WHERE request_id LIKE '{prefix}%';"
                   f" DELETE FROM campaigns WHERE request_id LIKE '{prefix}%';", timeout=600)


def lane_campaign_limit(setting: str, unthrottled: float) -> tuple[float, str]:
    """The campaign limit of the lanes figure for BENCH_LANE_LIMIT `setting` (`half`, `none` or a rate
    per second) and what it is, given the campaign rate measured unthrottled (per second)."""
    if setting == "none":
        return 0.0, "none"
    if setting == "half":
        if unthrottled <= 0:
            raise BenchError("BENCH_LANE_LIMIT=half needs a campaign rate: BENCH_CAMPAIGN_SIZES measured none")
        return unthrottled / 2, f"half the unthrottled {unthrottled:,.0f}/s"
    try:
        rate = float(setting)
    except ValueError:
        rate = 0.0
    if not math.isfinite(rate) or rate <= 0:
        raise BenchError(f"BENCH_LANE_LIMIT must be half, none or a rate per second above 0, not {setting!r}")
    return rate, "BENCH_LANE_LIMIT"


def lane_figure(pg, producer, reader, send_pb, common_pb, notification, prefix: str, size: int, limit: float,
                limited_by: str) -> str:
    """The paced single-user p99 without and with a campaign of `size` running (the audience seeded by
    the last size of the main loop); the campaign is cancelled when the paced load ends."""
    rate, secs = B.env_int("BENCH_LANE_RATE", 100), B.env_int("BENCH_LANE_SECS", 15)
    users = [f"{prefix}lane-{k}" for k in range(rate)]
    pg.run(f"""
        INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id, status,
                                   last_event_at_ms, registered_at_ms)
        SELECT '{prefix[7:15]}' || lpad(to_hex(i), 56, 'f'), '{LANE_BUNDLE}', 'sandbox', 'standard',
               '{prefix}lane-' || i, 'active', 1, 1
          FROM generate_series(0, {rate - 1}) AS i;""", timeout=120)
    lane_notification = send_pb.Notification()
    lane_notification.CopyFrom(notification)
    lane_notification.bundle_id = LANE_BUNDLE
    runs = B.env_int("BENCH_RUNS", 3)
    out(f"lanes: single-user requests of {LANE_BUNDLE} paced at {rate}/s for {secs} s, without and with a campaign "
        f"of {size:,} tokens (campaign limit: {f'{limit:,.0f}/s, {limited_by}' if limit else 'none'}), {runs} run(s) | loadavg {B.loadavg()}")
    # Not counted: the first seconds after a (re)start of the dispatcher pay for its group join and its
    # first APNs and PostgreSQL connections (a p99 of 664 ms once, right after the lanes' restart).
    warm50, warm99, _ = paced_p99(producer, reader, send_pb, lane_notification, users, rate, LANE_WARM_UP_SECS,
                                  f"{prefix}lane-warm")
    out(f"  warm-up: {rate * LANE_WARM_UP_SECS:,} paced requests, p50 {warm50:,.0f} ms, p99 {warm99:,.0f} ms (not counted)")
    alone, with_campaign, ratios = [], [], []
    for run in range(runs):
        alone50, alone99, alone_rate = paced_p99(producer, reader, send_pb, lane_notification, users, rate, secs,
                                                 f"{prefix}lane{run}-alone")
        out(f"  run {run + 1} without a campaign: {alone_rate:,.0f}/s, p50 {alone50:,.0f} ms, p99 {alone99:,.0f} ms | loadavg {B.loadavg()}")
        campaign_id = f"{prefix}lane{run}-campaign"
        request = send_pb.SendRequest(request_id=campaign_id, notification=notification, created_at_ms=int(time.time() * 1000),
                                      audience=send_pb.AppAudience(environment=common_pb.Environment.Value("SANDBOX")))
        producer.produce(B.SEND_REQUESTS, campaign_id.encode(), request.SerializeToString(), B.SEND_REQUEST_CONTENT_TYPE)
        producer.flush("lane campaign")
        # Wait for the campaign to be sending before the paced load starts.
        deadline = time.monotonic() + 60
        while int(pg.scalar(f"SELECT count(*) FROM send_log_all WHERE request_id = '{campaign_id}'") or 0) == 0:
            if time.monotonic() > deadline:
                raise BenchError(f"lanes: the campaign {campaign_id} sent nothing within 60 s")
            time.sleep(0.1)
        with50, with99, with_rate = paced_p99(producer, reader, send_pb, lane_notification, users, rate, secs,
                                              f"{prefix}lane{run}-with")
        sent = int(pg.scalar(f"SELECT count(*) FROM send_log_all WHERE request_id = '{campaign_id}'") or 0)
        cancel = send_pb.CancelRequest(request_id=campaign_id, reason="bench_done", requested_at_ms=int(time.time() * 1000))
        producer.produce(B.SEND_REQUESTS, campaign_id.encode(), cancel.SerializeToString(), CANCEL_CONTENT_TYPE)
        producer.flush("lane campaign cancel")
        (_, completed), = reader.wait([campaign_id], B.deadline_for(size), "the lane campaign's RequestCompleted")
        out(f"  run {run + 1} with the campaign: {with_rate:,.0f}/s, p50 {with50:,.0f} ms, p99 {with99:,.0f} ms; the campaign had sent "
            f"{sent:,} when the paced load ended, then was cancelled ({completed.total:,} total, {completed.delivered:,} delivered, "
            f"{completed.skipped:,} skipped) | loadavg {B.loadavg()}")
        alone.append(alone99)
        with_campaign.append(with99)
        ratios.append(with99 / alone99 if alone99 else float("inf"))
    ratio = B.median(ratios)
    line = (f"lanes: paced single-user p99 {B.median(with_campaign):,.0f} ms with the campaign vs {B.median(alone):,.0f} ms without"
            f" (medians of {runs}); median of the runs' ratios {ratio:.2f}× (runs {', '.join(f'{r:.2f}' for r in ratios)})"
            f" (goal ≤ {GOAL_LANE_P99:g}×) {'PASS' if ratio <= GOAL_LANE_P99 else 'MISS'}"
            f" (campaign limit: {f'{limit:,.0f}/s, {limited_by}' if limit else 'none'}) | loadavg {B.loadavg()}")
    out(line)
    return line


if __name__ == "__main__":
    sys.exit(main())
