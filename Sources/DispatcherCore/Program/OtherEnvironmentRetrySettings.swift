import Foundation
import PushDomain
import ServiceCore

/// Which apps get one try on the other APNs environment after `BadDeviceToken`, and which
/// environments may be tried (docs/semantics.md "The other environment after BadDeviceToken").
public struct OtherEnvironmentRetrySettings: Sendable, Hashable {
    /// Bundle ids that opted in (`PUSH_APNS_OTHER_ENVIRONMENT_RETRY`). Default none: every app keeps
    /// today's rule (deactivate on `BadDeviceToken`).
    public var bundleIDs: Set<String> = []
    /// Environments a try may go to. Default both; the executable leaves out the one whose URL is at
    /// Apple's default while the other's was overridden (`configuredEnvironments(productionURLSet:sandboxURLSet:)`).
    public var configuredEnvironments: Set<APNsEnvironment> = Set(APNsEnvironment.allCases)

    /// No app opted in, both environments configured.
    public init() {}

    /// Whether `bundleID`'s notifications may try the other environment.
    public func optedIn(_ bundleID: String) -> Bool { bundleIDs.contains(bundleID) }

    /// Parses `PUSH_APNS_OTHER_ENVIRONMENT_RETRY`: bundle ids separated by commas (spaces around them
    /// and empty items ignored), each checked with Apple's bundle-id rule.
    /// - Throws: `InvalidFieldError` naming the variable and the bad bundle id.
    public static func parseBundleIDs(_ text: String) throws(InvalidFieldError) -> Set<String> {
        var result = Set<String>()
        for item in text.split(separator: ",") {
            let bundleID = item.trimmingCharacters(in: .whitespaces)
            guard !bundleID.isEmpty else { continue }
            do {
                try DeviceValidator.checkBundleID(bundleID, field: "bundle id")
            } catch {
                throw InvalidFieldError(variable, "\(error.problem) (expected bundle ids separated by commas)")
            }
            result.insert(bundleID)
        }
        return result
    }

    /// The environments a try may go to, given which APNs URL variables the operator set: both when
    /// both or neither were set (Apple's two hosts, or two endpoints of the operator's choice); only
    /// the overridden one when just one was (the other would be Apple's real host beside a proxy or
    /// a simulator: not meant to be reached by a guess).
    public static func configuredEnvironments(productionURLSet: Bool, sandboxURLSet: Bool) -> Set<APNsEnvironment> {
        switch (productionURLSet, sandboxURLSet) {
        case (true, false): [.production]
        case (false, true): [.sandbox]
        default: Set(APNsEnvironment.allCases)
        }
    }

    /// The variable listing the apps that opted in.
    public static let variable = "PUSH_APNS_OTHER_ENVIRONMENT_RETRY"

    /// Reads `PUSH_APNS_OTHER_ENVIRONMENT_RETRY` and which of `PUSH_APNS_PRODUCTION_URL` and
    /// `PUSH_APNS_SANDBOX_URL` are set; records a warning (`EnvironmentConfig.warn`) when apps opted
    /// in but an environment is not configured, since their tokens are then deactivated without the try.
    /// - Throws: `EnvironmentConfig.Error` naming the variable (recorded instead when collecting errors).
    public static func fromEnvironment(_ env: EnvironmentConfig) throws -> OtherEnvironmentRetrySettings {
        var settings = OtherEnvironmentRetrySettings()
        if let text = env.string(variable) {
            do {
                settings.bundleIDs = try parseBundleIDs(text)
            } catch {
                try env.fail(variable, error.problem)
            }
        }
        let productionSet = env.string("PUSH_APNS_PRODUCTION_URL") != nil
        let sandboxSet = env.string("PUSH_APNS_SANDBOX_URL") != nil
        settings.configuredEnvironments = configuredEnvironments(productionURLSet: productionSet, sandboxURLSet: sandboxSet)
        if !settings.bundleIDs.isEmpty {
            for missing in APNsEnvironment.allCases where !settings.configuredEnvironments.contains(missing) {
                let setOne = missing == .sandbox ? "PUSH_APNS_PRODUCTION_URL" : "PUSH_APNS_SANDBOX_URL"
                let unset = missing == .sandbox ? "PUSH_APNS_SANDBOX_URL" : "PUSH_APNS_PRODUCTION_URL"
                env.warn(variable, "\(setOne) is set but \(unset) is not, so \(missing) is not tried: "
                    + "tokens stored as \(missing.other) that \(missing) would accept are deactivated after BadDeviceToken")
            }
        }
        return settings
    }
}
