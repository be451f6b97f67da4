import APNs
import PushDomain
import PushMessages

// MARK: - Stage 1: resolve targets

extension SendRequestProcessor {
    /// The targets of a request as one batch: the active tokens of its users (of the app, kind and
    /// environment), or its device tokens each with a stored row, a default row (never registered) or
    /// an outcome known without sending (invalid, inactive or mismatched token). Audiences resolve to
    /// an empty batch here (the campaign runner pages them).
    /// - Throws: `PostgresError`.
    func resolve(_ target: SendRequest.Target, template: NotificationTemplate, environment: APNsEnvironment?) async throws -> DeliveryBatch {
        let kind = template.request(for: NotificationTemplate.placeholderToken).requiredTokenKind.rawValue
        switch target {
        case .userIDs(let users):
            var seen = Set<String>()
            let ids = users.userIDs.filter { !$0.isEmpty && seen.insert($0).inserted }
            let byUser = try await userTokensLoader.submit(ids)
            var tokens: [StoredToken] = []
            for user in ids {
                for token in byUser[user] ?? [] where token.bundleID == template.bundleID && token.tokenKind == kind {
                    if let environment, token.environment != environment { continue }
                    tokens.append(token)
                }
            }
            tokens.sort { $0.deviceToken < $1.deviceToken }
            return DeliveryBatch(targets: tokens.map(DeliveryTarget.send))
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
            return DeliveryBatch(targets: result)
        case .audience:
            return DeliveryBatch(targets: [])
        }
    }

}
