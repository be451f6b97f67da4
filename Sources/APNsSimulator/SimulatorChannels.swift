import APNs
import Foundation
import HTTP2
import ProtobufCodec
import PushDomain

/// Apple's broadcast channels as the simulator keeps them (docs/apns-protocol.md §8): channels per
/// (environment, bundle ID) with their message-storage policy, at most `limit` per app and
/// environment, and a subscriber count per channel set through the admin API, so that a broadcast's
/// fan-out (the devices it reaches) is countable. A value type behind `SimulatorState`'s lock; the
/// request checks are pure functions of it.
struct SimulatorChannels: Sendable {
    /// A channel's message-storage policy: 0 stores no message (only `apns-expiration: 0`), 1 keeps
    /// the most recent one.
    struct Channel: Sendable {
        var id: String
        var bundleID: String
        var environment: APNsEnvironment
        var storagePolicy: Int
        var createdAtMilliseconds: Int64
        /// Devices subscribed (admin API); what one broadcast reaches.
        var subscribers = 0
        /// Broadcasts accepted for it.
        var broadcasts = 0
    }

    struct AppKey: Hashable, Sendable {
        var environment: APNsEnvironment
        var bundleID: String
    }

    /// Channels by app, then by id.
    private(set) var channels: [AppKey: [String: Channel]] = [:]
    /// Channels one app may have in one environment (Apple: 10,000).
    var limit: Int
    /// Bundle IDs for which broadcast is not enabled (`FeatureNotEnabled`).
    var disabledBundleIDs: Set<String> = []

    init(limit: Int) {
        self.limit = limit
    }

    /// What one channel-API request gets: a status, the reason of a failure, headers and a body.
    struct Answer: Sendable {
        var status: Int
        var reason: String?
        var headers: [HTTP2Header] = []
        var body: [UInt8] = []
        /// Subscribers a successful broadcast reached.
        var reached = 0

        static func fail(_ status: Int, _ reason: String) -> Answer { Answer(status: status, reason: reason) }
    }

    /// The request's `apns-*` headers this API reads.
    struct Headers: Sendable {
        var channelID: String?
        var pushType: String?
        var priority: String?
        var expiration: String?
        var requestID: String?
    }

    /// The largest broadcast payload, in bytes (Apple: 5,120).
    static let maximumPayloadBytes = 5_120

    /// Whether `path` belongs to the channel-management or broadcast API.
    static func handles(_ path: String) -> Bool {
        path.hasPrefix("/1/apps/") || path.hasPrefix("/4/broadcasts/")
    }

    /// Answers a channel-management (`/1/apps/<bundle>/channels`, `/1/apps/<bundle>/all-channels`) or
    /// broadcast (`/4/broadcasts/apps/<bundle>`) request after authentication. Checks, in order:
    /// MethodNotAllowed, BadPath, TopicDisallowed (a bundle ID with a push-type suffix),
    /// FeatureNotEnabled, BadMessageId (`apns-request-id` not a UUID), then per route: for
    /// management MissingChannelId, BadChannelId, ChannelNotRegistered, BadRequestPayload and
    /// CannotCreateChannelConfig; for broadcasts MissingChannelId, BadChannelId,
    /// ChannelNotRegistered, MissingPushType, InvalidPushType, BadPriority, BadExpirationDate,
    /// PayloadEmpty, PayloadTooLarge.
    /// - Parameters:
    ///   - newID: makes a channel id (base64 of random bytes) when one is created.
    mutating func answer(method: String, path: String, headers: Headers, body: [UInt8], environment: APNsEnvironment,
                         now: Int64, newID: () -> String) -> Answer {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // ["", "1", "apps", bundle, "channels" | "all-channels"] or ["", "4", "broadcasts", "apps", bundle]
        if parts.count == 5, parts[1] == "4", parts[2] == "broadcasts", parts[3] == "apps" {
            guard method == "POST" else { return .fail(405, "MethodNotAllowed") }
            if let refused = checkApp(parts[4], headers: headers) { return refused }
            return broadcast(bundleID: parts[4], headers: headers, body: body, environment: environment)
        }
        guard parts.count == 5, parts[1] == "1", parts[2] == "apps", parts[4] == "channels" || parts[4] == "all-channels" else {
            return .fail(404, "BadPath")
        }
        let bundleID = parts[3]
        let allowed = parts[4] == "all-channels" ? ["GET"] : ["POST", "GET", "DELETE"]
        guard allowed.contains(method) else { return .fail(405, "MethodNotAllowed") }
        if let refused = checkApp(bundleID, headers: headers) { return refused }
        let app = AppKey(environment: environment, bundleID: bundleID)
        switch (method, parts[4]) {
        case ("GET", "all-channels"):
            let ids = (channels[app] ?? [:]).values.sorted { ($0.createdAtMilliseconds, $0.id) < ($1.createdAtMilliseconds, $1.id) }.map(\.id)
            return Answer(status: 200, body: JSONValue.sortedObject(["channels": .strings(ids)]).serializedBytes)
        case ("POST", _):
            return create(app, body: body, now: now, newID: newID)
        default:
            let found = channel(headers.channelID, in: app)
            guard case .success(let channel) = found else {
                if case .failure(let answer) = found { return answer }
                return .fail(400, "BadChannelId")
            }
            if method == "DELETE" {
                channels[app]?[channel.id] = nil
                return Answer(status: 204)
            }
            return Answer(status: 200, body: JSONValue.sortedObject([
                "message-storage-policy": .integer(channel.storagePolicy), "push-type": .string("LiveActivity"),
            ]).serializedBytes)
        }
    }

