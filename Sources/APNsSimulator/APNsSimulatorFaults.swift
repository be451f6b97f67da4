import ProtobufCodec
import PushDomain
import ServiceCore
import APNs
import Foundation

/// Faults the simulator injects on demand, the ones production APNs shows (docs/apns-protocol.md §3 and
/// §6). Every fault is off by default. Set at start (`APNsSimulator.Configuration.faults`, or the
/// `faults` object of the config file) and replaced at runtime (`APNsSimulator.setFaults(_:)` or
/// `PUT /admin/faults`).
///
/// Order of application for each device-push request: the stream counters of its connection
/// (``dropAfterStreams``, ``unansweredShare``, ``hungTokens``) first, then Apple's checks, then for requests that
/// passed every check ``tokenRateLimit``, ``statusShares`` and ``reasonShares``; ``hold`` keeps whatever answer
/// results until it is released, else ``latency`` delays it; ``goAway`` follows the answer. Per-connection timers (``goAway`` `every`,
/// ``maxConcurrentStreamsSchedule``) start at the connection's first request, the moment the
/// simulator first sees the connection.
///
/// JSON form (all keys optional; times in milliseconds; shares are probabilities in 0…1):
/// ```json
/// {"latency": {"distribution": "uniform", "min_ms": 5, "max_ms": 20, "mean_ms": 10, "share": 1.0},
///  "status_shares": {"429": 0.01, "500": 0.01, "503": 0.01},
///  "reason_shares": {"Shutdown": 0.01, "IdleTimeout": 0.01, "ExpiredProviderToken": 0.01},
///  "token_rate_limit": {"max_pushes": 3, "window_ms": 60000},
///  "goaway": {"after_streams": 100, "every_ms": 30000, "reason": "Shutdown", "error_code": 0},
///  "drop_after_streams": 50,
///  "unanswered_share": 0.1,
///  "hung_tokens": {"share": 0.02, "tokens": ["<hex device token>"]},
///  "hold": {"tokens": ["<hex device token>"]},
///  "provider_tokens_expired_through_iat": 1796100000,
///  "max_concurrent_streams": 1000,
///  "max_concurrent_streams_schedule": [{"after_ms": 1000, "value": 10}, {"after_ms": 5000, "value": 1000}]}
/// ```
public struct APNsSimulatorFaults: Sendable, Equatable {
    /// How long answers are held back. Never blocks an event-loop thread: delayed answers are sent
    /// from a timer.
    public struct Latency: Sendable, Equatable {
        /// The shape of the delay distribution.
        public enum Distribution: String, Sendable, Equatable {
            /// Uniform between `minimum` and `maximum`.
            case uniform
            /// `minimum` plus an exponential delay with mean `mean`, capped at `maximum`.
            case exponential
        }
        /// The distribution. JSON `distribution`, default `uniform`.
        public var distribution: Distribution = .uniform
        /// Smallest delay. JSON `min_ms`.
        public var minimum: Duration = .zero
        /// Largest delay. JSON `max_ms`.
        public var maximum: Duration = .zero
        /// Mean of the exponential part. JSON `mean_ms`.
        public var mean: Duration = .zero
        /// Share of answers delayed (0…1). JSON `share`, default 1.
        public var share: Double = 1

        /// Creates a latency fault.
        public init(distribution: Distribution = .uniform, minimum: Duration = .zero, maximum: Duration = .zero, mean: Duration = .zero, share: Double = 1) {
            self.distribution = distribution
            self.minimum = minimum
            self.maximum = maximum
            self.mean = mean
            self.share = share
        }
    }

    /// Per-device-token `429 TooManyRequests` after `maxPushes` pushes to one token within a fixed
    /// window of `window` (Apple: "too many consecutive requests to the same device token").
    public struct TokenRateLimit: Sendable, Equatable {
        /// Pushes allowed per token per window; the next ones get 429. JSON `max_pushes`.
        public var maxPushes: Int
        /// Window length, starting at the token's first push. JSON `window_ms`.
        public var window: Duration

