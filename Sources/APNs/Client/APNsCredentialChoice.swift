/// Which credentials one send authenticates with, as a value (docs/apns-client.md "Credentials"):
/// the caller's choice (``APNsSendOptions/credentials``, the dispatcher's credentials registry) first,
/// then the client's map by bundle ID, then by the whole topic (an `mdm` topic), then the client's
/// default. The pool is the one of the chosen credentials and the environment.
public struct APNsCredentialChoice: Sendable {
    /// Credentials per bundle ID (the topic without its push type's suffix; for `mdm`, the topic).
    public let byBundleID: [String: APNsCredentials]
    /// For bundle IDs not in ``byBundleID``; nil refuses them.
    public let defaultCredentials: APNsCredentials?

    /// Creates the choice of a client.
    public init(byBundleID: [String: APNsCredentials], defaultCredentials: APNsCredentials?) {
        self.byBundleID = byBundleID
        self.defaultCredentials = defaultCredentials
    }

    /// The credentials of a send of `topic` (bundle ID `bundleID`) whose caller chose `chosen`.
    /// - Throws: `APNsError` `.missingCredentials` naming the bundle ID when there are none.
    public func credentials(chosen: APNsCredentials?, bundleID: String, topic: String) throws(APNsError) -> APNsCredentials {
        guard let credentials = chosen ?? byBundleID[bundleID] ?? byBundleID[topic] ?? defaultCredentials else {
            throw APNsError(code: .missingCredentials, message: "no APNs credentials for bundle ID \(bundleID)")
        }
        return credentials
    }
}
