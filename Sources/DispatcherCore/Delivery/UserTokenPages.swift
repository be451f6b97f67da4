import APNs
import PushDomain

/// Where reading a `user_ids` request's tokens stands (docs/dispatcher-engine.md "A user's tokens in
/// pages"): a user's active tokens are read in token order, `pageSize` at a time, one user after the
/// other, as an audience is paged; a page that came back full may have more behind it. No I/O.
///
/// The first read covers every user of the request at once (batched with other requests), at most
/// `firstReadLimit` tokens each, so that it holds at most about `pageSize` tokens whatever the number of
/// users; the users it left unfinished are read on one page at a time. A device token belongs to one
/// row, hence to one user: pages never repeat a token.
struct UserTokenPages: Sendable, Equatable {
    /// Tokens read per page after the first read (`DispatcherConfiguration.userPageSize`).
    let pageSize: Int
    /// Users whose tokens may go on past `after`, the last token read of them, in request order.
    private(set) var remaining: [Cursor]

    struct Cursor: Sendable, Equatable {
        var user: String
        var after: String
    }

    /// Tokens per user in the first read of a request to `users` users: the page shared among them,
    /// at least one each.
    static func firstReadLimit(users: Int, pageSize: Int) -> Int { max(1, max(1, pageSize) / max(1, users)) }

    /// - Parameters:
    ///   - users: the request's distinct user ids, in request order.
    ///   - firstRead: what the first read found, by user, each in token order and at most `limit`.
    ///   - limit: the first read's `firstReadLimit`.
    init(users: [String], firstRead: [String: [StoredToken]], limit: Int, pageSize: Int) {
        self.pageSize = max(1, pageSize)
        remaining = users.compactMap { user in
            guard let tokens = firstRead[user], tokens.count >= limit, let last = tokens.last else { return nil }
            return Cursor(user: user, after: last.deviceToken)
        }
    }

    /// The next page to read (`TokenStore.activeTokens(ofUser:after:limit:)` with `pageSize`), nil
    /// once every user's tokens were read.
    var next: Cursor? { remaining.first }

    /// Takes the page read for `next`: a full page moves the user's cursor to its last token, a
    /// shorter one finishes the user.
    mutating func read(_ tokens: [StoredToken]) {
        guard !remaining.isEmpty else { return }
        if tokens.count >= pageSize, let last = tokens.last, last.deviceToken > remaining[0].after {
            remaining[0].after = last.deviceToken
        } else {
            remaining.removeFirst()
        }
    }

    /// The tokens of a page the request sends to: of its app and token kind, and of `environment`
    /// when it names one.
    static func targets(_ tokens: [StoredToken], bundleID: String, kind: String, environment: APNsEnvironment?) -> [DeliveryTarget] {
        tokens.compactMap { token in
            guard token.bundleID == bundleID, token.tokenKind == kind else { return nil }
            if let environment, token.environment != environment { return nil }
            return .send(token)
        }
    }
}