        /// Creates a per-token rate limit.
        public init(maxPushes: Int, window: Duration) {
            self.maxPushes = maxPushes
            self.window = window
        }
    }

    /// Device tokens whose pushes are never answered, every time (a device APNs cannot deliver to
    /// and never answers for, while every other stream of the same connection is answered). Unlike
    /// ``unansweredShare``, which draws per request, a token is either hung or not: chosen by a hash
    /// of its hex (FNV-1a) below ``share``, or listed in ``tokens``.
    public struct HungTokens: Sendable, Equatable {
        /// Share (0…1) of all device tokens that hang, chosen by ``isHung(_:)``'s hash. JSON `share`.
        public var share: Double
        /// Device tokens (lowercase hex) that hang whatever the share. JSON `tokens` (any case).
        public var tokens: Set<String>

        /// Creates a hung-tokens fault.
        public init(share: Double = 0, tokens: Set<String> = []) {
            self.share = share
            self.tokens = Set(tokens.map { $0.lowercased() })
        }

        /// Whether pushes to `tokenHex` (lowercase hex) are never answered: listed, or its FNV-1a
        /// 64-bit hash modulo 1,000,000 is below `share` × 1,000,000 (the same answer every time).
        public func isHung(_ tokenHex: String) -> Bool {
            if tokens.contains(tokenHex) { return true }
            guard share > 0 else { return false }
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in tokenHex.utf8 {
                hash ^= UInt64(byte)
                hash = hash &* 0x100_0000_01b3
            }
            return Double(hash % 1_000_000) < share * 1_000_000
        }
    }

    /// Device tokens whose answers wait until released (`APNsSimulator.releaseHeld(token:)` or
    /// `POST /admin/held/release`), so that a test can have a notification in flight at a moment it
    /// chooses. The request is checked and recorded as any other (its record carries the status it
    /// will get, fault `held`); only the answer waits. A release sends the answer computed on
    /// arrival; an answer whose stream the client reset meanwhile is dropped by the server.
    public struct Hold: Sendable, Equatable {
        /// Device tokens (lowercase hex) whose answers are held. JSON `tokens` (any case).
        public var tokens: Set<String>

        /// Creates a hold fault.
        public init(tokens: Set<String> = []) {
            self.tokens = Set(tokens.map { $0.lowercased() })
        }
    }

    /// GOAWAY sent by the server (RFC 9113 §6.8) with APNs's JSON debug data `{"reason":"…"}`.
    public struct GoAway: Sendable, Equatable {
        /// Send GOAWAY right after answering a connection's N-th request (last-stream-id = that
        /// stream); 0 = off. JSON `after_streams`.
        public var afterStreams: Int = 0
        /// Send GOAWAY this long after the connection's first request; nil = off. JSON `every_ms`.
        public var every: Duration? = nil
        /// The reason in the debug data. JSON `reason`, default `Shutdown` (what APNs sends, aioapns #63).
        public var reason: String = "Shutdown"
        /// The HTTP/2 error code. JSON `error_code`, default 0 (NO_ERROR).
        public var errorCode: UInt32 = 0

        /// Creates a GOAWAY fault.
        public init(afterStreams: Int = 0, every: Duration? = nil, reason: String = "Shutdown", errorCode: UInt32 = 0) {
            self.afterStreams = afterStreams
            self.every = every
            self.reason = reason
            self.errorCode = errorCode
        }
    }

    /// One step of a SETTINGS_MAX_CONCURRENT_STREAMS schedule.
    public struct StreamLimitStep: Sendable, Equatable {
        /// When, after the connection's first request. JSON `after_ms`.
        public var after: Duration
        /// The SETTINGS_MAX_CONCURRENT_STREAMS value announced then. JSON `value`.
        public var value: UInt32

        /// Creates a step.
        public init(after: Duration, value: UInt32) {
            self.after = after
            self.value = value
        }
    }

