import PushMessages

extension ChannelCommand {
    /// The longest channel name, in characters (`ChannelCommand.name`).
    public static let maximumNameLength = 128

    /// The record key of a channel's commands and events (docs/contracts.md "Broadcast channels"):
    /// `<bundle_id>/<environment>/<name>`, the environment `production` or `sandbox`
    /// (`com.example.scores/production/match-8812`).
    public static func recordKey(bundleID: String, environment: Environment, name: String) -> String {
        "\(bundleID)/\(environment == .sandbox ? "sandbox" : "production")/\(name)"
    }

    /// This command's record key (`recordKey(bundleID:environment:name:)`).
    public var recordKey: String { Self.recordKey(bundleID: bundleID, environment: environment, name: name) }

    /// Checks a channel name: 1 to 128 characters, each a letter, a digit or one of "._-:".
    /// - Throws: `InvalidFieldError` for `field`.
    public static func checkName(_ name: String, field: String = "name") throws(InvalidFieldError) {
        guard !name.isEmpty else { throw InvalidFieldError(field, "is required (1 to \(maximumNameLength) characters)") }
        guard name.utf8.count <= maximumNameLength else {
            throw InvalidFieldError(field, "\(name.utf8.count) characters; at most \(maximumNameLength)")
        }
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: ":"):
                continue
            default:
                throw InvalidFieldError(field, "\"\(name.prefix(80))\" may contain only letters, digits and \"._-:\"")
            }
        }
    }
}
