/// The server's limit decisions as values, tested without I/O (docs/http2-server-limits.md). Times are
/// monotonic nanoseconds (`monotonicNanos()`).

/// The decoded size of one header block, counted as RFC 9113 §6.5.2 counts SETTINGS_MAX_HEADER_LIST_SIZE:
/// name length + value length + 32 per field.
struct HeaderListBudget {
    let limit: Int
    private(set) var used = 0

    init(limit: Int) { self.limit = limit }

    /// Whether the block already passed the limit.
    var exceeded: Bool { used > limit }

    /// Counts one field. Returns `true` while the block is within the limit.
    mutating func add(nameLength: Int, valueLength: Int) -> Bool {
        if !exceeded { used += nameLength + valueLength + 32 }
        return !exceeded
    }

    /// Starts counting a new block (the trailers), with the same limit.
    mutating func restart() { used = 0 }
}

/// When one request body stalls: its deadline is `mark + timeout`, and the mark moves to now only once
/// the body gained `minimumBytes` since the last mark. One byte a second is therefore no progress.
struct RequestBodyProgress: Equatable {
    private(set) var mark: UInt64
    private(set) var bytesSinceMark = 0

    /// Starts the clock when the request's HEADERS arrive.
    init(start: UInt64) { mark = start }

    /// Records `bytes` of body received at `now`.
    mutating func received(_ bytes: Int, now: UInt64, minimumBytes: Int) {
        bytesSinceMark += bytes
        if bytesSinceMark >= minimumBytes {
            mark = now
            bytesSinceMark = 0
        }
    }

    /// The instant at which the body counts as stalled.
    func deadline(timeout: UInt64) -> UInt64 { mark &+ timeout }
}

/// The three timeouts of a server connection, in nanoseconds.
struct ConnectionTimeouts: Equatable {
    var handshake: UInt64
    var idle: UInt64
    var requestBody: UInt64
    var minimumProgressBytes: Int

    init(handshake: UInt64, idle: UInt64, requestBody: UInt64, minimumProgressBytes: Int) {
        self.handshake = handshake
        self.idle = idle
        self.requestBody = requestBody
        self.minimumProgressBytes = minimumProgressBytes
    }

    init(_ limits: HTTP2ServerLimits) {
        self.init(
            handshake: limits.handshakeTimeout.nanoseconds, idle: limits.idleTimeout.nanoseconds,
            requestBody: limits.requestBodyTimeout.nanoseconds, minimumProgressBytes: limits.requestBodyMinimumProgressBytes)
    }
}

/// What a connection's timer decides when it fires: close the connection (handshake or idle timeout),
/// answer stalled request bodies, and when to look again.
struct ConnectionDeadlines: Equatable {
    /// Close the connection: its handshake took too long (`.handshakeTimeout`) or it stayed without
    /// streams too long (`.idleTimeout`); nil to keep it.
    var close: HTTP2ServerLimit?
    /// Streams whose request body stalled, to be answered and reset.
    var stalledStreams: [Int32] = []
    /// When to look again (the earliest deadline not yet reached); nil when nothing is timed.
    var next: UInt64?

    /// Decides at `now` for a connection that is handshaking since `handshakeStart` (nil once open),
    /// idle since `idleSince` (nil while it has open streams), with `bodies` still arriving.
    static func decide<Bodies: Sequence>(
        now: UInt64, timeouts: ConnectionTimeouts, handshakeStart: UInt64?, idleSince: UInt64?, bodies: Bodies
    ) -> ConnectionDeadlines where Bodies.Element == (streamID: Int32, progress: RequestBodyProgress) {
        var decision = ConnectionDeadlines()
        func watch(_ deadline: UInt64) { decision.next = min(decision.next ?? deadline, deadline) }
        if let handshakeStart {
            let deadline = handshakeStart &+ timeouts.handshake
            if now >= deadline { decision.close = .handshakeTimeout } else { watch(deadline) }
            return decision
        }
        if let idleSince {
            let deadline = idleSince &+ timeouts.idle
            if now >= deadline {
                decision.close = .idleTimeout
                return decision
            }
            watch(deadline)
        }
        for (streamID, progress) in bodies {
            let deadline = progress.deadline(timeout: timeouts.requestBody)
            if now >= deadline { decision.stalledStreams.append(streamID) } else { watch(deadline) }
        }
        return decision
    }
}

/// Which connection to close so that a new one fits under `maxConnections`.
enum ConnectionEviction {
    /// A connection as the accepting thread sees it.
    struct Candidate: Equatable {
        var id: UInt64
        /// Since when it has had no open stream (accept time while handshaking); nil while busy.
        var idleSince: UInt64?
        /// Already being closed (evicted or timed out): it frees its place by itself.
        var closing: Bool
    }

    /// The longest-idle connection that is not already closing (the lower id on a tie); nil when every
    /// connection has open streams: working callers are never cut off to admit a newcomer.
    static func victim<Candidates: Sequence>(among candidates: Candidates) -> UInt64? where Candidates.Element == Candidate {
        var best: (id: UInt64, idleSince: UInt64)?
        for candidate in candidates where !candidate.closing {
            guard let idleSince = candidate.idleSince else { continue }
            if let current = best, (current.idleSince, current.id) <= (idleSince, candidate.id) { continue }
            best = (candidate.id, idleSince)
        }
        return best?.id
    }
}

extension Duration {
    /// Whole nanoseconds, clamped to `0...UInt64.max`.
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        let (product, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return .max }
        return product &+ UInt64(attoseconds / 1_000_000_000)
    }
}