    /// Answer delays; nil = answer at once.
    public var latency: Latency?
    /// Shares (0…1) of otherwise accepted pushes answered 429 `TooManyRequests`, 500
    /// `InternalServerError` and 503 `ServiceUnavailable`, keyed by status. JSON `status_shares`.
    public var statusShares: [Int: Double] = [:]
    /// Shares (0…1) of otherwise accepted pushes answered with any documented reason and its status
    /// (for example `Shutdown` 503, `IdleTimeout` 400, `ExpiredProviderToken` 403). Together with
    /// ``statusShares`` at most 1. JSON `reason_shares`, keyed by Apple's reason string.
    public var reasonShares: [APNsReason: Double] = [:]
    /// Per-token rate limit; nil = off. JSON `token_rate_limit`.
    public var tokenRateLimit: TokenRateLimit?
    /// GOAWAY faults; nil = off. JSON `goaway`.
    public var goAway: GoAway?
    /// Close the TCP connection without GOAWAY when its N-th request arrives (that request is never
    /// answered); 0 = off. JSON `drop_after_streams`.
    public var dropAfterStreams: Int = 0
    /// Share (0…1) of requests that never get an answer (the stream stays open until the client
    /// resets it or the connection closes). JSON `unanswered_share`.
    public var unansweredShare: Double = 0
    /// Device tokens whose pushes are never answered; nil = off. JSON `hung_tokens`.
    public var hungTokens: HungTokens?
    /// Device tokens whose answers wait until released; nil = off. JSON `hold`.
    public var hold: Hold?
    /// SETTINGS_MAX_CONCURRENT_STREAMS once a connection is trusted (token auth: after its first
    /// successful request; certificate auth: at its first request). New connections start at 1
    /// (docs/apns-protocol.md §6). JSON `max_concurrent_streams`, default 1000.
    public var maxConcurrentStreams: UInt32 = 1000
    /// Later changes of SETTINGS_MAX_CONCURRENT_STREAMS on each connection, by time since its first
    /// request. JSON `max_concurrent_streams_schedule`.
    public var maxConcurrentStreamsSchedule: [StreamLimitStep] = []
    /// Provider tokens (JWT) whose `iat` is at most this (seconds since the epoch) are answered 403
    /// `ExpiredProviderToken`, whatever their age: APNs refusing a token the provider still thinks
    /// young (a provider clock behind Apple's). nil = off. JSON `provider_tokens_expired_through_iat`.
    public var providerTokensExpiredThroughIat: Int64?

    /// No faults.
    public init() {}

    /// True when no answer is ever delayed, refused or withheld by a fault.
    var isQuiet: Bool {
        latency == nil && statusShares.isEmpty && reasonShares.isEmpty && tokenRateLimit == nil && goAway == nil
            && dropAfterStreams == 0 && unansweredShare == 0 && hungTokens == nil && hold == nil && maxConcurrentStreamsSchedule.isEmpty
    }
}

// MARK: JSON

extension APNsSimulatorFaults {
    /// Parses the JSON form shown on the type.
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` naming the key that is malformed or unknown.
    public init(json: [UInt8]) throws(APNsSimulatorError) {
        try self.init(jsonObject: try JSONReader.object(parsing: json, "faults"))
    }

    /// Parses an object read by the project's JSON reader (see the type's documentation).
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` naming the key that is malformed or unknown.

