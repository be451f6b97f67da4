/// One `pushctl` command: its words, options and help. The catalogue is `PushCtlCommand.all`.
public struct PushCtlCommand: Sendable {
    /// The words that name it (`["dead-letters", "redrive"]`).
    public var path: [String]
    /// Positional arguments, for the usage line (`TOKEN`).
    public var arguments: String
    /// One line for the command list.
    public var summary: String
    /// The options it accepts (the common ones included).
    public var options: [CommandLineArguments.Option]
    /// More help: what it does, which environment variables it reads.
    public var details: String

    /// The command's name as typed (`dead-letters redrive`).
    public var name: String { path.joined(separator: " ") }

    /// `--help` of this command.
    public var help: String {
        var lines = ["usage: pushctl \(name)\(arguments.isEmpty ? "" : " " + arguments) [options]", "", summary]
        if !details.isEmpty { lines += ["", details] }
        if !options.isEmpty {
            lines += ["", "options:"]
            let rendered = options.map { option in
                (option.takesValue ? "--\(option.name) \(option.valueName)" : "--\(option.name)", option)
            }
            let width = rendered.map(\.0.count).max() ?? 0
            for (left, option) in rendered {
                lines.append("  \(left.padding(toLength: width, withPad: " ", startingAt: 0))  \(option.help)\(option.repeatable ? " (repeatable)" : "")")
            }
        }
        lines += ["", "exit status:", PushCtlExitCode.table]
        return lines.joined(separator: "\n")
    }

    /// Finds the command named by the leading words of `arguments`; returns it and the rest.
    /// - Throws: `CommandLineArguments.UsageError` naming an unknown command (with the known ones).
    public static func resolve(_ arguments: [String]) throws(CommandLineArguments.UsageError) -> (PushCtlCommand, [String]) {
        let words = Array(arguments.prefix { !$0.hasPrefix("-") })
        let match = all.filter { words.starts(with: $0.path) }.max { $0.path.count < $1.path.count }
        guard let match else {
            let typed = words.prefix(2).joined(separator: " ")
            let group = all.filter { $0.path.first == words.first }
            if !group.isEmpty {
                throw .init("unknown command \"\(typed)\"; \(words[0]) has: \(group.map { $0.path.dropFirst().joined(separator: " ") }.joined(separator: ", "))")
            }
            throw .init("unknown command \"\(typed)\"; run pushctl --help for the list")
        }
        return (match, Array(arguments.dropFirst(match.path.count)))
    }

    /// `pushctl --help`.
    public static var overview: String {
        let width = all.map(\.name.count).max() ?? 0
        var lines = [
            "usage: pushctl COMMAND [options]     (pushctl COMMAND --help for its options)",
            "",
            "The operator's command line of the push platform.",
            "",
            "commands:",
        ]
        for command in all {
            lines.append("  \(command.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(command.summary)")
        }
        lines += [
            "",
            "Settings come from the environment (a --env-file fills in unset ones, such as the local stack's",
            "$PUSH_VAR_DIR/stack.env): PUSH_GRPC_ADDRESS (127.0.0.1:50051), PUSH_API_KEY, PUSH_KAFKA_BOOTSTRAP",
            "(127.0.0.1:9092) and the Kafka security variables (PUSH_KAFKA_SECURITY_PROTOCOL, …), PUSH_TOPIC_*,",
            "PUSH_PG_URL and PUSH_PG_PASSWORD_FILE, PUSH_SIM_ADMIN_URL (http://127.0.0.1:8081).",
            "",
            "exit status:",
            PushCtlExitCode.table,
        ]
        return lines.joined(separator: "\n")
    }

