/// Settings of a `PostgresPool`.
public struct PostgresPoolConfiguration: Sendable {
    /// A libpq URL or keyword string, as `PostgresConnection.connect` takes it.
    public var conninfo: String
    /// The password, when it is not in `conninfo` (read from a file such as `PUSH_PG_PASSWORD_FILE`).
    /// Default `nil`.
    public var password: String? = nil
    /// Connections opened by `start()` (default 1). The pool does not reopen them eagerly after a
    /// discard: it opens connections on demand up to `maximumConnections`.
    public var minimumConnections: Int
    /// The most connections open at once, leased, idle or being opened (default 10).
    public var maximumConnections: Int
    /// How long a checkout waits for a free connection before failing with `.poolTimeout`
    /// (default 10 s).
    public var checkoutTimeout: Duration

    /// Creates a configuration; see the properties for the defaults.
    public init(conninfo: String, minimumConnections: Int = 1, maximumConnections: Int = 10, checkoutTimeout: Duration = .seconds(10)) {
        precondition(maximumConnections >= 1, "maximumConnections must be at least 1")
        precondition((0...maximumConnections).contains(minimumConnections), "minimumConnections must be in 0...maximumConnections")
        self.conninfo = conninfo
        self.minimumConnections = minimumConnections
        self.maximumConnections = maximumConnections
        self.checkoutTimeout = checkoutTimeout
    }
}
