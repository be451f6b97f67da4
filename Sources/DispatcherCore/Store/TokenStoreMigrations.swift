import Postgres

/// The dispatcher's schema, as versioned migrations applied at start-up under an advisory lock
/// (several replicas may start at once). Append new versions; never edit an applied one.
public enum TokenStoreMigrations {
    /// Every migration, oldest first.
    public static let all: [Migration] = [
        Migration(version: 1, name: "device_tokens", sql: """
            CREATE TABLE device_tokens (
                device_token            text PRIMARY KEY
                                        CHECK (device_token ~ '^[0-9a-f]+$' AND length(device_token) % 2 = 0
                                               AND length(device_token) BETWEEN 64 AND 512),
                bundle_id               text NOT NULL,
                environment             text NOT NULL CHECK (environment IN ('sandbox', 'production')),
                token_kind              text NOT NULL,
                user_id                 text,
                installation_id         text,
                status                  text NOT NULL CHECK (status IN ('active', 'inactive')),
                inactive_reason         text,
                inactive_at_ms          bigint,
                last_event_at_ms        bigint NOT NULL,
                registered_at_ms        bigint,
                apns_invalidated_at_ms  bigint,
                attributes              jsonb NOT NULL DEFAULT '{}'::jsonb,
                created_at              timestamptz NOT NULL DEFAULT now(),
                updated_at              timestamptz NOT NULL DEFAULT now()
            );
            -- Fan-out to a user: the active tokens of a user for an app.
            CREATE INDEX device_tokens_user_active
                ON device_tokens (user_id, bundle_id) WHERE status = 'active';
            -- Campaigns: the active tokens of an app and environment, paged by token.
            CREATE INDEX device_tokens_app_active
                ON device_tokens (bundle_id, environment, device_token) WHERE status = 'active';
            -- A new token for the same installation replaces the old one.
            CREATE INDEX device_tokens_installation
                ON device_tokens (bundle_id, installation_id, token_kind)
                WHERE status = 'active' AND installation_id IS NOT NULL;
            """),
        Migration(version: 2, name: "send_log", sql: """
            CREATE TABLE send_log (
                request_id      text NOT NULL,
                device_token    text NOT NULL,
                event_id        text NOT NULL,
                outcome         text NOT NULL,
                http_status     integer NOT NULL DEFAULT 0,
                apns_reason     text NOT NULL DEFAULT '',
                apns_id         text NOT NULL DEFAULT '',
                attempts        integer NOT NULL DEFAULT 0,
                report          bytea NOT NULL,
                completed_at    timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (request_id, device_token)
            );
            CREATE INDEX send_log_completed_at ON send_log (completed_at);
            """),
        Migration(version: 3, name: "send_log_acknowledged", sql: """
            -- Set when a request was abandoned gracefully (shutdown, revocation) after every recorded
            -- outcome's report was acknowledged by Kafka: the next owner counts these rows without
            -- publishing their reports again.
            ALTER TABLE send_log ADD COLUMN acknowledged boolean NOT NULL DEFAULT false;
            """),
        Migration(version: 4, name: "request_completions", sql: """
            -- One row per send request whose RequestCompleted Kafka acknowledged: a redelivery of the
            -- record (an offset commit lost to a broker outage or a rebalance, a producer retry) is
            -- finished at once, without publishing anything again. Deleted with send_log's retention.
            CREATE TABLE request_completions (
                request_id      text PRIMARY KEY,
                event_id        text NOT NULL,
                completed_at    timestamptz NOT NULL DEFAULT now()
            );
            CREATE INDEX request_completions_completed_at ON request_completions (completed_at);
            """),
        Migration(version: 5, name: "pending_retries", sql: """
            -- Notifications waiting for an APNs retry, parked off the partition once its uncommitted
            -- span reached its cap (docs/dispatcher-engine.md "Retries off the hot path, and parking").
            -- Everything needed to send again without the send request: the APNs request's fields,
            -- the report known before sending, the trace parent and the retry deadline fixed at first
            -- sight. Claimed by one replica at a time (claimed_by, claimed_until: a lease).
            CREATE TABLE pending_retries (
                request_id       text NOT NULL,
                device_token     text NOT NULL,
                environment      text NOT NULL CHECK (environment IN ('sandbox', 'production')),
                topic            text NOT NULL,
                push_type        text NOT NULL,
                priority         integer,
                expiration       bigint,
                collapse_id      text,
                apns_id          text,
                payload          bytea NOT NULL,
                report           bytea NOT NULL,
                trace_parent     text NOT NULL DEFAULT '',
                retry_deadline   timestamptz NOT NULL,
                next_attempt_at  timestamptz NOT NULL,
                attempts         integer NOT NULL DEFAULT 0,
                last_reason      text NOT NULL DEFAULT '',
                claimed_by       text,
                claimed_until    timestamptz,
                parked_at        timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (request_id, device_token)
            );
            CREATE INDEX pending_retries_due ON pending_retries (next_attempt_at);
            -- A request whose record finished with notifications parked: its RequestCompleted is
            -- published once record_done is set and none of its pending_retries rows remains.
            CREATE TABLE pending_requests (
                request_id       text PRIMARY KEY,
                requested_at_ms  bigint NOT NULL,
                trace_parent     text NOT NULL DEFAULT '',
                record_done      boolean NOT NULL DEFAULT false,
                created_at       timestamptz NOT NULL DEFAULT now()
            );
            """),
        // Campaigns (docs/campaigns.md): defined beside their store.
        CampaignStore.migration,
        Migration(version: 7, name: "request_completions_status", sql: """
            -- What a request's RequestCompleted said, for the request status (docs/campaigns.md
            -- "Request status"): completed, or cancelled by a CancelRequest. Older rows read as completed.
            ALTER TABLE request_completions ADD COLUMN status text NOT NULL DEFAULT 'completed'
                CHECK (status IN ('completed', 'cancelled'));
            """),
        // Maintenance jobs' leases (docs/token-hygiene.md): defined beside their store.
        TokenHygieneStore.migration,
        Migration(version: 9, name: "request_fingerprints", sql: """
            -- What each send request asked for (RequestFingerprint: SHA-256 of its notification, target
            -- and send_at_ms), recorded when it is first handled: a redelivery with the same request id
            -- and another fingerprint is dead-lettered as request_id_reused instead of being taken for a
            -- repeat. Deleted with send_log's retention.
            CREATE TABLE request_fingerprints (
                request_id      text PRIMARY KEY,
                fingerprint     bytea NOT NULL,
                completed_at    timestamptz NOT NULL DEFAULT now()
            );
            CREATE INDEX request_fingerprints_completed_at ON request_fingerprints (completed_at);
            """),
        // Cancels seen by any replica (docs/campaigns.md "Cancellation"): defined beside their store.
        CancellationStore.migration,
        Migration(version: 11, name: "device_tokens_user_pages", sql: """
            -- A user's tokens read in pages (docs/dispatcher-engine.md "A user's tokens in pages"):
            -- keyset paging by device token within one user, as an audience pages by
            -- device_tokens_campaign_audience. device_tokens_user_active (user_id, bundle_id) cannot
            -- serve ORDER BY device_token: every page of a user with a million tokens sorted them all.
            CREATE INDEX device_tokens_user_pages ON device_tokens (user_id, device_token) WHERE status = 'active';
            """),
        // Live Activity broadcast channels (docs/live-activities.md): defined beside their store.
        ChannelStore.migration,
        // send_log_v2 beside send_log (docs/send-log.md "Two tables during the transition").
        SendLogV2.migration,
    ]
}
