/// Which of Apple's APIs a pool talks to: each is its own authority (host and port) with pools of
/// its own (docs/apns-protocol.md §1 and §8).
enum APNsService: String, Sendable, Hashable, CustomStringConvertible {
    /// Device pushes, `POST /3/device/<token>` (`api.push.apple.com`).
    case push
    /// Channel management, `/1/apps/<bundle id>/channels` (`api-manage-broadcast.push.apple.com:2196`).
    case channels
    /// Broadcast sends, `POST /4/broadcasts/apps/<bundle id>` (`api-broadcast.push.apple.com`).
    case broadcast

    var description: String { rawValue }
}
