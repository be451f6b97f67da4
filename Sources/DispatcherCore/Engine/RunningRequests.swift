/// The send requests this process is running, by request id, and the handlings of the same request
/// that wait for them (docs/dispatcher-engine.md "Records handled again").
///
/// A record is handled again while its first handling still runs when its partition was lost (or
/// revoked past its drain) and assigned back to this process: the first handling starts no new
/// notification but finishes those in flight and waits for Kafka to acknowledge their reports. The
/// second handling joins it instead of running the request at the same time: it starts nothing and
/// waits. If the first one finished the request, the joined one finishes without publishing; if it
/// ended unfinished (stopped, abandoned, failed), the request passes to the longest-waiting joined
/// handling, which runs it from what `send_log` holds.
///
/// A value over tickets (ids the caller gives its handlings): the caller keeps it under its lock,
/// with what each ticket waits on, and resumes the returned tickets' waiters outside it.
struct RunningRequests {
    /// What a handling that asks for a request does.
    enum Claim: Equatable {
        /// No other handling runs the request: this one runs it and then calls `release`.
        case run
        /// Another handling runs it: this one waits until `release` returns its ticket (or it leaves).
        case join
    }

    /// How a handling that claimed a request runs it.
    enum Run: Equatable, Sendable {
        /// No other handling ran it here: this one ran at once.
        case ranAtOnce
        /// This one waited for another handling, which ended the request unfinished.
        case afterWaiting
    }

    /// How a joined handling goes on once it is resumed.
    enum Turn: Equatable, Sendable {
        /// The handling it waited for finished the request: finish without publishing anything.
        case finishedByOther
        /// The handling it waited for ended unfinished: this one now runs the request and calls `release`.
        case run
    }

    /// Tickets of the joined handlings of each running request, oldest first.
    private var joined: [String: [Int]] = [:]

    init() {}

    /// Requests running now.
    var count: Int { joined.count }

    /// Whether a handling of `requestID` is running.
    func isRunning(_ requestID: String) -> Bool { joined[requestID] != nil }

    /// Handlings waiting for `requestID`.
    func waiting(_ requestID: String) -> Int { joined[requestID]?.count ?? 0 }

    /// A handling (identified by `ticket`, unique among the caller's handlings) asks to run
    /// `requestID`. When another one runs it, `ticket` waits until `release` returns it or it leaves.
    mutating func claim(_ requestID: String, ticket: Int) -> Claim {
        guard joined[requestID] != nil else {
            joined[requestID] = []
            return .run
        }
        joined[requestID]!.append(ticket)
        return .join
    }

    /// The handling that runs `requestID` ended: `finished` when the request is finished (its outcomes
    /// recorded and acknowledged, its `RequestCompleted` published or handed to parked retries).
    /// - Returns: the tickets to resume, with what each one does next: every one finishes when the
    ///   request finished; otherwise the oldest runs it (the others keep waiting, now for it).
    mutating func release(_ requestID: String, finished: Bool) -> [(ticket: Int, turn: Turn)] {
        guard let waiting = joined.removeValue(forKey: requestID) else { return [] }
        if finished { return waiting.map { ($0, .finishedByOther) } }
        guard let next = waiting.first else { return [] }
        joined[requestID] = Array(waiting.dropFirst())
        return [(next, .run)]
    }

    /// A joined handling stops waiting (it was cancelled).
    /// - Returns: whether it was waiting (false when it was already resumed, or never joined).
    mutating func leave(_ requestID: String, ticket: Int) -> Bool {
        guard let index = joined[requestID]?.firstIndex(of: ticket) else { return false }
        joined[requestID]!.remove(at: index)
        return true
    }
}
