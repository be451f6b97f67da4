import PushMessages

/// The rules a `push.v1.Device` must follow, shared by the registration service (which refuses a
/// bad registration with `INVALID_ARGUMENT`) and the dispatcher (which dead-letters a token event
/// that breaks them, whoever produced it).
public enum DeviceValidator {
    /// Longest accepted bundle id, user id, installation id and reason, in UTF-8 bytes.
    public static let maximumIdentifierBytes = 255
    /// Most device attributes accepted per registration.
    public static let maximumAttributes = 32
    /// Longest attribute key and value, in UTF-8 bytes.
    public static let maximumAttributeKeyBytes = 64
    public static let maximumAttributeValueBytes = 256

    /// `device` validated, with its token as lowercase hex and an unspecified kind made `standard`.
    /// - Parameter prefix: the path of the device in its message (`device`).
    /// - Throws: `InvalidFieldError` naming the first bad field.
    public static func normalized(_ device: Device, prefix: String = "device") throws(InvalidFieldError) -> Device {
        var device = device
        device.deviceToken = try normalizedToken(device.deviceToken, field: "\(prefix).device_token")
        try checkBundleID(device.bundleID, field: "\(prefix).bundle_id")
        switch device.environment {
        case .sandbox, .production: break
        default: throw InvalidFieldError("\(prefix).environment", "must be SANDBOX or PRODUCTION (the token's APNs environment)")
        }
        switch device.kind {
        case .unspecified: device.kind = .standard
        case .unrecognized(let number): throw InvalidFieldError("\(prefix).kind", "unknown token kind \(number)")
        default: break
        }
        try checkUserID(device.userID, field: "\(prefix).user_id")
        try checkIdentifier(device.installationID, field: "\(prefix).installation_id")
        guard device.attributes.count <= maximumAttributes else {
            throw InvalidFieldError("\(prefix).attributes", "\(device.attributes.count) entries; at most \(maximumAttributes)")
        }
        for (key, value) in device.attributes {
            guard !key.isEmpty, key.utf8.count <= maximumAttributeKeyBytes, !hasControlCharacters(key) else {
                throw InvalidFieldError("\(prefix).attributes", "key \"\(key.prefix(80))\" must be 1 to \(maximumAttributeKeyBytes) bytes without control characters")
            }
            guard value.utf8.count <= maximumAttributeValueBytes else {
                throw InvalidFieldError("\(prefix).attributes[\(key)]", "\(value.utf8.count) bytes; at most \(maximumAttributeValueBytes)")
            }
            guard !value.utf8.contains(0) else { throw InvalidFieldError("\(prefix).attributes[\(key)]", "contains a NUL character") }
        }
        return device
    }

    /// A device token as lowercase hex (docs/semantics.md "Device tokens").
    /// - Throws: `InvalidFieldError` for `field` saying what is wrong.
    public static func normalizedToken(_ text: String, field: String) throws(InvalidFieldError) -> String {
        guard !text.isEmpty else { throw InvalidFieldError(field, "is required") }
        do {
            return try DeviceToken(validating: text).hex
        } catch {
            throw InvalidFieldError(field, error.message)
        }
    }

    /// Apple: a bundle id contains only A–Z, a–z, 0–9, hyphens and periods.
    /// - Throws: `InvalidFieldError` for `field`.
    public static func checkBundleID(_ bundleID: String, field: String) throws(InvalidFieldError) {
        guard !bundleID.isEmpty else { throw InvalidFieldError(field, "is required") }
        guard bundleID.utf8.count <= maximumIdentifierBytes else {
            throw InvalidFieldError(field, "\(bundleID.utf8.count) bytes; at most \(maximumIdentifierBytes)")
        }
        for byte in bundleID.utf8 {
            let ok = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
            guard ok else {
                throw InvalidFieldError(field, "\"\(bundleID.prefix(80))\" may contain only letters, digits, hyphens and periods")
            }
        }
    }

    /// The one user-id rule of every method that names a user (RegisterToken's `device.user_id`,
    /// ForgetUser's `user_id`, and the dispatcher's check of `USER_FORGOTTEN` token events): an
    /// identifier (`checkIdentifier`: at most `maximumIdentifierBytes` bytes, no control
    /// characters), and not empty when `required`.
    /// - Throws: `InvalidFieldError` for `field`.
    public static func checkUserID(_ userID: String, field: String, required: Bool = false) throws(InvalidFieldError) {
        if required, userID.isEmpty { throw InvalidFieldError(field, "is required") }
        try checkIdentifier(userID, field: field)
    }

    /// An id chosen by the caller (user id, installation id, request id): at most
    /// `maximumIdentifierBytes` bytes and no control characters (a NUL would be cut by PostgreSQL,
    /// so `"alice\u{0}evil"` must never pass for `"alice"`).
    /// - Throws: `InvalidFieldError` for `field`.
    public static func checkIdentifier(_ value: String, field: String) throws(InvalidFieldError) {
        guard value.utf8.count <= maximumIdentifierBytes else {
            throw InvalidFieldError(field, "\(value.utf8.count) bytes; at most \(maximumIdentifierBytes)")
        }
        guard !hasControlCharacters(value) else { throw InvalidFieldError(field, "contains a control character") }
    }

    static func hasControlCharacters(_ value: String) -> Bool {
        value.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}