    private static let credentialsFile = CommandLineArguments.Option.value(
        "file", "FILE", "the credentials file (default $PUSH_APNS_CREDENTIALS_FILE)")
    private static let envFile = CommandLineArguments.Option.value(
        "env-file", "FILE", "read unset settings from FILE (KEY=VALUE lines, e.g. $PUSH_VAR_DIR/stack.env)")
    private static let grpc: [CommandLineArguments.Option] = [
        .value("grpc", "HOST:PORT", "registration service (default $PUSH_GRPC_ADDRESS or 127.0.0.1:50051)"),
        .value("api-key", "KEY", "API key sent as authorization: Bearer KEY (default $PUSH_API_KEY)"),
        .flag("tls", "use TLS to the registration service (PUSH_GRPC_CA_FILE: its CA)"),
        envFile,
    ]
    private static let kafka: [CommandLineArguments.Option] = [
        .value("bootstrap", "HOSTS", "Kafka bootstrap servers (default $PUSH_KAFKA_BOOTSTRAP)"), envFile,
    ]

    /// Options every command accepts anywhere on the line, before the command too
    /// (`pushctl --bootstrap HOSTS send …`, an alias `pushctl --env-file FILE`); a command that does
    /// not use one ignores it.
    public static let global: [CommandLineArguments.Option] = grpc + kafka + [
        .value("sim", "URL", "simulator admin API (default $PUSH_SIM_ADMIN_URL or http://127.0.0.1:8081)"),
    ]

    /// The options `arguments` of this command are parsed with: its own, then the global ones it lacks.
    public var parsedOptions: [CommandLineArguments.Option] {
        options + Self.global.filter { global in !options.contains { $0.name == global.name } }
    }

    /// Moves options given before the command's words behind them, so that
    /// `pushctl --env-file F --bootstrap H send --app A` parses as `send --app A --env-file F --bootstrap H`.
    /// An option's value is taken along when the option takes one (`--name value`); `--name=value`
    /// and flags are one word.
    public static func hoistingLeadingOptions(_ arguments: [String]) -> [String] {
        let takesValue = Set((all.flatMap(\.options) + global).filter(\.takesValue).map(\.name))
        var rest = arguments[...]
        var leading: [String] = []
        while let first = rest.first, first.hasPrefix("-"), first != "--" {
            rest = rest.dropFirst()
            leading.append(first)
            if first.hasPrefix("--"), !first.contains("="), takesValue.contains(String(first.dropFirst(2))), let value = rest.first {
                leading.append(value)
                rest = rest.dropFirst()
            }
        }
        return Array(rest) + leading
    }