    /// The device tokens of a fault's `tokens` list, as lower-case hex.
    /// - Throws: `APNsSimulatorError` naming `path[index]` for an item that is not a device token.
    private static func deviceTokens(_ items: [JSONValue]?, path: String) throws(APNsSimulatorError) -> Set<String> {
        var tokens: Set<String> = []
        for (index, item) in (items ?? []).enumerated() {
            guard case .string(let text) = item, let token = try? DeviceToken(validating: text) else {
                throw APNsSimulatorError(.invalidConfiguration, "\(path)[\(index)]: expected a device token (hex, 64 to 512 digits)")
            }
            tokens.insert(token.hex)
        }
        return tokens
    }
    public init(jsonObject object: JSONObject) throws(APNsSimulatorError) {
        self.init()
        var reader = JSONReader(object, path: "faults")
        if let latencyObject = try reader.object("latency") {
            var sub = JSONReader(latencyObject, path: "faults.latency")
            var value = Latency()
            if let text = try sub.string("distribution") {
                guard let distribution = Latency.Distribution(rawValue: text) else {
                    throw APNsSimulatorError(.invalidConfiguration, "faults.latency.distribution: expected \"uniform\" or \"exponential\", got \"\(text)\"")
                }
                value.distribution = distribution
            }
            value.minimum = .milliseconds(try sub.int("min_ms", range: 0...3_600_000) ?? 0)
            value.maximum = .milliseconds(try sub.int("max_ms", range: 0...3_600_000) ?? 0)
            value.mean = .milliseconds(try sub.int("mean_ms", range: 0...3_600_000) ?? 0)
            value.share = try sub.share("share") ?? 1
            try sub.finish()
            guard value.maximum >= value.minimum || value.distribution == .exponential else {
                throw APNsSimulatorError(.invalidConfiguration, "faults.latency: max_ms is below min_ms")
            }
            latency = value
        }
        if let shares = try reader.object("status_shares") {
            var total = 0.0
            for member in shares.members {
                let (key, raw) = (member.key, member.value)
                guard let status = Int(key), [429, 500, 503].contains(status) else {
                    throw APNsSimulatorError(.invalidConfiguration, "faults.status_shares: keys are \"429\", \"500\" and \"503\", got \"\(key)\"")
                }
                guard let share = JSONReader.number(raw), share >= 0, share <= 1 else {
                    throw APNsSimulatorError(.invalidConfiguration, "faults.status_shares.\(key): expected a number in 0…1")
                }
                if share > 0 { statusShares[status] = share }
                total += share
            }
            guard total <= 1.000001 else {
                throw APNsSimulatorError(.invalidConfiguration, "faults.status_shares: the shares add up to \(total), more than 1")
            }
        }
        if let shares = try reader.object("reason_shares") {
            for member in shares.members {
                let (key, raw) = (member.key, member.value)
                let reason = APNsReason(rawValue: key)
                guard reason.httpStatus != nil else {
                    throw APNsSimulatorError(.invalidConfiguration, "faults.reason_shares: \"\(key)\" is not a documented APNs reason")
                }
                guard let share = JSONReader.number(raw), share >= 0, share <= 1 else {
                    throw APNsSimulatorError(.invalidConfiguration, "faults.reason_shares.\(key): expected a number in 0…1")
                }
                if share > 0 { reasonShares[reason] = share }
            }
        }
        let total = statusShares.values.reduce(0, +) + reasonShares.values.reduce(0, +)
        guard total <= 1.000001 else {
            throw APNsSimulatorError(.invalidConfiguration, "faults: status_shares and reason_shares add up to \(total), more than 1")
        }
        if let limit = try reader.object("token_rate_limit") {
            var sub = JSONReader(limit, path: "faults.token_rate_limit")
            guard let maxPushes = try sub.int("max_pushes", range: 0...Int(Int32.max)),
                  let window = try sub.int("window_ms", range: 1...86_400_000 * 30) else {
                throw APNsSimulatorError(.invalidConfiguration, "faults.token_rate_limit: max_pushes and window_ms are required")
            }
            try sub.finish()
            tokenRateLimit = TokenRateLimit(maxPushes: maxPushes, window: .milliseconds(window))
        }
        if let goAwayObject = try reader.object("goaway") {
            var sub = JSONReader(goAwayObject, path: "faults.goaway")
            var value = GoAway()
            value.afterStreams = try sub.int("after_streams", range: 0...Int(Int32.max)) ?? 0
            value.every = try sub.int("every_ms", range: 1...86_400_000).map { .milliseconds($0) }
            value.reason = try sub.string("reason") ?? "Shutdown"
            value.errorCode = UInt32(try sub.int("error_code", range: 0...0xD) ?? 0)
            try sub.finish()
            goAway = value
        }
        dropAfterStreams = try reader.int("drop_after_streams", range: 0...Int(Int32.max)) ?? 0
        unansweredShare = try reader.share("unanswered_share") ?? 0
        if let hung = try reader.object("hung_tokens") {
            var sub = JSONReader(hung, path: "faults.hung_tokens")
            let share = try sub.share("share") ?? 0
            let tokens = try Self.deviceTokens(try sub.array("tokens"), path: "faults.hung_tokens.tokens")
            try sub.finish()
            hungTokens = HungTokens(share: share, tokens: tokens)
        }
        if let held = try reader.object("hold") {
            var sub = JSONReader(held, path: "faults.hold")
            let tokens = try Self.deviceTokens(try sub.array("tokens"), path: "faults.hold.tokens")
            try sub.finish()
            hold = Hold(tokens: tokens)
        }
        providerTokensExpiredThroughIat = try reader.int64("provider_tokens_expired_through_iat")
        maxConcurrentStreams = UInt32(try reader.int("max_concurrent_streams", range: 1...Int(Int32.max)) ?? 1000)
        if let steps = try reader.array("max_concurrent_streams_schedule") {
            maxConcurrentStreamsSchedule = try steps.enumerated().map { (index, item) throws(APNsSimulatorError) in
                guard case .object(let step) = item else {
                    throw APNsSimulatorError(.invalidConfiguration, "faults.max_concurrent_streams_schedule[\(index)]: expected an object")
                }
                var sub = JSONReader(step, path: "faults.max_concurrent_streams_schedule[\(index)]")
                guard let after = try sub.int("after_ms", range: 0...86_400_000),
                      let value = try sub.int("value", range: 0...Int(Int32.max)) else {
                    throw APNsSimulatorError(.invalidConfiguration, "faults.max_concurrent_streams_schedule[\(index)]: after_ms and value are required")
                }
                try sub.finish()
                return StreamLimitStep(after: .milliseconds(after), value: UInt32(value))
            }
        }
        try reader.finish()
    }

