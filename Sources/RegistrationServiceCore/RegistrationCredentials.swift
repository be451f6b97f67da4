import ES256
import ProtobufCodec

/// What the key file (`PUSH_AUTH_KEYS_FILE`, or the same JSON in `PUSH_AUTH_KEYS`) holds: API keys by
/// id and registration-JWT keys by `kid`. Format (docs/registration-auth.md):
///
/// ```json
/// {"api_keys": [{"id": "backend-1", "sha256": "<64 hex>", "bundle_ids": ["com.example.app"],
///                "operations": ["register", "unregister"], "rate_per_second": 500, "burst": 1000}],
///  "registration_jwt_keys": [{"kid": "app-2026", "bundle_id": "com.example.app", "alg": "ES256",
///                             "public_key_pem": "-----BEGIN PUBLIC KEY-----…",
///                             "rate_per_second": 1000, "subject_rate_per_second": 0.1, "subject_burst": 10},
///                            {"kid": "app-hs", "bundle_id": "com.example.app", "alg": "HS256",
///                             "secret": "<base64url, at least 32 bytes>"}]}
/// ```
///
/// `bundle_ids: ["*"]` allows every bundle id. `rate_per_second` and `burst` (per API key, per JWT
/// `kid`) and `subject_rate_per_second` and `subject_burst` (per JWT subject) are optional (the
/// service's defaults apply) and bounded (`ratePerSecondRange`, `burstRange`). Several keys may be valid at once (rotation: add the new one, move the
/// callers, remove the old one).
public struct RegistrationCredentials: Sendable {
    /// One API key's entry.
    public struct APIKeyEntry: Sendable {
        /// The key id (the `<id>` of `pk_<id>_<secret>`).
        public var id: String
        /// SHA-256 of the whole key text.
        public var sha256: [UInt8]
        /// Allowed bundle ids; nil allows all (`"*"`).
        public var bundleIDs: Set<String>?
        /// Allowed operations.
        public var operations: Set<RegistrationOperation>
        /// Sustained items per second (token-bucket refill; a batch call takes one per item), within
        /// `ratePerSecondRange`; nil: the service's default.
        public var ratePerSecond: Double?
        /// Bucket size (items allowed in a burst), within `burstRange`; nil: the service's default.
        public var burst: Double?

        /// Whether the key may act on `bundleID`.
        public func allows(bundleID: String) -> Bool { bundleIDs?.contains(bundleID) ?? true }
    }

    /// A key that verifies user-bound registration JWTs of one bundle id; its algorithm is pinned.
    public struct JWTKey: Sendable {
        /// How tokens signed for this `kid` are verified.
        public enum Verification: Sendable {
            /// ES256 with this P-256 public key.
            case es256(ES256PublicKey)
            /// HS256 with this shared secret.
            case hs256([UInt8])

            /// The JWS `alg` this key accepts.
            public var algorithm: String {
                switch self {
                case .es256: "ES256"
                case .hs256: "HS256"
                }
            }
        }

        /// The `kid` tokens name in their header.
        public var keyID: String
        /// The only bundle id these tokens may register.
        public var bundleID: String
        /// The pinned algorithm and its key.
        public var verification: Verification
        /// Registrations per second of all this `kid`'s tokens together (`rate_per_second`); nil:
        /// the service's default (`PUSH_AUTH_RATE_PER_SECOND`).
        public var ratePerSecond: Double? = nil
        /// The `kid`'s burst (`burst`); nil: the service's default.
        public var burst: Double? = nil
        /// Registrations per second of one subject (`sub`, one user) (`subject_rate_per_second`);
        /// nil: the service's default (0.1).
        public var subjectRatePerSecond: Double? = nil
        /// One subject's burst (`subject_burst`); nil: the service's default (10).
        public var subjectBurst: Double? = nil
    }

    /// API keys by id.
    public var apiKeys: [String: APIKeyEntry] = [:]
    /// JWT keys by `kid`.
    public var jwtKeys: [String: JWTKey] = [:]

    /// No keys: every call is refused.
    public init() {}

    /// Parses the key file's JSON.
    /// - Throws: `RegistrationCredentials.FormatError` naming the entry and field that is wrong.
    public init(json: [UInt8]) throws(FormatError) {
        let document: JSONValue
        do {
            document = try JSONValue(parsing: json)
        } catch {
            throw FormatError("the key file is not JSON: \(error)")
        }
        guard case .object(let root) = document else { throw FormatError("the key file must be a JSON object") }
        for member in root.members {
            switch member.key {
            case "api_keys":
                guard case .array(let entries) = member.value else { throw FormatError("api_keys must be an array") }
                for (index, entry) in entries.enumerated() {
                    let key = try Self.apiKey(entry, at: "api_keys[\(index)]")
                    guard apiKeys[key.id] == nil else { throw FormatError("api_keys[\(index)].id: \(key.id) appears twice") }
                    apiKeys[key.id] = key
                }
            case "registration_jwt_keys":
                guard case .array(let entries) = member.value else { throw FormatError("registration_jwt_keys must be an array") }
                for (index, entry) in entries.enumerated() {
                    let key = try Self.jwtKey(entry, at: "registration_jwt_keys[\(index)]")
                    guard jwtKeys[key.keyID] == nil else { throw FormatError("registration_jwt_keys[\(index)].kid: \(key.keyID) appears twice") }
                    jwtKeys[key.keyID] = key
                }
            default:
                throw FormatError("unknown member \(member.key) (expected api_keys, registration_jwt_keys)")
            }
        }
    }

