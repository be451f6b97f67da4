/// The provider token (JWT) one token-auth connection sends, and Apple's rules for changing it, as a
/// value (docs/apns-protocol.md §4, docs/apns-client.md "Provider tokens"). The pool keeps one per
/// connection and performs its decisions; the shared token comes from ``APNsProviderTokenCache``.
///
/// Rules: a connection keeps its JWT until it is ``switchAge`` old; it changes JWT only after holding
/// its own for 20 minutes (Apple answers 429 `TooManyProviderTokenUpdates` to a change sooner); it
/// takes a shared JWT only when it is at most ``maximumInstallAge`` old, so it can hold it 20 minutes
/// and still change before the hour; it never sends one ``unusableAge`` old. When none of these can
/// be met (only after a clock jump) the connection is retired.
///
/// When APNs refuses a change anyway (429 `TooManyProviderTokenUpdates`: its clock or count differs
/// from ours), the connection goes back to the JWT it sent before, which APNs still holds for it, and
/// keeps it while it is valid (under ``unusableAge``) instead of trying the refused one again; then it
/// is retired, and its replacement starts with a fresh JWT (a first JWT is not a change).
public struct APNsConnectionProviderToken: Sendable, Hashable {
    /// Age (seconds) at which a connection moves to the shared JWT's successor, once it held its own
    /// for 20 minutes: 45 minutes.
    public static let switchAge: Int64 = 45 * 60
    /// A connection takes only a shared JWT at most this old: 30 minutes.
    public static let maximumInstallAge: Duration = .seconds(30 * 60)
    /// A JWT this old (seconds) is never sent: 57 minutes (APNs refuses at 60).
    public static let unusableAge: Int64 = 57 * 60
    /// Shortest hold of one JWT on a connection (seconds): 20 minutes.
    static let minimumHold: Int64 = APNsProviderTokenCache.minimumRefreshInterval.components.seconds
    /// An `iat` this far (seconds) in our clock's future means the wall clock stepped back.
    static let clockStepBack: Int64 = 300

    /// The JWT the connection sends; nil before its first request.
    public private(set) var current: APNsJWT?
    /// When the connection started sending ``current`` (seconds since the epoch).
    public private(set) var installedAt: Int64 = 0
    /// The JWT before ``current`` and when it was installed: what APNs still holds for the connection
    /// when it refuses the change.
    public private(set) var previous: APNsJWT?
    private var previousInstalledAt: Int64 = 0
    /// APNs refused a change on this connection: it keeps ``current`` until it is unusable, then is retired.
    public private(set) var changeRefused = false

    /// A connection that has sent nothing yet.
    public init() {}

    /// What the connection needs before sending at `now`.
    public enum Decision: Sendable, Hashable {
        /// Send this JWT (unchanged).
        case keep(APNsJWT)
        /// Ask the shared cache for a JWT at most `maximumAge` old and ``install(_:now:)`` it.
        case takeShared(maximumAge: Duration)
        /// The connection can neither keep its JWT nor change it yet: replace the connection.
        case retireConnection
    }

    /// The decision at `now` (seconds since the epoch, on the token cache's clock).
    public func decide(now: Int64) -> Decision {
        if changeRefused, let current {
            let age = current.age(atSeconds: now)
            return age < Self.unusableAge && age >= -Self.clockStepBack ? .keep(current) : .retireConnection
        }
        if let current {
            let age = current.age(atSeconds: now)
            if age < Self.switchAge && age >= -Self.clockStepBack { return .keep(current) }
            if now - installedAt < Self.minimumHold {
                return age < Self.unusableAge ? .keep(current) : .retireConnection
            }
        }
        return .takeShared(maximumAge: Self.maximumInstallAge)
    }

    /// Starts sending `jwt` at `now` (after ``Decision/takeShared(maximumAge:)``). Returns true when
    /// it replaces another JWT (a change APNs counts against the 20-minute rule), false for the
    /// first JWT or the same one.
    @discardableResult
    public mutating func install(_ jwt: APNsJWT, now: Int64) -> Bool {
        guard jwt != current else { return false }
        let changed = current != nil
        previous = current
        previousInstalledAt = installedAt
        current = jwt
        installedAt = now
        return changed
    }

    /// APNs answered 429 `TooManyProviderTokenUpdates` to `rejected` at `now`. Returns true when the
    /// connection can go on: it sends its previous JWT again (still valid) and changes no more, or it
    /// no longer sends `rejected` (another stream already went back). False: nothing valid to go back
    /// to, so the connection must be retired (its replacement's first JWT is no change).
    public mutating func refusedChange(to rejected: APNsJWT, now: Int64) -> Bool {
        guard current == rejected else { return true }
        guard let previous else { return false }
        let age = previous.age(atSeconds: now)
        guard age < Self.unusableAge && age >= -Self.clockStepBack else { return false }
        current = previous
        installedAt = previousInstalledAt
        self.previous = nil
        changeRefused = true
        return true
    }
}
