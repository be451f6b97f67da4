import APNs
import PushDomain

/// Apple's channel-management API (docs/apns-protocol.md §8, Apple's "Sending channel management
/// requests to APNs") as the dispatcher uses it: create, delete and list an app's broadcast channels
/// under the bundle's credential (`APNsSendOptions.credentials`). `APNsClient` is the production
/// implementation; the dispatcher depends only on this.
public protocol ChannelManagement: Sendable {
    /// `POST /1/apps/<bundle id>/channels` with the message-storage policy.
    /// - Returns: Apple's answer: 201 with `apns-channel-id`, or a status with Apple's reason.
    /// - Throws: `APNsError` when no answer arrived within the client's retries.
    func createChannel(bundleID: String, environment: APNsEnvironment, policy: APNsMessageStoragePolicy, options: APNsSendOptions) async throws -> APNsChannelAnswer

    /// `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id: channelID`.
    /// - Returns: Apple's answer: 204, or a status with Apple's reason (`ChannelNotRegistered`, …).
    /// - Throws: `APNsError` when no answer arrived within the client's retries.
    func deleteChannel(bundleID: String, environment: APNsEnvironment, channelID: String, options: APNsSendOptions) async throws -> APNsChannelAnswer

    /// `GET /1/apps/<bundle id>/all-channels`.
    /// - Returns: Apple's answer, `channelIDs` filled on 200.
    /// - Throws: `APNsError` when no answer arrived within the client's retries.
    func listChannels(bundleID: String, environment: APNsEnvironment, options: APNsSendOptions) async throws -> APNsChannelAnswer
}

extension APNsClient: ChannelManagement {}

extension APNsChannelAnswer {
    /// The answer as `ChannelLifecycle` reads it.
    var lifecycleAnswer: ChannelLifecycle.AppleAnswer {
        isSuccess ? .success(channelID: channelID) : .refused(status: status, reason: reason?.rawValue ?? "")
    }
}
