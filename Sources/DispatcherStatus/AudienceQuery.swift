import Postgres
import PushDomain
import PushMessages

/// An app audience (`SendRequest.audience`) made ready for keyset paging over `device_tokens`: the
/// bundle id, the environment (the audience's, else the notification's, else both), the token kind
/// the push type needs, and the optional `AudienceFilter` conditions (docs/campaigns.md "Audience
/// filter"). Pure: `count()` (here, for `pushctl send`) and the dispatcher's `page(after:limit:)`
/// compile it to one parameterized statement, `matches` evaluates the same conditions in Swift.
public struct AudienceQuery: Sendable, Equatable {
    public var bundleID: String
    /// Nil: both environments.
    public var environment: APNsEnvironment?
    /// `APNsTokenKind` raw value the push type needs (`voip` for VoIP pushes, …).
    public var tokenKind: String
    /// `attributes->>'locale'` is one of these; empty: any.
    public var locales: [String] = []
    /// `attributes->>'model'` is one of these; empty: any.
    public var models: [String] = []
    public var minAppVersion: DottedVersion?
    public var belowAppVersion: DottedVersion?
    public var minOSVersion: DottedVersion?
    public var belowOSVersion: DottedVersion?
    /// `registered_at_ms >=` this; 0: any.
    public var registeredSinceMs: Int64 = 0

    public init(bundleID: String, environment: APNsEnvironment?, tokenKind: String) {
        self.bundleID = bundleID
        self.environment = environment
        self.tokenKind = tokenKind
    }

    /// The audience of a request whose target is `audience`.
    /// The token kind is the one the notification's push type needs (`APNsPushType.tokenKind(forPayload:)`).
    /// - Throws: `InvalidFieldError` naming the bad field (a bundle id, a version that is not dotted
    ///   digits, an empty list entry, an unknown environment).
    public init(_ request: SendRequest) throws(InvalidFieldError) {
        guard case .audience(let audience)? = request.target, let notification = request.notification else {
            throw .init("audience", "is required")
        }
        let bundleID = audience.bundleID.isEmpty ? notification.bundleID : audience.bundleID
        guard bundleID == notification.bundleID else {
            throw .init("audience.bundle_id", "\"\(audience.bundleID)\" differs from notification.bundle_id \"\(notification.bundleID)\"")
        }
        if case .unrecognized = audience.environment { throw .init("audience.environment", "unknown environment") }
        let kind = (notification.pushType.apnsPushType ?? .alert).tokenKind(forPayload: Array(notification.payload.utf8)).rawValue
        self.init(bundleID: bundleID, environment: audience.environment.apnsEnvironment ?? notification.environment.apnsEnvironment,
                  tokenKind: kind)
        guard let filter = audience.filter else { return }
        func list(_ values: [String], _ field: String) throws(InvalidFieldError) -> [String] {
            if let index = values.firstIndex(where: { $0.isEmpty }) { throw .init("audience.filter.\(field)[\(index)]", "is empty") }
            return values
        }
        func version(_ text: String, _ field: String) throws(InvalidFieldError) -> DottedVersion? {
            guard !text.isEmpty else { return nil }
            guard let version = DottedVersion(text) else {
                throw .init("audience.filter.\(field)", "\"\(text)\" is not a dotted version (digits separated by dots, e.g. 17.4.1)")
            }
            return version
        }
        locales = try list(filter.locales, "locales")
        models = try list(filter.models, "models")
        minAppVersion = try version(filter.minAppVersion, "min_app_version")
        belowAppVersion = try version(filter.belowAppVersion, "below_app_version")
        minOSVersion = try version(filter.minOsVersion, "min_os_version")
        belowOSVersion = try version(filter.belowOsVersion, "below_os_version")
        guard filter.registeredSinceMs >= 0 else { throw .init("audience.filter.registered_since_ms", "must not be negative") }
        registeredSinceMs = filter.registeredSinceMs
    }

    /// The statement counting the whole audience (column `n`), with the conditions of `page`
    /// (`pushctl send` prints it before sending).
    public func count() -> (sql: String, parameters: [PostgresValue?]) {
        let (conditions, parameters) = conditions(after: nil)
        return ("SELECT count(*) AS n FROM device_tokens WHERE \(conditions.joined(separator: " AND "))", parameters)
    }

    /// The `WHERE` conditions of `count` and `page` and their parameters (`$1`… in order), `device_token > cursor`
    /// among them.
    package func conditions(after cursor: String?) -> (conditions: [String], parameters: [PostgresValue?]) {
        var parameters: [PostgresValue?] = [.string(bundleID), .string(tokenKind), .string(cursor ?? "")]
        var conditions = ["status = 'active'", "bundle_id = $1", "token_kind = $2", "device_token > $3"]
        func add(_ condition: (String) -> String, _ value: PostgresValue) {
            parameters.append(value)
            conditions.append(condition("$\(parameters.count)"))
        }
        if let environment { add({ "environment = \($0)" }, .string(environment.rawValue)) }
        if !locales.isEmpty { add({ "attributes->>'locale' = ANY(\($0)::text[])" }, .textArray(locales)) }
        if !models.isEmpty { add({ "attributes->>'model' = ANY(\($0)::text[])" }, .textArray(models)) }
        if let v = minAppVersion { add({ "push_version_tuple(attributes->>'app_version') >= \($0)::int[]" }, .int32Array(v.int32Components)) }
        if let v = belowAppVersion { add({ "push_version_tuple(attributes->>'app_version') < \($0)::int[]" }, .int32Array(v.int32Components)) }
        if let v = minOSVersion { add({ "push_version_tuple(attributes->>'os_version') >= \($0)::int[]" }, .int32Array(v.int32Components)) }
        if let v = belowOSVersion { add({ "push_version_tuple(attributes->>'os_version') < \($0)::int[]" }, .int32Array(v.int32Components)) }
        if registeredSinceMs > 0 { add({ "registered_at_ms >= \($0)" }, .int64(registeredSinceMs)) }
        return (conditions, parameters)
    }

    /// Whether a token row belongs to the audience, evaluated in Swift by the same rules as `page`.
    /// - Parameters: the row's columns; `attributes` as registration stored them.
    public func matches(bundleID: String, environment: APNsEnvironment, tokenKind: String, isActive: Bool,
                        attributes: [String: String], registeredAtMs: Int64?) -> Bool {
        guard isActive, bundleID == self.bundleID, tokenKind == self.tokenKind else { return false }
        if let wanted = self.environment, wanted != environment { return false }
        if !locales.isEmpty { guard let locale = attributes["locale"], locales.contains(locale) else { return false } }
        if !models.isEmpty { guard let model = attributes["model"], models.contains(model) else { return false } }
        let app = attributes["app_version"].flatMap(DottedVersion.init)
        let os = attributes["os_version"].flatMap(DottedVersion.init)
        if let bound = minAppVersion { guard let app, app >= bound else { return false } }
        if let bound = belowAppVersion { guard let app, app < bound else { return false } }
        if let bound = minOSVersion { guard let os, os >= bound else { return false } }
        if let bound = belowOSVersion { guard let os, os < bound else { return false } }
        if registeredSinceMs > 0 { guard let registeredAtMs, registeredAtMs >= registeredSinceMs else { return false } }
        return true
    }
}