    /// The JSON form shown on the type (every key, defaults included), keys in order.
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "status_shares": .sortedObject(Dictionary(uniqueKeysWithValues: statusShares.map { (String($0.key), .double($0.value)) })),
            "reason_shares": .sortedObject(Dictionary(uniqueKeysWithValues: reasonShares.map { ($0.key.rawValue, .double($0.value)) })),
            "drop_after_streams": .integer(dropAfterStreams),
            "unanswered_share": .double(unansweredShare),
            "max_concurrent_streams": .integer(maxConcurrentStreams),
            "max_concurrent_streams_schedule": .array(maxConcurrentStreamsSchedule.map {
                .sortedObject(["after_ms": .integer($0.after.wholeMilliseconds), "value": .integer($0.value)])
            }),
        ]
        if let latency {
            object["latency"] = .sortedObject([
                "distribution": .string(latency.distribution.rawValue), "min_ms": .integer(latency.minimum.wholeMilliseconds),
                "max_ms": .integer(latency.maximum.wholeMilliseconds), "mean_ms": .integer(latency.mean.wholeMilliseconds),
                "share": .double(latency.share),
            ])
        }
        if let hungTokens { object["hung_tokens"] = .sortedObject(["share": .double(hungTokens.share), "tokens": .strings(hungTokens.tokens.sorted())]) }
        if let hold { object["hold"] = .sortedObject(["tokens": .strings(hold.tokens.sorted())]) }
        if let providerTokensExpiredThroughIat { object["provider_tokens_expired_through_iat"] = .integer(providerTokensExpiredThroughIat) }
        if let tokenRateLimit {
            object["token_rate_limit"] = .sortedObject(["max_pushes": .integer(tokenRateLimit.maxPushes), "window_ms": .integer(tokenRateLimit.window.wholeMilliseconds)])
        }
        if let goAway {
            var value: [String: JSONValue] = [
                "after_streams": .integer(goAway.afterStreams), "reason": .string(goAway.reason), "error_code": .integer(goAway.errorCode),
            ]
            if let every = goAway.every { value["every_ms"] = .integer(every.wholeMilliseconds) }
            object["goaway"] = .sortedObject(value)
        }
        return .sortedObject(object)
    }
}


