/// A campaign setting that cannot be used, naming the variable.
public struct CampaignConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