    /// A key file that cannot be used; the message names the entry and field, never a secret.
    public struct FormatError: Error, Sendable, CustomStringConvertible {
        /// What is wrong, naming the entry and field.
        public let description: String
        init(_ description: String) { self.description = description }
    }

    private static func fields(_ value: JSONValue, at path: String) throws(FormatError) -> [String: JSONValue] {
        guard case .object(let object) = value else { throw FormatError("\(path) must be an object") }
        var fields: [String: JSONValue] = [:]
        for member in object.members { fields[member.key] = member.value }
        return fields
    }

    private static func string(_ fields: [String: JSONValue], _ name: String, at path: String) throws(FormatError) -> String {
        guard case .string(let value)? = fields[name], !value.isEmpty else { throw FormatError("\(path).\(name) is required (a non-empty string)") }
        return value
    }

    private static func strings(_ fields: [String: JSONValue], _ name: String, at path: String) throws(FormatError) -> [String] {
        guard case .array(let values)? = fields[name], !values.isEmpty else { throw FormatError("\(path).\(name) is required (a non-empty array of strings)") }
        var result: [String] = []
        for value in values {
            guard case .string(let text) = value, !text.isEmpty else { throw FormatError("\(path).\(name) must hold non-empty strings") }
            result.append(text)
        }
        return result
    }

    /// The range `rate_per_second` must fall in: from one call in 1,000 seconds to 10 million a
    /// second (the range of `PUSH_AUTH_RATE_PER_SECOND`). Outside it the bucket's arithmetic is
    /// meaningless (1e-300 a second would ask a caller to retry in 1e300 seconds).
    public static let ratePerSecondRange: ClosedRange<Double> = 0.001...10_000_000
    /// The range `burst` must fall in (the range of `PUSH_AUTH_RATE_BURST`).
    public static let burstRange: ClosedRange<Double> = 1...10_000_000

    /// An optional number within `range`; NaN, ±infinity (`1e999`), non-numbers and values outside
    /// the range are refused naming the entry, the key and the field.
    private static func number(
        _ fields: [String: JSONValue], _ name: String, in range: ClosedRange<Double>, at path: String, key: String
    ) throws(FormatError) -> Double? {
        guard let value = fields[name] else { return nil }
        let shown: String
        if case .number(let text) = value {
            if let number = Double(text), number.isFinite, range.contains(number) { return number }
            shown = text
        } else {
            shown = "a non-number"
        }
        throw FormatError("\(path).\(name) (\(key)): must be a number from \(text(range.lowerBound)) to \(text(range.upperBound)); got \(shown)")
    }

    private static func text(_ bound: Double) -> String { bound == bound.rounded() ? String(Int64(bound)) : "\(bound)" }

    private static func apiKey(_ value: JSONValue, at path: String) throws(FormatError) -> APIKeyEntry {
        let fields = try fields(value, at: path)
        let id = try string(fields, "id", at: path)
        guard APIKey.isValidID(id[...]) else { throw FormatError("\(path).id: 1 to 64 of a-z, 0-9 and -") }
        let hex = try string(fields, "sha256", at: path)
        guard let digest = hexBytes(hex), digest.count == 32 else { throw FormatError("\(path).sha256: 64 hex characters (SHA-256 of the key)") }
        let bundles = try strings(fields, "bundle_ids", at: path)
        var operations = Set<RegistrationOperation>()
        for name in try strings(fields, "operations", at: path) {
            guard let operation = RegistrationOperation(rawValue: name) else {
                throw FormatError("\(path).operations: unknown operation \(name) (register, unregister, admin)")
            }
            operations.insert(operation)
        }
        return APIKeyEntry(
            id: id, sha256: digest, bundleIDs: bundles.contains("*") ? nil : Set(bundles), operations: operations,
            ratePerSecond: try number(fields, "rate_per_second", in: ratePerSecondRange, at: path, key: "API key \(id)"),
            burst: try number(fields, "burst", in: burstRange, at: path, key: "API key \(id)"))
    }

    private static func jwtKey(_ value: JSONValue, at path: String) throws(FormatError) -> JWTKey {
        let fields = try fields(value, at: path)
        let keyID = try string(fields, "kid", at: path)
        let bundleID = try string(fields, "bundle_id", at: path)
        let verification: JWTKey.Verification
        switch try string(fields, "alg", at: path) {
        case "ES256":
            let pem = try string(fields, "public_key_pem", at: path)
            do throws(ES256Error) {
                verification = .es256(try ES256PublicKey(pem: pem))
            } catch {
                throw FormatError("\(path).public_key_pem: \(error.message)")
            }
        case "HS256":
            guard let secret = Base64.decode(Array(try string(fields, "secret", at: path).utf8), alphabet: .url), secret.count >= 32 else {
                throw FormatError("\(path).secret: base64url of at least 32 bytes (RFC 7518 §3.2)")
            }
            verification = .hs256(secret)
        case let other:
            throw FormatError("\(path).alg: \(other) is not supported (ES256 or HS256)")
        }
        let name = "kid \(keyID)"
        return JWTKey(
            keyID: keyID, bundleID: bundleID, verification: verification,
            ratePerSecond: try number(fields, "rate_per_second", in: ratePerSecondRange, at: path, key: name),
            burst: try number(fields, "burst", in: burstRange, at: path, key: name),
            subjectRatePerSecond: try number(fields, "subject_rate_per_second", in: ratePerSecondRange, at: path, key: name),
            subjectBurst: try number(fields, "subject_burst", in: burstRange, at: path, key: name))
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case 0x30...0x39: digit - 0x30
        case 0x61...0x66: digit - 0x61 + 10
        case 0x41...0x46: digit - 0x41 + 10
        default: nil
        }
    }
}