/// Reads typed fields from an object parsed by the project's JSON reader (ProtobufCodec's
/// `JSONValue`) and refuses unknown keys, naming the path. `null` reads as absent.
struct JSONReader {
    private let object: JSONObject
    private let path: String
    private var seen: Set<String> = []

    init(_ object: JSONObject, path: String) {
        self.object = object
        self.path = path
    }

    /// Parses `bytes` as one JSON object.
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` naming `what` when it is not JSON or not an object.
    static func object(parsing bytes: [UInt8], _ what: String) throws(APNsSimulatorError) -> JSONObject {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: bytes)
        } catch {
            throw APNsSimulatorError(.invalidConfiguration, "\(what) is not JSON: \(error.message)")
        }
        guard case .object(let object) = value else { throw APNsSimulatorError(.invalidConfiguration, "\(what): expected a JSON object") }
        return object
    }

    /// The value of a JSON number; nil for anything else.
    static func number(_ value: JSONValue) -> Double? {
        guard case .number(let text) = value else { return nil }
        return Double(text)
    }

    private mutating func value(_ key: String) -> JSONValue? {
        seen.insert(key)
        guard let value = object[key], !value.isNull else { return nil }
        return value
    }

    private func fail(_ key: String, _ expected: String) -> APNsSimulatorError {
        APNsSimulatorError(.invalidConfiguration, "\(path).\(key): expected \(expected)")
    }

    mutating func object(_ key: String) throws(APNsSimulatorError) -> JSONObject? {
        guard let raw = value(key) else { return nil }
        guard case .object(let result) = raw else { throw fail(key, "an object") }
        return result
    }

    mutating func array(_ key: String) throws(APNsSimulatorError) -> [JSONValue]? {
        guard let raw = value(key) else { return nil }
        guard case .array(let result) = raw else { throw fail(key, "an array") }
        return result
    }

    mutating func bool(_ key: String) throws(APNsSimulatorError) -> Bool? {
        guard let raw = value(key) else { return nil }
        guard case .bool(let result) = raw else { throw fail(key, "true or false") }
        return result
    }

    mutating func strings(_ key: String) throws(APNsSimulatorError) -> [String]? {
        guard let raw = value(key) else { return nil }
        guard case .array(let items) = raw else { throw fail(key, "an array of strings") }
        return try items.map { item throws(APNsSimulatorError) in
            guard case .string(let text) = item else { throw fail(key, "an array of strings") }
            return text
        }
    }

    mutating func string(_ key: String) throws(APNsSimulatorError) -> String? {
        guard let raw = value(key) else { return nil }
        guard case .string(let result) = raw else { throw fail(key, "a string") }
        return result
    }

    mutating func int(_ key: String, range: ClosedRange<Int>) throws(APNsSimulatorError) -> Int? {
        guard let raw = value(key) else { return nil }
        guard let number = Self.number(raw), number == number.rounded(), number >= Double(range.lowerBound),
              number <= Double(range.upperBound) else {
            throw fail(key, "an integer in \(range.lowerBound)…\(range.upperBound)")
        }
        return Int(number)
    }

    mutating func int64(_ key: String) throws(APNsSimulatorError) -> Int64? {
        guard let raw = value(key) else { return nil }
        if let exact = raw.integerValue { return exact }
        guard let number = Self.number(raw), number == number.rounded(), abs(number) < 9.2e18 else {
            throw fail(key, "an integer")
        }
        return Int64(number)
    }

    mutating func share(_ key: String) throws(APNsSimulatorError) -> Double? {
        guard let raw = value(key) else { return nil }
        guard let number = Self.number(raw), number >= 0, number <= 1 else {
            throw fail(key, "a number in 0…1")
        }
        return number
    }

    /// Throws when the object has a key that was never asked for (a typo would otherwise be ignored).
    func finish() throws(APNsSimulatorError) {
        if let unknown = object.members.map(\.key).sorted().first(where: { !seen.contains($0) }) {
            throw APNsSimulatorError(.invalidConfiguration, "\(path).\(unknown): unknown key")
        }
    }
}
