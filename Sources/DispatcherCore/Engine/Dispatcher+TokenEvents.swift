import Kafka
import Postgres
import PushMessages
import ServiceCore

// MARK: - Handling records (docs/dispatcher-engine.md "Failures", docs/token-events.md)

extension Dispatcher {
    /// Handles records of one partition (one send request, or a batch of token events); throws only
    /// for transient infrastructure failures.
    /// - Returns: `.abandoned` when a send request stopped before it finished; else `.finished`.
    @discardableResult
    func handle(_ records: [KafkaMessage], retryContext: RetryContext = .unbounded(), shouldStop: @escaping @Sendable () -> Bool = { false }) async throws -> RecordOutcome {
        var records = records
        // Send requests too large are refused by the send-request path (with a RequestCompleted).
        let refusedHere: (KafkaMessage) -> Bool = { [configuration] message in
            message.unreadableError != nil || (message.oversizedValueBytes != nil && message.topic != configuration.topics.sendRequests)
        }
        if records.contains(where: refusedHere) {
            for message in records where message.unreadableError != nil { try await deadLetterUnreadable(message) }
            for message in records where refusedHere(message) && message.unreadableError == nil { try await deadLetterOversized(message) }
            records.removeAll(where: refusedHere)
        }
        guard let first = records.first else { return .finished }
        if first.topic == configuration.topics.tokenEvents {
            try await applyTokenEvents(records)
        } else if first.topic == configuration.topics.sendRequests {
            for message in records where try await handleSendRequest(message, retryContext: retryContext, shouldStop: shouldStop) == .abandoned {
                return .abandoned
            }
        }
        return .finished
    }

    /// A record the Kafka client could not read (the consumer skipped its offset): kept on the
    /// dead-letter topic by offset, with `unreadable_by_client` set.
    func deadLetterUnreadable(_ message: KafkaMessage) async throws {
        let error = "the Kafka client could not read the record at this offset (records compressed into the same batch are lost with it): \(message.unreadableError ?? "")"
        try await feedback.deadLetter(message, error: error, rejectedBy: "dispatcher")
        metrics.deadLetters.increment(labels: ["undecodable_batch"])
    }

    /// The refusal of a record whose value is larger than `PUSH_MAX_SEND_REQUEST_BYTES` (the consumer
    /// did not copy it).
    func oversized(_ message: KafkaMessage) -> SendRequestDecoder.Rejection {
        SendRequestDecoder.tooLarge(bytes: message.oversizedValueBytes ?? 0, maxBytes: configuration.intake.maxSendRequestBytes)
    }

    /// A token event larger than `PUSH_MAX_SEND_REQUEST_BYTES`: kept on the dead-letter topic with its
    /// size and no value.
    func deadLetterOversized(_ message: KafkaMessage) async throws {
        logger.warning("token event refused: too large", ["partition": "\(message.topicPartition)", "offset": "\(message.offset)"])
        try await feedback.deadLetter(message, error: "invalid TokenEvent: \(oversized(message))", rejectedBy: "dispatcher")
        metrics.deadLetters.increment(labels: ["invalid_token_event"])
    }

    func applyTokenEvents(_ records: [KafkaMessage]) async throws {
        var events: [(KafkaMessage, TokenEvent)] = []
        for message in records {
            do {
                events.append((message, try TokenEventChecker.checked(message, nowMs: clock.nowMilliseconds())))
            } catch {
                logger.warning("token event rejected", ["error": "\(error)", "partition": "\(message.topicPartition)", "offset": "\(message.offset)"])
                try await feedback.deadLetter(message, error: "invalid TokenEvent: \(error)", rejectedBy: "dispatcher")
                metrics.deadLetters.increment(labels: ["invalid_token_event"])
            }
        }
        guard !events.isEmpty else { return }
        do {
            let applied = try await store.applyBatch(events.map(\.1))
            try await deadLetterRefused(applied.refused, of: events)
            try await announceForgotten(applied.forgotten)
            metrics.tokenEventsApplied.increment(by: Double(events.count - applied.refused.count))
        } catch let error as PostgresError where error.isCausedByTheData {
            // One event of the batch is refused for its content: apply them one by one, so that only
            // that one goes to the dead-letter topic.
            for (message, event) in events {
                do {
                    let applied = try await store.applyOne(event)
                    try await deadLetterRefused(applied.refused, of: [(message, event)])
                    try await announceForgotten(applied.forgotten)
                    if applied.refused.isEmpty { metrics.tokenEventsApplied.increment() }
                } catch let error as PostgresError where error.isCausedByTheData {
                    logger.error("record refused by PostgreSQL", ["error": "\(error)", "offset": "\(message.offset)"])
                    try await feedback.deadLetter(message, error: "refused by PostgreSQL: \(error)", rejectedBy: "dispatcher")
                    metrics.deadLetters.increment(labels: ["refused_by_postgres"])
                }
            }
        }
    }

    /// Registrations not applied because another app owns their token (`TokenOwnership`): each goes
    /// to the dead-letter topic as `token_owned_by_other_app`, matched to its record by token, bundle
    /// id and event time.
    func deadLetterRefused(_ refused: [TokenEventsApplied.RefusedRegistration], of events: [(KafkaMessage, TokenEvent)]) async throws {
        guard !refused.isEmpty else { return }
        var used = Set<Int>()
        for registration in refused {
            guard let index = events.indices.first(where: { index in
                let event = events[index].1
                return !used.contains(index) && event.action == .registered && event.device?.deviceToken == registration.deviceToken
                    && event.device?.bundleID == registration.bundleID && event.eventTimeMs == registration.eventTimeMs
            }) else { continue }
            used.insert(index)
            let message = events[index].0
            logger.warning("registration refused: the token belongs to another app", [
                "bundle_id": registration.bundleID, "owner_bundle_id": registration.ownerBundleID,
                "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
            ])
            try await feedback.deadLetter(
                message,
                error: "device.bundle_id: the token is registered to another app (\(registration.ownerBundleID)) and active or inactive for less than PUSH_TOKEN_REBIND_AFTER_DAYS; not applied",
                rejectedBy: "dispatcher")
            metrics.deadLetters.increment(labels: ["token_owned_by_other_app"])
        }
    }

    /// Publishes a `TokenInvalidated` (outcome reason `USER_FORGOTTEN`) for every row a forgotten
    /// user had, keyed by the token, with a deterministic event id (a redelivered forget event
    /// repeats the same ids).
    func announceForgotten(_ forgotten: [TokenEventsApplied.ForgottenToken]) async throws {
        for row in forgotten {
            var invalidated = TokenInvalidated(
                deviceToken: row.deviceToken, bundleID: row.bundleID, environment: Environment(storedName: row.environment),
                userID: row.userID, installationID: row.installationID)
            invalidated.outcomeReason = .userForgotten
            let id = FeedbackEventID.tokenInvalidated(deviceToken: row.deviceToken, apnsTimestampMs: row.eventTimeMs, requestID: "user-forgotten")
            try await feedback.publish(feedback.event(id: id, .tokenInvalidated(invalidated)), key: row.deviceToken)
        }
        if !forgotten.isEmpty {
            logger.notice("user forgotten: tokens deactivated and announced", ["tokens": "\(forgotten.count)", "bundle_id": forgotten[0].bundleID])
        }
    }
}
