import PushDomain

extension APNsPushType {
    /// The priority used when a request sets none: 5 for `background` (Apple: "Always 5. Using 10 is an
    /// error"), 10 otherwise. Requests always send the header explicitly.
    public var defaultPriority: APNsPriority { self == .background ? .consideringDevicePower : .immediately }
}
