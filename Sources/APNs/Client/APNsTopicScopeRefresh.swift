/// When 400 `TopicDisallowed` earns a send a new connection, as a value (docs/apns-client.md "A warm
/// connection and a new bundle"). APNs may decide a connection's topics when it binds it to its
/// first provider token, so a connection opened before a topic-scoped key gained a bundle ID can
/// refuse that bundle ID while a new connection accepts it. A pool therefore answers the first
/// `TopicDisallowed` of a send by replacing every connection opened before that moment and retrying
/// once; to keep a topic that is really disallowed from churning connections, it does so at most once
/// per ``minimumInterval``, and a refusal on a connection opened since the last replacement is final.
/// Token auth only: a certificate's topics are in the certificate. Times are monotonic milliseconds
/// passed in.
public struct APNsTopicScopeRefresh: Sendable, Hashable {
    /// The shortest time between two replacements of a pool's connections: default 10 minutes.
    public let minimumInterval: Duration
    /// When the pool last replaced its connections for a topic (monotonic ms), nil before the first.
    public private(set) var lastRefresh: Int64?

    /// Creates the rule of one pool.
    public init(minimumInterval: Duration = .seconds(600)) {
        self.minimumInterval = minimumInterval
    }

    /// What to do.
    public enum Decision: Sendable, Hashable {
        /// Retry once on a new connection; retire the answering connection, and with
        /// `retireOpenedBefore` every connection opened before that instant (monotonic ms).
        case retryOnNewConnection(retireOpenedBefore: Int64?)
        /// A connection opened since the last replacement refused it, or one was replaced too
        /// recently: the answer is final.
        case final
    }

    /// The decision after `TopicDisallowed` on a connection opened at `openedAt`, at `now`.
    public mutating func topicDisallowed(connectionOpenedAt openedAt: Int64, now: Int64) -> Decision {
        if let lastRefresh {
            // Opened before the last replacement: it is on its way out; retry on a newer one.
            if openedAt < lastRefresh { return .retryOnNewConnection(retireOpenedBefore: nil) }
            if now - lastRefresh < minimumInterval.components.seconds * 1000 { return .final }
        }
        lastRefresh = now
        return .retryOnNewConnection(retireOpenedBefore: now)
    }
}
