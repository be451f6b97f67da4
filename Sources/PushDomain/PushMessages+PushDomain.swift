import PushMessages

/// The push.v1 messages' enums (Protos/push/v1/common.proto) as the push domain's types and back.
extension PushType {
    /// The APNs push type; unspecified means alert.
    public var apnsPushType: APNsPushType? {
        switch self {
        case .unspecified, .alert: .alert
        case .background: .background
        case .voip: .voip
        case .complication: .complication
        case .fileprovider: .fileprovider
        case .mdm: .mdm
        case .location: .location
        case .liveactivity: .liveactivity
        case .pushtotalk: .pushtotalk
        case .widgets: .widgets
        case .controls: .controls
        default: nil
        }
    }

    /// The message's push type for an APNs one.
    public init(_ type: APNsPushType) {
        switch type {
        case .alert: self = .alert
        case .background: self = .background
        case .voip: self = .voip
        case .complication: self = .complication
        case .fileprovider: self = .fileprovider
        case .mdm: self = .mdm
        case .location: self = .location
        case .liveactivity: self = .liveactivity
        case .pushtotalk: self = .pushtotalk
        case .widgets: self = .widgets
        case .controls: self = .controls
        }
    }
}

extension Environment {
    /// The APNs environment, nil when unspecified.
    public var apnsEnvironment: APNsEnvironment? {
        switch self {
        case .sandbox: .sandbox
        case .production: .production
        default: nil
        }
    }

    /// The message's environment for an APNs one.
    public init(_ environment: APNsEnvironment) {
        self = environment == .sandbox ? .sandbox : .production
    }

    /// From the token table's `environment` text: `sandbox`, else production.
    public init(storedName: String) {
        self = storedName == "sandbox" ? .sandbox : .production
    }
}

extension TokenKind {
    /// The kind as the token table stores it (`APNsTokenKind`'s raw value); unspecified is standard.
    public var storedName: String? {
        switch self {
        case .unspecified, .standard: APNsTokenKind.standard.rawValue
        case .voip: APNsTokenKind.voip.rawValue
        case .pushToTalk: APNsTokenKind.pushToTalk.rawValue
        case .liveActivity: APNsTokenKind.liveActivity.rawValue
        case .pushToStart: APNsTokenKind.pushToStart.rawValue
        case .location: APNsTokenKind.location.rawValue
        case .widget: APNsTokenKind.widget.rawValue
        case .complication: APNsTokenKind.complication.rawValue
        case .fileProvider: APNsTokenKind.fileProvider.rawValue
        case .mdm: APNsTokenKind.mdm.rawValue
        default: nil
        }
    }
}
