/// `pushctl`'s exit statuses (also printed by `pushctl --help`).
public enum PushCtlExitCode: Int32, Sendable, CaseIterable {
    /// Done; with `send --wait`: every notification was delivered.
    case success = 0
    /// The other side refused: a gRPC error other than `UNAVAILABLE`, a record that cannot be read,
    /// a simulator admin call answered with an error.
    case failed = 1
    /// Bad command line: unknown command or option, missing or malformed value (the message names it).
    case usage = 2
    /// A dependency cannot be reached or did not answer in time (Kafka, registration service,
    /// PostgreSQL, simulator), gRPC `UNAVAILABLE`, or `--wait` ran out of time.
    case unavailable = 3
    /// `send --wait`: the request completed, but not every notification was delivered (rejected,
    /// failed or skipped), or the request itself was refused.
    case notAllDelivered = 4
    /// `token show`: no such token; `status`: no such request.
    case notFound = 5
    /// `send --app`/`--user`: PostgreSQL says the audience is empty, so nothing would be sent
    /// (`--allow-empty` sends anyway).
    case emptyAudience = 6

    /// One line per status for `--help`.
    public static var table: String {
        allCases.map { code in
            let text: String =
                switch code {
                case .success: "success (send --wait: every notification delivered)"
                case .failed: "refused by the other side (gRPC error, unreadable record, admin API error)"
                case .usage: "bad command line (the message names the argument)"
                case .unavailable: "Kafka, registration service, PostgreSQL or simulator unreachable, or a timeout"
                case .notAllDelivered: "send --wait: completed, but some notifications were not delivered"
                case .notFound: "token show: no such token; status: no such request"
                case .emptyAudience: "send: the audience is empty (nothing would be sent; --allow-empty sends anyway)"
                }
            return "  \(code.rawValue)  \(text)"
        }.joined(separator: "\n")
    }
}

/// An error that ends a command with a given exit status and message.
public struct PushCtlError: Error, Sendable, CustomStringConvertible {
    /// The exit status.
    public var exitCode: PushCtlExitCode
    /// What went wrong.
    public var message: String
    /// - Parameters: see the properties.
    public init(_ exitCode: PushCtlExitCode, _ message: String) {
        self.exitCode = exitCode
        self.message = message
    }
    public var description: String { message }
}
