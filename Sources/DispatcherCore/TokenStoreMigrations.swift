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
        // Campaigns (docs/campaigns.md): defined beside their store.
        CampaignStore.migration,
    ]
}
