import APNs
import PushMessages

/// Checks and normalizes what apps send to the registration API. Errors name the field with its
/// proto path (`device.device_token`) so that a client developer sees at once what to fix.
public enum TokenRegistrationValidator {
    /// Longest accepted bundle id, user id and installation id, in UTF-8 bytes.
    public static let maximumIdentifierBytes = 255
    /// Most device attributes accepted per registration.
    public static let maximumAttributes = 32
    /// Longest attribute key and value, in UTF-8 bytes.
    public static let maximumAttributeKeyBytes = 64
    public static let maximumAttributeValueBytes = 256

    /// The device of a `RegisterTokenRequest`, validated, with its token as lowercase hex and an
    /// unspecified kind made `standard`.
    /// - Throws: `RegistrationError` `.invalidArgument` naming the first bad field.
    public static func normalizedDevice(of request: RegisterTokenRequest) throws(RegistrationError) -> Device {
        guard var device = request.device else { throw .invalid("device", "is required") }
        device.deviceToken = try normalizedToken(device.deviceToken, field: "device.device_token")
        try checkBundleID(device.bundleID, field: "device.bundle_id")
        switch device.environment {
        case .sandbox, .production: break
        default: throw .invalid("device.environment", "must be SANDBOX or PRODUCTION (the token's APNs environment)")
        }
        switch device.kind {
        case .unspecified: device.kind = .standard
        case .unrecognized(let number): throw .invalid("device.kind", "unknown token kind \(number)")
        default: break
        }
        try checkIdentifier(device.userID, field: "device.user_id")
        try checkIdentifier(device.installationID, field: "device.installation_id")
        guard device.attributes.count <= maximumAttributes else {
            throw .invalid("device.attributes", "\(device.attributes.count) entries; at most \(maximumAttributes)")
        }
        for (key, value) in device.attributes {
            guard !key.isEmpty, key.utf8.count <= maximumAttributeKeyBytes else {
                throw .invalid("device.attributes", "key \"\(key.prefix(80))\" must be 1 to \(maximumAttributeKeyBytes) bytes")
            }
            guard value.utf8.count <= maximumAttributeValueBytes else {
                throw .invalid("device.attributes[\(key)]", "\(value.utf8.count) bytes; at most \(maximumAttributeValueBytes)")
            }
        }
        return device
    }

    /// The token and bundle id of an `UnregisterTokenRequest`, validated.
    /// - Throws: `RegistrationError` `.invalidArgument` naming the bad field.
    public static func normalizedUnregistration(_ request: UnregisterTokenRequest) throws(RegistrationError) -> (token: String, bundleID: String) {
        let token = try normalizedToken(request.deviceToken, field: "device_token")
        try checkBundleID(request.bundleID, field: "bundle_id")
        guard request.reason.utf8.count <= maximumIdentifierBytes else {
            throw .invalid("reason", "\(request.reason.utf8.count) bytes; at most \(maximumIdentifierBytes)")
        }
        return (token, request.bundleID)
    }

    static func normalizedToken(_ text: String, field: String) throws(RegistrationError) -> String {
        guard !text.isEmpty else { throw .invalid(field, "is required") }
        do {
            return try DeviceToken(validating: text).hex
        } catch {
            throw .invalid(field, error.message)
        }
    }

    /// Apple: a bundle id contains only A–Z, a–z, 0–9, hyphens and periods.
    static func checkBundleID(_ bundleID: String, field: String) throws(RegistrationError) {
        guard !bundleID.isEmpty else { throw .invalid(field, "is required") }
        guard bundleID.utf8.count <= maximumIdentifierBytes else {
            throw .invalid(field, "\(bundleID.utf8.count) bytes; at most \(maximumIdentifierBytes)")
        }
        for byte in bundleID.utf8 {
            let ok = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
            guard ok else {
                throw .invalid(field, "\"\(bundleID.prefix(80))\" may contain only letters, digits, hyphens and periods")
            }
        }
    }

    static func checkIdentifier(_ value: String, field: String) throws(RegistrationError) {
        guard value.utf8.count <= maximumIdentifierBytes else {
            throw .invalid(field, "\(value.utf8.count) bytes; at most \(maximumIdentifierBytes)")
        }
    }
}
