import ServiceCore

/// What one attempt of a channel-management or broadcast request means for the next, as a value
/// (docs/apns-client.md "Broadcast channels"; `APNsClient`'s channel methods perform it).
///
/// | outcome | channel management (create, read, delete, list) | broadcast |
/// |---|---|---|
/// | Apple's answer 429, 500, 503 | retried with backoff until the deadline, then final | final |
/// | 503 `Shutdown`, 400 `IdleTimeout` | retried at once on a new connection | final |
/// | 403 `ExpiredProviderToken` | a new JWT, retried once | final |
/// | any other answer | final | final |
/// | nothing sent (no connection or stream) | retried with backoff until the deadline | the same |
/// | not processed (GOAWAY, REFUSED_STREAM) | sent again at once, not an attempt | the same |
/// | sent, no answer (timeout, lost connection) | read, delete, list: retried with backoff; create: stops ``Stop/mayHaveBeenSent`` | stops ``Stop/mayHaveBeenSent`` |
///
/// A broadcast is sent **at most once**: once its request may have reached Apple it is never sent
/// again, not even after a 500 (docs/live-activities.md "Never broadcast twice"). A create is not
/// repeated after a lost answer either: Apple has no idempotency key, so a second create could leave
/// a channel nobody knows (the channel lifecycle's recovery lists and deletes such orphans).
public struct APNsChannelRetry: Sendable {
    /// Which request this is.
    public enum Request: String, Sendable, Hashable, CaseIterable {
        /// `POST /1/apps/<bundle id>/channels`.
        case create
        /// `GET /1/apps/<bundle id>/channels` with `apns-channel-id`.
        case read
        /// `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id`.
        case delete
        /// `GET /1/apps/<bundle id>/all-channels`.
        case list
        /// `POST /4/broadcasts/apps/<bundle id>`.
        case broadcast

        /// Whether sending it twice has the effect of sending it once (read, delete, list).
        public var isRepeatable: Bool { self == .read || self == .delete || self == .list }
    }

    /// What one attempt came to.
    public enum Outcome: Sendable, Hashable {
        /// Apple answered (its `status` and `reason` decide); a final decision returns this answer.
        case answered(APNsChannelAnswer)
        /// No connection or no free stream within the attempt's budget: nothing was sent.
        case notSent
        /// Sent, but Apple provably did not process it (above a GOAWAY's last-stream-id,
        /// REFUSED_STREAM; RFC 9113 §8.7).
        case notProcessed
        /// Sent, and no answer came (stream timeout, lost connection, reset): Apple may have it.
        case lost
    }

    /// What the connection needs before the retry.
    public enum ConnectionChange: Sendable, Hashable {
        /// Nothing.
        case none
        /// Retire the connection that answered (503 `Shutdown`, 400 `IdleTimeout`).
        case retire
        /// Mint a new JWT and retire the connections sending the refused one (403 `ExpiredProviderToken`).
        case renewProviderToken
    }

    /// Why retrying stops without an answer to return.
    public enum Stop: Sendable, Hashable {
        /// The deadline passed before anything was answered.
        case deadline
        /// The request may have reached Apple and is not repeatable (a broadcast, a create).
        case mayHaveBeenSent
        /// Sent again too often without Apple processing it.
        case tooManyUnprocessedResends
    }

    /// The decision.
    public enum Action: Sendable, Hashable {
        /// Apple's answer is the result: the attempt's answer, its ``APNsChannelAnswer/attempts`` set to
        /// the attempts so far.
        case final(APNsChannelAnswer)
        /// Send again after `delay` (zero: at once), after `change`.
        case retry(after: Duration, change: ConnectionChange)
        /// Give up: the caller throws (or returns Apple's last answer when the deadline stopped it).
        case stop(Stop)
    }

    /// The request.
    public let request: Request
    /// Backoff between retries (`APNsClient.Configuration.retry.backoff`).
    public let backoff: APNsClient.Configuration.Backoff
    /// Most resends of streams Apple did not process.
    public let maxUnprocessedResends: Int
    /// The last instant (ms since the UNIX epoch) a retry may start.
    public let deadlineMilliseconds: Int64
    /// Times the request was sent and may have been processed.
    public private(set) var attempts = 0
    /// Times it was sent again because Apple did not process it.
    public private(set) var unprocessedResends = 0
    /// Consecutive failures (the backoff's exponent).
    public private(set) var failures = 0
    private var renewedProviderToken = false

    /// Creates the decision of one request.
    public init(request: Request, backoff: APNsClient.Configuration.Backoff, maxUnprocessedResends: Int, deadlineMilliseconds: Int64) {
        self.request = request
        self.backoff = backoff
        self.maxUnprocessedResends = maxUnprocessedResends
        self.deadlineMilliseconds = deadlineMilliseconds
    }

    /// Decides after `outcome`, observed at `now` (ms since the UNIX epoch); `random` (0.5…1.0) is
    /// the backoff's jitter.
    public mutating func handle(_ outcome: Outcome, nowMilliseconds now: Int64, random: Double = Double.random(in: 0.5...1.0)) -> Action {
        switch outcome {
        case .notProcessed:
            unprocessedResends += 1
            return unprocessedResends > maxUnprocessedResends ? .stop(.tooManyUnprocessedResends) : .retry(after: .zero, change: .none)
        case .notSent:
            return backOff(now: now, random: random) ?? .stop(.deadline)
        case .lost:
            attempts += 1
            guard request.isRepeatable else { return .stop(.mayHaveBeenSent) }
            return backOff(now: now, random: random) ?? .stop(.deadline)
        case .answered(var answer):
            attempts += 1
            answer.attempts = attempts
            guard request != .broadcast else { return .final(answer) }
            switch (answer.status, answer.reason) {
            case (403, .expiredProviderToken?) where !renewedProviderToken:
                renewedProviderToken = true
                return .retry(after: .zero, change: .renewProviderToken)
            case (503, .shutdown?), (400, .idleTimeout?):
                return now <= deadlineMilliseconds ? .retry(after: .zero, change: .retire) : .final(answer)
            case (429, _), (500, _), (503, _):
                return backOff(now: now, random: random) ?? .final(answer)
            default:
                return .final(answer)
            }
        }
    }

    /// A retry after the next backoff delay, or nil when it would start past the deadline.
    private mutating func backOff(now: Int64, random: Double) -> Action? {
        failures += 1
        let delay = backoff.delay(afterFailures: failures, random: random)
        guard now + delay.wholeMilliseconds <= deadlineMilliseconds else { return nil }
        return .retry(after: delay, change: .none)
    }
}
