import APNs
import PushDomain

/// Apple's channel-management API (docs/apns-protocol.md §8, Apple's "Sending channel management
/// requests to APNs") as the dispatcher uses it: create, delete and list an app's broadcast channels
/// under the bundle's credential. `APNsClient` is the production implementation; the dispatcher
/// depends only on this.
public protocol ChannelManagement: Sendable {
    /// `POST /1/apps/<bundle id>/channels` with `message-storage-policy` (0 or 1) and
    /// `push-type: LiveActivity`.
    /// - Parameter credentials: the key to sign with (nil: the client's own).
    /// - Returns: Apple's answer: 201 with `apns-channel-id`, or a status with Apple's reason.
    /// - Throws: `APNsError` when no answer arrived within the client's retries.
    func createChannel(bundleID: String, environment: APNsEnvironment, storagePolicy: Int, credentials: APNsCredentials?) async throws -> ChannelManagementAnswer

    /// `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id: channelID`.
    /// - Returns: Apple's answer: 204, or a status with Apple's reason (`ChannelNotRegistered`, …).
    /// - Throws: `APNsError` when no answer arrived within the client's retries.
    func deleteChannel(bundleID: String, environment: APNsEnvironment, channelID: String, credentials: APNsCredentials?) async throws -> ChannelManagementAnswer

    /// `GET /1/apps/<bundle id>/all-channels`.
    /// - Returns: Apple's answer with `channelIDs` filled on 200.
    /// - Throws: `APNsError` when no answer arrived within the client's retries.
    func listChannels(bundleID: String, environment: APNsEnvironment, credentials: APNsCredentials?) async throws -> ChannelManagementAnswer
}

/// One answer of Apple's channel-management API.
public struct ChannelManagementAnswer: Sendable, Equatable {
    /// HTTP `:status`.
    public var status: Int
    /// Apple's reason string of a failure (`CannotCreateChannelConfig`, …); nil on success.
    public var reason: String?
    /// The `apns-channel-id` header of a created channel.
    public var channelID: String?
    /// The ids `all-channels` listed.
    public var channelIDs: [String]

    /// - Parameters: see the fields.
    public init(status: Int, reason: String? = nil, channelID: String? = nil, channelIDs: [String] = []) {
        self.status = status
        self.reason = reason
        self.channelID = channelID
        self.channelIDs = channelIDs
    }

    /// Whether Apple accepted the request (2xx).
    public var isSuccess: Bool { (200..<300).contains(status) }

    /// The answer as `ChannelLifecycle` reads it.
    public var lifecycleAnswer: ChannelLifecycle.AppleAnswer {
        isSuccess ? .success(channelID: channelID) : .refused(status: status, reason: reason ?? "")
    }
}
