import PushDomain
import PushMessages

/// Checks and normalizes what apps send to the registration API with `DeviceValidator`'s rules.
/// Errors name the field with its proto path (`device.device_token`).
public enum TokenRegistrationValidator {
    /// The device of a `RegisterTokenRequest`, validated, with its token as lowercase hex and an
    /// unspecified kind made `standard`.
    /// - Throws: `RegistrationError` `.invalidArgument` naming the first bad field.
    public static func normalizedDevice(of request: RegisterTokenRequest) throws(RegistrationError) -> Device {
        guard let device = request.device else { throw .invalid("device", "is required") }
        do {
            return try DeviceValidator.normalized(device)
        } catch {
            throw .invalid(error.field, error.problem)
        }
    }

    /// The token and bundle id of an `UnregisterTokenRequest`, validated.
    /// - Throws: `RegistrationError` `.invalidArgument` naming the bad field.
    public static func normalizedUnregistration(_ request: UnregisterTokenRequest) throws(RegistrationError) -> (token: String, bundleID: String) {
        do {
            let token = try DeviceValidator.normalizedToken(request.deviceToken, field: "device_token")
            try DeviceValidator.checkBundleID(request.bundleID, field: "bundle_id")
            try DeviceValidator.checkIdentifier(request.reason, field: "reason")
            return (token, request.bundleID)
        } catch {
            throw .invalid(error.field, error.problem)
        }
    }
}
