/// The answer of a health or readiness probe: one line per check, passing when no check fails.
///
/// Rendered as plain text (`text`): the first line is `ok` or `failing`, then one line per check,
/// `<status> <name>: <detail>`, for example
/// ```
/// failing
/// ok kafka.consumer: joined; last poll 0.1 s ago
/// failing postgres: last check failed 2.0 s ago: connection refused
/// info apns: 3 provider-token faults since start (not a readiness condition)
/// ```
public struct ProbeReport: Sendable, Equatable, CustomStringConvertible {
    /// One finding.
    public struct Check: Sendable, Equatable {
        /// How a finding counts.
        public enum Status: String, Sendable {
            /// The condition holds.
            case ok
            /// The condition fails: the probe fails.
            case failing
            /// Shown for operators, never decides the probe (Apple's reachability, for one).
            case info
        }

        /// What was checked: `kafka.consumer`, `postgres`, `apns`, `heartbeat http2-server-0`, …
        public var name: String
        /// The outcome.
        public var status: Status
        /// Why, in words.
        public var detail: String

        /// - Parameters: see the properties.
        public init(_ name: String, _ status: Status, _ detail: String) {
            self.name = name
            self.status = status
            self.detail = detail
        }
    }

    /// The findings, in the order they were made.
    public var checks: [Check]

    /// - Parameter checks: the findings.
    public init(checks: [Check]) { self.checks = checks }

    /// Whether no check failed.
    public var isPassing: Bool { !checks.contains { $0.status == .failing } }

    /// The HTTP status a probe answers with: 200 when passing, 503 otherwise.
    public var httpStatus: Int { isPassing ? 200 : 503 }

    /// The plain-text body (see the type's documentation), ending with a newline.
    public var text: String {
        var out = isPassing ? "ok\n" : "failing\n"
        for check in checks { out += "\(check.status.rawValue) \(check.name): \(check.detail)\n" }
        return out
    }

    public var description: String { text }
}
