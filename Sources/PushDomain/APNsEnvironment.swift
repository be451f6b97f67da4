/// An APNs environment; tokens belong to one (docs/apns-protocol.md §1 and §9).
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Development builds: `api.sandbox.push.apple.com`.
    case sandbox
    /// App Store, TestFlight and enterprise builds: `api.push.apple.com`.
    case production

    /// The device-push host.
    public var host: String {
        switch self {
        case .sandbox: "api.sandbox.push.apple.com"
        case .production: "api.push.apple.com"
        }
    }

    /// The standard port, 443 (2197 is Apple's alternative for firewalls).
    public var port: Int { 443 }

    /// The other environment, for the opt-in retry after `BadDeviceToken`.
    public var other: APNsEnvironment { self == .sandbox ? .production : .sandbox }

    /// `sandbox` or `production`.
    public var description: String { rawValue }
}
