import APNs
import PushDomain
import PushMessages

// MARK: - Stage 1: resolve targets

extension SendRequestProcessor {
    /// The targets of a request as one batch, every page read: see `resolveFirst` (the scheduled
    /// requests the campaign runner sends as one page).
    /// - Throws: `PostgresError`.
    func resolve(_ target: SendRequest.Target, template: NotificationTemplate, environment: APNsEnvironment?) async throws -> DeliveryBatch {
        let (batch, more) = try await resolveFirst(target, template: template, environment: environment)
        guard var pages = more else { return batch }
        var targets = batch.targets
        while let page = try await nextUserPage(&pages, template: template, environment: environment) { targets += page.targets }
        return DeliveryBatch(targets: targets)
    }

    /// The next page of a `user_ids` request's tokens (`UserTokenPages`), nil once all were read.
    /// - Throws: `PostgresError`.
    func nextUserPage(_ pages: inout UserTokenPages, template: NotificationTemplate, environment: APNsEnvironment?) async throws -> DeliveryBatch? {
        guard let cursor = pages.next else { return nil }
        let tokens = try await store.activeTokens(ofUser: cursor.user, after: cursor.after, limit: pages.pageSize)
        pages.read(tokens)
        return DeliveryBatch(targets: UserTokenPages.targets(
            tokens, bundleID: template.bundleID, kind: template.tokenKindName, environment: environment))
    }

    /// The first batch of an immediate request's targets (`resolveFirst`), read before the request
    /// was claimed so that the read overlaps the request id's check (`Dispatcher.handleSendRequest`).
    struct FirstTargets: Sendable {
        var batch: DeliveryBatch
        /// What is left to read of a `user_ids` request's tokens.
        var more: UserTokenPages?
    }

    /// `resolveFirst` for a request with device tokens or user ids; nil for any other (a broadcast, an
    /// audience, a request without a notification or target), whose handling reads what it needs.
    /// - Throws: `PostgresError`.
    func lookUpFirstTargets(_ request: SendRequest, template: NotificationTemplate) async throws -> FirstTargets? {
        guard let notification = request.notification, let target = request.target else { return nil }
        switch target {
        case .deviceTokens, .userIDs:
            let (batch, more) = try await resolveFirst(target, template: template, environment: notification.environment.apnsEnvironment)
            return FirstTargets(batch: batch, more: more)
        case .audience, .channelID:
            return nil
        }
    }

    /// The first batch of a request's targets: the active tokens of its users (of the app, kind and
    /// environment) from their first read (`UserTokenPages`; `more` says what is left to read), or its
    /// device tokens each with a stored row, a default row (never registered) or an outcome known
    /// without sending (invalid, inactive or mismatched token). Audiences resolve to an empty batch
    /// here (the campaign runner pages them).
    /// - Throws: `PostgresError`.
    func resolveFirst(_ target: SendRequest.Target, template: NotificationTemplate, environment: APNsEnvironment?) async throws
        -> (batch: DeliveryBatch, more: UserTokenPages?)
    {
        let kind = template.tokenKindName
        switch target {
        case .userIDs(let users):
            var seen = Set<String>()
            let ids = users.userIDs.filter { !$0.isEmpty && seen.insert($0).inserted }
            let limit = UserTokenPages.firstReadLimit(users: ids.count, pageSize: userPageSize)
            let byUser = try await userTokensLoader.submit(UserTokensRead(users: ids, limit: limit))
            var tokens: [StoredToken] = []
            for user in ids { tokens += byUser[user] ?? [] }
            tokens.sort { $0.deviceToken < $1.deviceToken }
            let pages = UserTokenPages(users: ids, firstRead: byUser, limit: limit, pageSize: userPageSize)
            let batch = DeliveryBatch(targets: UserTokenPages.targets(tokens, bundleID: template.bundleID, kind: kind, environment: environment))
            return (batch, pages.next == nil ? nil : pages)
        case .deviceTokens(let list):
            var result: [DeliveryTarget] = []
            var valid: [String] = []
            var seen = Set<String>()
            for raw in list.deviceTokens {
                guard let token = try? DeviceToken(validating: raw).hex else {
                    if seen.insert(raw).inserted {
                        result.append(.outcome(token: raw, userID: "", environment: environment, outcome: .rejected, reason: .invalidDeviceToken))
                    }
                    continue
                }
                if seen.insert(token).inserted { valid.append(token) }
            }
            let stored = try await tokensLoader.submit(valid)
            for token in valid {
                guard let row = stored[token] else {
                    // Never registered: the request's environment, or the configured default, decides.
                    result.append(.send(StoredToken(
                        deviceToken: token, bundleID: template.bundleID, environment: environment ?? defaultEnvironment, tokenKind: kind)))
                    continue
                }
                let skip: OutcomeReason? =
                    if !row.isActive { .tokenInactive }
                    else if row.bundleID != template.bundleID { .notForTopic }
                    else if let environment, row.environment != environment { .environmentMismatch }
                    else if row.tokenKind != kind { .tokenKindMismatch }
                    else { nil }
                if let skip {
                    result.append(.outcome(token: token, userID: row.userID, environment: row.environment, outcome: .skipped, reason: skip))
                } else {
                    result.append(.send(row))
                }
            }
            return (DeliveryBatch(targets: result), nil)
        case .audience, .channelID:
            return (DeliveryBatch(targets: []), nil)
        }
    }
}

extension NotificationTemplate {
    /// `APNsTokenKind` raw value of the tokens this notification goes to (its push type's).
    var tokenKindName: String { request(for: NotificationTemplate.placeholderToken).requiredTokenKind.rawValue }
}

/// One request's first read of its users' tokens (`SendRequestProcessor.userTokensLoader`).
struct UserTokensRead: Sendable {
    var users: [String]
    /// Tokens per user (`UserTokenPages.firstReadLimit`).
    var limit: Int
}
