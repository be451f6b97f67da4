/// Which recorded requests `GET /admin/requests` returns, from its query string:
/// `device_token=<hex>` (requests to `/3/device/<hex>`, case-insensitive), `since_ms=<ms>` (received at
/// or after that simulator-clock time), `limit=<n>` (only the newest n that match). Every parameter is
/// optional; without any the whole ring is returned. Oldest first in every case.
///
/// A test that looks for its own token reads a few records instead of the whole ring (tens of
/// thousands of records are megabytes of JSON, seconds for a debug build to write).
public struct RecordQuery: Sendable, Equatable {
    /// Lowercase hex, when given.
    public var deviceToken: String?
    /// ms since the UNIX epoch, simulator clock.
    public var sinceMilliseconds: Int64?
    /// At least 1.
    public var limit: Int?

    public init(deviceToken: String? = nil, sinceMilliseconds: Int64? = nil, limit: Int? = nil) {
        self.deviceToken = deviceToken
        self.sinceMilliseconds = sinceMilliseconds
        self.limit = limit
    }

    /// Parses the part of a request path after `?` (nil or empty: no filter).
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` naming the parameter that is unknown,
    ///   repeated or has a bad value (the admin API answers it with 400).
    public init(query: Substring?) throws(APNsSimulatorError) {
        self.init()
        guard let query, !query.isEmpty else { return }
        var seen = Set<Substring>()
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = parts[0], value = parts.count == 2 ? parts[1] : ""
            guard seen.insert(name).inserted else {
                throw APNsSimulatorError(.invalidConfiguration, "query parameter \(name) is given twice")
            }
            switch name {
            case "device_token":
                guard !value.isEmpty, value.allSatisfy(\.isHexDigit) else {
                    throw APNsSimulatorError(.invalidConfiguration, "query parameter device_token must be hex digits, got \"\(value)\"")
                }
                deviceToken = value.lowercased()
            case "since_ms":
                guard let since = Int64(value), since >= 0 else {
                    throw APNsSimulatorError(.invalidConfiguration, "query parameter since_ms must be ms since the epoch, got \"\(value)\"")
                }
                sinceMilliseconds = since
            case "limit":
                guard let limit = Int(value), limit >= 1 else {
                    throw APNsSimulatorError(.invalidConfiguration, "query parameter limit must be a whole number of at least 1, got \"\(value)\"")
                }
                self.limit = limit
            default:
                throw APNsSimulatorError(
                    .invalidConfiguration, "unknown query parameter \"\(name)\" (expected device_token, since_ms, limit)")
            }
        }
    }

    /// Whether `record` matches the token and time filters.
    public func matches(_ record: APNsSimulatorRecord) -> Bool {
        if let sinceMilliseconds, record.receivedAtMilliseconds < sinceMilliseconds { return false }
        if let deviceToken {
            guard record.path.hasPrefix("/3/device/") else { return false }
            return record.path.dropFirst("/3/device/".count).lowercased() == deviceToken
        }
        return true
    }

    /// The matching records of `records` (oldest first), the newest `limit` of them when set.
    public func apply(to records: [APNsSimulatorRecord]) -> [APNsSimulatorRecord] {
        let matching = records.filter(matches)
        guard let limit, matching.count > limit else { return matching }
        return Array(matching.suffix(limit))
    }
}
