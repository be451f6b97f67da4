import Synchronization

/// Lets a repeated warning through at most once per `interval`, across every task that raises it
/// (an outage makes each of a thousand notifications in flight hit the same failure at once).
final class LogRateLimit: Sendable {
    private let interval: Duration
    private let last = Mutex<ContinuousClock.Instant?>(nil)

    init(interval: Duration) {
        self.interval = interval
    }

    /// Whether to log now: true the first time and then once `interval` passed since the last true.
    func shouldLog(now: ContinuousClock.Instant = .now) -> Bool {
        last.withLock { last in
            if let previous = last, now - previous < interval { return false }
            last = now
            return true
        }
    }
}