    /// The checks every route makes on the app and the request id.
    private func checkApp(_ bundleID: String, headers: Headers) -> Answer? {
        guard !bundleID.isEmpty else { return .fail(404, "BadPath") }
        // The bare bundle ID: a push-type suffix (`.push-type.liveactivity`) is refused.
        if bundleID.contains(".push-type.") || !SimulatorState.isWellFormedTopic(bundleID) { return .fail(400, "TopicDisallowed") }
        if disabledBundleIDs.contains(bundleID) { return .fail(400, "FeatureNotEnabled") }
        if let requestID = headers.requestID, !APNsIDSyntax.isValid(requestID) { return .fail(400, "BadMessageId") }
        return nil
    }

    private enum Lookup {
        case success(Channel)
        case failure(Answer)
    }

    /// The channel named by `apns-channel-id`: MissingChannelId, BadChannelId (not base64), or
    /// ChannelNotRegistered.
    private func channel(_ header: String?, in app: AppKey) -> Lookup {
        guard let id = header, !id.isEmpty else { return .failure(.fail(400, "MissingChannelId")) }
        guard let bytes = Base64.decode(id, alphabet: .either), !bytes.isEmpty else { return .failure(.fail(400, "BadChannelId")) }
        guard let channel = channels[app]?[id] else { return .failure(.fail(400, "ChannelNotRegistered")) }
        return .success(channel)
    }

    private mutating func create(_ app: AppKey, body: [UInt8], now: Int64, newID: () -> String) -> Answer {
        guard case .object(let object)? = try? JSONValue(parsing: body, maximumElements: 16),
              let policy = object["message-storage-policy"]?.integerValue, policy == 0 || policy == 1,
              case .string(let pushType)? = object["push-type"], pushType.lowercased() == "liveactivity"
        else { return .fail(400, "BadRequestPayload") }
        guard (channels[app]?.count ?? 0) < limit else { return .fail(400, "CannotCreateChannelConfig") }
        var id = newID()
        while channels[app]?[id] != nil { id = newID() }
        channels[app, default: [:]][id] = Channel(
            id: id, bundleID: app.bundleID, environment: app.environment, storagePolicy: Int(policy), createdAtMilliseconds: now)
        return Answer(status: 201, headers: [HTTP2Header("apns-channel-id", id)])
    }

    private mutating func broadcast(bundleID: String, headers: Headers, body: [UInt8], environment: APNsEnvironment) -> Answer {
        let app = AppKey(environment: environment, bundleID: bundleID)
        let found = channel(headers.channelID, in: app)
        guard case .success(let channel) = found else {
            if case .failure(let answer) = found { return answer }
            return .fail(400, "BadChannelId")
        }
        guard let pushType = headers.pushType, !pushType.isEmpty else { return .fail(400, "MissingPushType") }
        guard pushType.lowercased() == "liveactivity" else { return .fail(400, "InvalidPushType") }
        guard let priority = headers.priority, ["10", "5", "1"].contains(priority) else { return .fail(400, "BadPriority") }
        guard let expirationText = headers.expiration, let expiration = try? APNsExpiration(headerValue: expirationText)
        else { return .fail(400, "BadExpirationDate") }
        // A No-Message-Stored channel takes only expiration 0.
        if channel.storagePolicy == 0 {
            guard case .immediately = expiration else { return .fail(400, "BadExpirationDate") }
        }
        if body.isEmpty { return .fail(400, "PayloadEmpty") }
        if body.count > Self.maximumPayloadBytes { return .fail(413, "PayloadTooLarge") }
        channels[app]?[channel.id]?.broadcasts += 1
        return Answer(status: 200, reached: channel.subscribers)
    }

    /// Sets a channel's subscriber count (admin API).
    /// - Returns: false when no channel has that id.
    mutating func setSubscribers(_ count: Int, channelID: String) -> Bool {
        for (app, list) in channels where list[channelID] != nil {
            channels[app]?[channelID]?.subscribers = count
            return true
        }
        return false
    }

    /// Every channel, oldest first (admin API).
    var all: [Channel] {
        channels.values.flatMap(\.values).sorted { ($0.createdAtMilliseconds, $0.id) < ($1.createdAtMilliseconds, $1.id) }
    }
}