    /// Every command.
    public static let all: [PushCtlCommand] = [
        PushCtlCommand(
            path: ["register"], arguments: "",
            summary: "register (or refresh) a device token through the registration API (gRPC)",
            options: [
                .value("token", "HEX", "the device token (hex; spaces and <> allowed)"),
                .value("bundle", "ID", "the app's bundle id (required)"),
                .value("environment", "ENV", "sandbox or production (default sandbox)"),
                .value("user", "ID", "the user the token belongs to"),
                .value("installation", "ID", "the app installation (a new token replaces its old one)"),
                .value("random", "N", "register N random tokens instead of --token (for load tests)"),
                .value("concurrency", "N", "calls in flight with --random (default 64)"),
                .flag("json", "print the response as JSON"),
            ] + grpc,
            details: "Answers with the normalized token and the event id once Kafka acknowledged the token event."),
        PushCtlCommand(
            path: ["unregister"], arguments: "",
            summary: "unregister a device token through the registration API (gRPC)",
            options: [
                .value("token", "HEX", "the device token (required)"),
                .value("bundle", "ID", "the app's bundle id (required)"),
                .value("reason", "TEXT", "why (kept in the token event)"),
                .flag("json", "print the response as JSON"),
            ] + grpc,
            details: ""),
        PushCtlCommand(
            path: ["send"], arguments: "",
            summary: "send a push to tokens, users, an app audience or a broadcast channel (produces a SendRequest)",
            options: [
                .value("token", "HEX", "target device token", repeatable: true),
                .value("user", "ID", "target user (every active token of theirs)", repeatable: true),
                .value("app", "BUNDLE", "target every active token of an app (an app audience)"),
                .value("app-environment", "ENV", "only this environment of --app: sandbox or production (default: both)"),
                .value("channel", "CHANNEL_ID", "broadcast to a Live Activity channel (Apple's apns-channel-id): one request reaches every subscriber"),
                .value("bundle", "ID", "the notification's bundle id (apns-topic; required)"),
                .value("push-type", "TYPE", "alert, background, voip, … (default alert; liveactivity with --channel)"),
                .value("title", "TEXT", "alert title (builds {\"aps\":{\"alert\":{…}}})"),
                .value("body", "TEXT", "alert body"),
                .value("payload", "JSON", "the payload, sent byte for byte"),
                .value("payload-file", "FILE", "read the payload from FILE (- for standard input)"),
                .value("priority", "N", "apns-priority: 10, 5 or 1 (default: Apple's by push type)"),
                .value("collapse-id", "ID", "apns-collapse-id"),
                .value("expiration", "SECONDS", "apns-expiration: seconds since epoch (0: now or never)"),
                .value("environment", "ENV", "sandbox or production for explicit tokens the table does not know"),
                .value("request-id", "ID", "the request id (default: a random UUID)"),
                .value("send-at", "TIME", "send not before TIME: RFC 3339 (2026-12-03T09:00:00Z), ms since the epoch, or +SECONDS"),
                .flag("dry-run", "print the audience size and send nothing"),
                .flag("allow-empty", "send even when PostgreSQL says the audience is empty (otherwise exit 6)"),
                .flag("wait", "wait for the RequestCompleted and print its counts (progress bar on standard error)"),
                .value("timeout", "SECONDS", "how long --wait waits (default 120)"),
                .flag("json", "print the RequestCompleted (or the request) as JSON"),
            ] + kafka + [.value("expect", "N", "--wait: the number of notifications, for the progress bar")],
            details: """
                The request is produced to $PUSH_TOPIC_SEND_REQUESTS (push.send-requests.v1), keyed by its id.
                For --app and --user, the audience's size is read from PostgreSQL (PUSH_PG_URL) when it is
                reachable and printed before sending; an empty audience is refused with exit status 6
                unless --allow-empty. --app reaches both environments unless --app-environment is given.
                --channel broadcasts once to every device subscribed to the channel (give --environment,
                the channel's, and a payload with aps.timestamp); its outcome is one BroadcastReport.
                With --wait, pushctl reads $PUSH_TOPIC_FEEDBACK: delivery reports move the progress bar
                (whose total is the number of tokens, or for users their active tokens when PUSH_PG_URL is
                reachable, or --expect), and the RequestCompleted ends the wait (exit 0 when every
                notification was delivered, 4 otherwise).
                """),
        PushCtlCommand(
            path: ["cancel"], arguments: "REQUEST_ID",
            summary: "cancel a send request (produces a CancelRequest keyed by its id)",
            options: [.value("reason", "TEXT", "why (default cancelled_by_operator)")] + kafka,
            details: """
                Tokens not yet sent are settled SKIPPED (reason cancelled) and the RequestCompleted says
                CANCELLED; notifications already handed to APNs cannot be called back. A cancel for a request
                that completed or was never seen changes nothing. pushctl status REQUEST_ID shows the result.
                """),
        PushCtlCommand(
            path: ["channel", "create"], arguments: "BUNDLE_ID NAME",
            summary: "create a Live Activity broadcast channel (produces a ChannelCommand keyed BUNDLE_ID/ENV/NAME)",
            options: [
                .value("environment", "ENV", "production (default) or sandbox"),
                .value("policy", "POLICY", "Apple's message-storage policy: none (default) or most-recent"),
                .value("delete-after", "SECONDS", "the dispatcher deletes the channel this long after it was created (default: never)"),
                .flag("wait", "wait for the ChannelEvent and print it (exit 1 when FAILED)"),
                .value("timeout", "SECONDS", "how long --wait waits (default 120)"),
            ] + kafka,
            details: """
                NAME is yours: 1 to 128 letters, digits and "._-:", unique per app and environment. The
                dispatcher creates the channel at Apple within PUSH_CHANNEL_LIMIT and publishes a ChannelEvent
                (CREATED with Apple's channel id, or FAILED with the reason) on $PUSH_TOPIC_FEEDBACK; the same
                command again gives the same channel. pushctl channel list shows the row.
                """),
        PushCtlCommand(
            path: ["channel", "delete"], arguments: "BUNDLE_ID NAME",
            summary: "delete a broadcast channel at Apple (produces a ChannelCommand); final",
            options: [
                .value("environment", "ENV", "production (default) or sandbox"),
                .flag("wait", "wait for the ChannelEvent and print it (exit 1 when FAILED)"),
                .value("timeout", "SECONDS", "how long --wait waits (default 120)"),
            ] + kafka,
            details: "A deleted channel's name cannot be created again. The ChannelEvent DELETED comes on $PUSH_TOPIC_FEEDBACK."),
        PushCtlCommand(
            path: ["channel", "list"], arguments: "BUNDLE_ID [NAME]",
            summary: "list an app's broadcast channels (or one by name) from the dispatcher's admin port",
            options: [
                .value("dispatcher", "URL", "dispatcher admin port (default $PUSH_DISPATCHER_ADMIN_URL or http://127.0.0.1:9102)"),
                .flag("json", "print the endpoint's JSON"), envFile,
            ],
            details: """
                GET /v1/channels/BUNDLE_ID[/NAME] on the dispatcher's admin port: one line per channel (name,
                environment, state, Apple's id, policy, delete_at_ms); at most the first 1,000 in name order.
                Exit 5 when no channel has NAME.
                """),
        PushCtlCommand(
            path: ["follow"], arguments: "",
            summary: "print feedback events (delivery reports, campaign progress, invalidated tokens, completed requests) as they come",
            options: [
                .flag("json", "one proto3 JSON object per line"),
                .flag("from-beginning", "start at the oldest record (default: only new events)"),
                .value("request", "ID", "only events of this request"),
                .value("count", "N", "stop after N events"),
                .value("timeout", "SECONDS", "stop this long after starting, joining the topic included (default: never)"),
            ] + kafka,
            details: "Reads $PUSH_TOPIC_FEEDBACK (push.feedback.v1) with a consumer group of its own that commits nothing."),
        PushCtlCommand(
            path: ["token", "show"], arguments: "TOKEN",
            summary: "show a device token's row in PostgreSQL",
            options: [.flag("json", "print the row as JSON"), envFile],
            details: "Reads device_tokens through PUSH_PG_URL (and PUSH_PG_PASSWORD_FILE)."),
        PushCtlCommand(
            path: ["token", "list"], arguments: "",
            summary: "list (or count) a user's device tokens in PostgreSQL",
            options: [
                .value("user", "ID", "the user (required)"), .flag("count", "print only the number of active tokens"),
                .flag("json", "one JSON object per line"), envFile,
            ],
            details: "Reads device_tokens through PUSH_PG_URL (and PUSH_PG_PASSWORD_FILE)."),
        PushCtlCommand(
            path: ["status"], arguments: "REQUEST_ID",
            summary: "show where a send request stands (accepted, scheduled, running, completed, cancelled) from PostgreSQL",
            options: [.flag("json", "print the status as one JSON object"), envFile],
            details: """
                Reads the campaigns row, or for an immediate request send_log, request_completions and
                pending_requests, through PUSH_PG_URL (and PUSH_PG_PASSWORD_FILE); the dispatcher's admin
                port answers the same at GET /v1/requests/REQUEST_ID. An immediate request is known only
                once a dispatcher handled its record: until then (and after its retention) it is not found.
                """),
        PushCtlCommand(
            path: ["dead-letters", "list"], arguments: "",
            summary: "list dead letters: position, source, error",
            options: [
                .value("partition", "N", "only this partition of the dead-letter topic"),
                .value("from", "OFFSET", "first offset (default: the oldest)"),
                .value("to", "OFFSET", "last offset, inclusive (default: the newest)"),
                .flag("json", "one JSON object per line"),
                .value("idle", "SECONDS", "stop when nothing new arrived for this long (default 3)"),
            ] + kafka,
            details: "Reads $PUSH_TOPIC_DEAD_LETTER (push.dead-letter.v1) from the start."),
        PushCtlCommand(
            path: ["dead-letters", "redrive"], arguments: "",
            summary: "produce a range of dead letters back to their original topics (after a fix)",
            options: [
                .value("partition", "N", "partition of the dead-letter topic (required)"),
                .value("from", "OFFSET", "first offset (required)"),
                .value("to", "OFFSET", "last offset, inclusive (required)"),
                .value("to-topic", "TOPIC", "produce to TOPIC instead of each record's source topic"),
                .flag("dry-run", "only list what would be produced"),
                .value("idle", "SECONDS", "give up when nothing new arrived for this long (default 5)"),
            ] + kafka,
            details: """
                Each dead letter's original key, value and headers go back to its source topic, so the
                dispatcher handles them again. Dead letters whose original was cut (too large to keep
                whole) cannot be re-driven: they are listed and counted as skipped (exit 1 when any was).
                """),
        PushCtlCommand(
            path: ["credentials", "list"], arguments: "",
            summary: "list the dispatcher's APNs keys: which key serves which app, its scope, activate_at (never key material)",
            options: [credentialsFile, .flag("json", "one JSON object per line"),
                      .value("admin", "URL", "a dispatcher's admin port (http://host:port): add its state, last mint and last refusal per key"),
                      envFile],
            details: """
                Reads the credentials file (README "APNs credentials") as the dispatcher does, without
                loading the keys: one line per key with its app entry, TEAMID/KEYID, environment and topic
                scope, activate_at ("on load" when the file gives none) and whether it is active now.
                With --admin, each line adds what that dispatcher reports (GET /v1/credentials): the key's
                state there (serving, fallback, standby, pending, in_fallback with why), when its last
                provider token was minted and APNs's last refusal with Apple's reason.
                """),
        PushCtlCommand(
            path: ["credentials", "check"], arguments: "",
            summary: "check the dispatcher's APNs credentials file: parse it and load every .p8 key",
            options: [credentialsFile, envFile],
            details: """
                Loads the file as the dispatcher's --check-config does (each .p8 parsed as a P-256 key);
                prints every problem with the file and the entry and exits 1, or a summary.
                """),
        PushCtlCommand(
            path: ["sim", "faults"], arguments: "[JSON]",
            summary: "show the simulator's faults, or set them (JSON argument, --file, or --clear)",
            options: [
                .value("file", "FILE", "read the faults JSON from FILE"), .flag("clear", "remove every fault"),
                .value("sim", "URL", "simulator admin API (default $PUSH_SIM_ADMIN_URL or http://127.0.0.1:8081)"), envFile,
            ],
            details: """
                Faults (the simulator's PUT /admin/faults): latency, status_shares, reason_shares,
                token_rate_limit, goaway, drop_after_streams, unanswered_share, hung_tokens, hold,
                max_concurrent_streams. Answers held by hold wait for POST /admin/held/release.
                Example: pushctl sim faults '{"status_shares":{"503":0.2}}'
                """),
        PushCtlCommand(
            path: ["sim", "counters"], arguments: "",
            summary: "show the simulator's answers by status and reason",
            options: [.value("sim", "URL", "simulator admin API"), envFile], details: ""),
        PushCtlCommand(
            path: ["sim", "reset"], arguments: "",
            summary: "forget the simulator's requests and counters, restore its start-up faults",
            options: [.value("sim", "URL", "simulator admin API"), envFile], details: ""),
        PushCtlCommand(
            path: ["sim", "unregister"], arguments: "TOKEN",
            summary: "make the simulator answer 410 Unregistered for TOKEN",
            options: [.value("sim", "URL", "simulator admin API"), envFile], details: ""),
    ]
}
