import ProtobufCodec
/// An APNs error response body, `{"reason":"<string>"}` plus, for 410 only, `"timestamp":<ms>`
/// (docs/apns-protocol.md §3). GOAWAY debug data carries the same JSON.
public struct APNsErrorResponse: Hashable, Sendable {
    /// The reason, or `nil` when the body is empty, not JSON, or has no string `reason`.
    public let reason: APNsReason?
    /// For 410: when APNs confirmed the token was no longer valid for the topic, in **milliseconds**
    /// since the epoch; `nil` when absent or not a number. A fractional value is rounded down.
    public let timestampMilliseconds: Int64?

    /// Creates a response body value.
    public init(reason: APNsReason?, timestampMilliseconds: Int64? = nil) {
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
    }

    /// Parses `body` robustly: never throws and never traps; unknown reasons become `.unknown`.
    public init(parsing body: [UInt8]) {
        guard case .object(let object)? = try? JSONValue(parsing: body) else {
            self.init(reason: nil)
            return
        }
        var reason: APNsReason?
        if case .string(let text)? = object["reason"], !text.isEmpty { reason = APNsReason(rawValue: text) }
        var timestamp: Int64?
        if let value = object["timestamp"] {
            if let integer = value.integerValue {
                timestamp = integer
            } else if case .number(let text) = value, let double = Double(text), double.isFinite,
                      abs(double) < 9.2e18 {
                timestamp = Int64(double.rounded(.down))
            }
        }
        self.init(reason: reason, timestampMilliseconds: timestamp)
    }

    /// Serializes as APNs does: `{"reason":"…"}` and `"timestamp"` when set. For the simulator.
    public var body: [UInt8] {
        var text = "{\"reason\":" + JSONValue.quote(reason?.rawValue ?? "")
        if let timestampMilliseconds { text += ",\"timestamp\":\(timestampMilliseconds)" }
        return Array((text + "}").utf8)
    }
}
