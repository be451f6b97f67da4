/// The `apns-expiration` header, with its three distinct meanings (docs/apns-protocol.md §2 and §10).
public enum APNsExpiration: Hashable, Sendable {
    /// No header: APNs's storage policy applies (stored and retried for at most 30 days).
    case omitted
    /// `0`: one delivery attempt, never stored. Not "never expires".
    case immediately
    /// A UNIX time in seconds since the epoch (UTC): stored and retried until then (best effort).
    case at(secondsSinceEpoch: Int64)

    /// The header value: `nil` for `.omitted`, `"0"`, or the decimal seconds.
    public var headerValue: String? {
        switch self {
        case .omitted: nil
        case .immediately: "0"
        case .at(let seconds): String(seconds)
        }
    }

    /// Parses a header value as APNs would: decimal digits only.
    /// - Parameter headerValue: the header's value, or `nil` when the header is absent.
    /// - Throws: `APNsError` `.invalidRequest` with reason `BadExpirationDate` when it is not a
    ///   non-negative decimal integer.
    public init(headerValue: String?) throws(APNsError) {
        guard let headerValue else { self = .omitted; return }
        guard !headerValue.isEmpty, headerValue.utf8.count <= 18,
              headerValue.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let seconds = Int64(headerValue)
        else { throw .rejected(.badExpirationDate, "apns-expiration \"\(headerValue)\" is not a decimal number of seconds since the epoch") }
        self = seconds == 0 ? .immediately : .at(secondsSinceEpoch: seconds)
    }
}
