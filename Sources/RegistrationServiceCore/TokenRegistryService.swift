import Foundation
import Kafka
import PushDomain
import PushMessages
import ServiceCore

/// The logic behind `push.v1.TokenRegistry`: authorize, validate, normalize, publish a `TokenEvent`
/// keyed by the token (by `user:<bundle_id>:<user_id>` for a forgotten user), and answer only after
/// Kafka acknowledged it (acks=all on an idempotent producer).
///
/// Order of checks: the caller's credential is authenticated before this type is called
/// (`RegistrationAuthenticator`); here the request is validated (INVALID_ARGUMENT names the field),
/// then the principal is authorized for its bundle id, operation and user (PERMISSION_DENIED).
public final class TokenRegistryService: Sendable {
    /// The `content-type` header of every token event record.
    public static let tokenEventContentType = "application/x-protobuf; message=push.v1.TokenEvent"
    /// The most registrations one BatchRegisterTokens call may carry.
    public static let maximumBatchSize = 500

    private let producer: KafkaProducer
    private let topic: String
    private let topicWatch: KafkaTopicWatch?
    private let clock: any WallClock
    private let logger: Logger
    private let metrics: RegistrationMetrics

    /// - Parameters:
    ///   - producer: an idempotent producer with acks=all.
    ///   - topic: the token events topic (default `push.token-events.v1`).
    ///   - topicWatch: when given and its last check found `topic` missing, calls fail at once with
    ///     `.unavailable` naming the topic.
    ///   - metrics: where calls are counted.
    public init(producer: KafkaProducer, topic: String = PushTopic.tokenEvents.name, topicWatch: KafkaTopicWatch? = nil,
                clock: any WallClock = SystemWallClock(), logger: Logger = Logger(label: "registration"),
                metrics: RegistrationMetrics = RegistrationMetrics()) {
        self.producer = producer
        self.topic = topic
        self.topicWatch = topicWatch
        self.clock = clock
        self.logger = logger
        self.metrics = metrics
    }

    /// Counts a call refused before it reached a method (authentication, rate limit).
    public func recordRefused(_ error: RegistrationError, operation: RegistrationOperation) {
        metrics.record(bundleID: "", operation: operation, error: error)
    }

    /// Registers or refreshes a token; with `previous_token`, the rotated token replaces the old one.
    /// - Throws: `RegistrationError` `.invalidArgument` naming the field, `.permissionDenied`, or
    ///   `.unavailable` when Kafka did not acknowledge the event (nothing was registered; the caller
    ///   may retry).
    public func register(_ request: RegisterTokenRequest, as principal: RegistrationPrincipal = .anonymous, traceParent: String? = nil) async throws(RegistrationError) -> RegisterTokenResponse {
        do {
            let event = try registration(request, as: principal)
            try await publish(event, key: event.device!.deviceToken, traceParent: traceParent)
            metrics.record(bundleID: event.device!.bundleID, operation: .register, error: nil)
            return RegisterTokenResponse(deviceToken: event.device!.deviceToken, eventID: event.eventID, eventTimeMs: event.eventTimeMs)
        } catch {
            metrics.record(bundleID: request.device?.bundleID ?? "", operation: .register, error: error)
            throw error
        }
    }

    /// The item count of a batch, checked: 1 to `maximumBatchSize`.
    /// - Throws: `RegistrationError` `.invalidArgument` when the batch is empty or too large.
    public static func batchItems(_ request: BatchRegisterTokensRequest) throws(RegistrationError) -> Int {
        guard !request.registrations.isEmpty else { throw .invalid("registrations", "at least one registration is required") }
        guard request.registrations.count <= maximumBatchSize else {
            throw .invalid("registrations", "\(request.registrations.count) items; at most \(maximumBatchSize)")
        }
        return request.registrations.count
    }

    /// Registers each item on its own: one result per item, in order; a bad item does not fail the
    /// others. Events are published concurrently and each result waits for its acknowledgement.
    /// - Parameter admission: how many items, from the first, the caller's rate limit admitted
    ///   (`RegistrationAuthenticator.admit`); each later item's result is `RESOURCE_EXHAUSTED` (8)
    ///   with the retry hint in its message. Default: all.
    /// - Throws: `RegistrationError` `.invalidArgument` only when the batch itself is empty or too
    ///   large; `.permissionDenied` when the principal is a registration JWT (batches need an API key).
    public func batchRegister(
        _ request: BatchRegisterTokensRequest, as principal: RegistrationPrincipal = .anonymous,
        admission: RegistrationAuthenticator.RateAdmission? = nil, traceParent: String? = nil
    ) async throws(RegistrationError) -> BatchRegisterTokensResponse {
        let count = try Self.batchItems(request)
        do {
            try principal.authorizeBatch()
        } catch {
            metrics.record(bundleID: "", operation: .register, error: error)
            throw error
        }
        let admitted = min(count, admission?.admitted ?? count)
        var results = [BatchRegisterTokenResult](repeating: BatchRegisterTokenResult(), count: count)
        if admitted < count {
            let retryAfter = admission?.retryAfter ?? .seconds(1)
            let refusal = RegistrationError(
                code: .resourceExhausted,
                message: "\(admission?.limitedBy ?? "the caller") exceeded its rate limit (items count); retry after \(retryAfter)",
                retryAfter: retryAfter, reason: "rate_limited")
            for index in admitted..<count {
                metrics.record(bundleID: "", operation: .register, error: refusal)
                results[index].code = Int32(refusal.code.grpcCode.rawValue)
                results[index].message = refusal.message
            }
        }
        await withTaskGroup(of: (Int, BatchRegisterTokenResult).self) { group in
            for (index, item) in request.registrations.prefix(admitted).enumerated() {
                group.addTask {
                    var result = BatchRegisterTokenResult()
                    do throws(RegistrationError) {
                        let event = try self.registration(item, as: principal, fieldPrefix: "registrations[\(index)].")
                        try await self.publish(event, key: event.device!.deviceToken, traceParent: traceParent)
                        self.metrics.record(bundleID: event.device!.bundleID, operation: .register, error: nil)
                        result.registered = RegisterTokenResponse(deviceToken: event.device!.deviceToken, eventID: event.eventID, eventTimeMs: event.eventTimeMs)
                    } catch {
                        self.metrics.record(bundleID: item.device?.bundleID ?? "", operation: .register, error: error)
                        result.code = Int32(error.code.grpcCode.rawValue)
                        result.message = error.message
                    }
                    return (index, result)
                }
            }
            for await (index, result) in group { results[index] = result }
        }
        return BatchRegisterTokensResponse(results: results)
    }

    /// Removes a token.
    /// - Throws: as `register(_:as:)`.
    public func unregister(_ request: UnregisterTokenRequest, as principal: RegistrationPrincipal = .anonymous, traceParent: String? = nil) async throws(RegistrationError) -> UnregisterTokenResponse {
        do {
            let (token, bundleID) = try TokenRegistrationValidator.normalizedUnregistration(request)
            try principal.authorize(.unregister, bundleID: bundleID)
            var device = Device()
            device.deviceToken = token
            device.bundleID = bundleID
            var event = TokenEvent()
            event.eventID = UUID.random().lowercasedString
            event.action = .unregistered
            event.device = device
            event.eventTimeMs = clock.nowMilliseconds()
            event.reason = request.reason
            try await publish(event, key: token, traceParent: traceParent)
            metrics.record(bundleID: bundleID, operation: .unregister, error: nil)
            return UnregisterTokenResponse(deviceToken: token, eventID: event.eventID, eventTimeMs: event.eventTimeMs)
        } catch {
            metrics.record(bundleID: request.bundleID, operation: .unregister, error: error)
            throw error
        }
    }

    /// Forgets a user of one app: publishes a `USER_FORGOTTEN` event; the dispatcher deactivates
    /// and announces every token of the user and deletes the rows after its retention.
    /// - Throws: as `register(_:as:)`; the principal needs the `admin` operation.
    public func forgetUser(_ request: ForgetUserRequest, as principal: RegistrationPrincipal = .anonymous, traceParent: String? = nil) async throws(RegistrationError) -> ForgetUserResponse {
        do throws(RegistrationError) {
            do {
                try DeviceValidator.checkBundleID(request.bundleID, field: "bundle_id")
                // The user-id rule RegisterToken applies: an id it refuses could never have tokens,
                // and the dispatcher would dead-letter the event (a NUL id was acknowledged, then
                // never erased).
                try DeviceValidator.checkUserID(request.userID, field: "user_id", required: true)
            } catch {
                throw RegistrationError.invalid(error.field, error.problem)
            }
            try principal.authorize(.admin, bundleID: request.bundleID)
            var device = Device()
            device.bundleID = request.bundleID
            device.userID = request.userID
            var event = TokenEvent()
            event.eventID = UUID.random().lowercasedString
            event.action = .userForgotten
            event.device = device
            event.eventTimeMs = clock.nowMilliseconds()
            try await publish(event, key: Self.forgetKey(bundleID: request.bundleID, userID: request.userID), traceParent: traceParent)
            metrics.record(bundleID: request.bundleID, operation: .admin, error: nil)
            logger.notice("user forgotten", ["bundle_id": request.bundleID, "event_id": event.eventID])
            return ForgetUserResponse(eventID: event.eventID, eventTimeMs: event.eventTimeMs)
        } catch {
            metrics.record(bundleID: request.bundleID, operation: .admin, error: error)
            throw error
        }
    }

    /// The record key of a `USER_FORGOTTEN` event.
    public static func forgetKey(bundleID: String, userID: String) -> String { "user:\(bundleID):\(userID)" }

    /// The validated, authorized registration event of `request`.
    private func registration(_ request: RegisterTokenRequest, as principal: RegistrationPrincipal, fieldPrefix: String = "") throws(RegistrationError) -> TokenEvent {
        let device: Device
        var previous = ""
        do throws(RegistrationError) {
            device = try TokenRegistrationValidator.normalizedDevice(of: request)
            if !request.previousToken.isEmpty {
                do {
                    previous = try DeviceValidator.normalizedToken(request.previousToken, field: "previous_token")
                } catch {
                    throw RegistrationError.invalid(error.field, error.problem)
                }
                guard previous != device.deviceToken else { throw RegistrationError.invalid("previous_token", "is the same token as device.device_token") }
            }
        } catch {
            throw RegistrationError(code: error.code, message: fieldPrefix + error.message)
        }
        try principal.authorize(.register, bundleID: device.bundleID, userID: device.userID)
        var event = TokenEvent()
        event.eventID = UUID.random().lowercasedString
        event.action = .registered
        event.device = device
        event.eventTimeMs = clock.nowMilliseconds()
        event.previousToken = previous
        return event
    }

    /// Produces `event` with its content type and the caller's trace (`traceParent` invalid or nil:
    /// a new trace), and waits for Kafka's acknowledgement.
    private func publish(_ event: TokenEvent, key: String, traceParent: String?) async throws(RegistrationError) {
        if let topicWatch, topicWatch.missingTopics.contains(topic) {
            throw RegistrationError(code: .unavailable, message: "Kafka topic \(topic) does not exist; an operator must create it")
        }
        let trace = TraceParent.resolve([traceParent]).trace
        do {
            _ = try await producer.send(
                topic: topic, key: Array(key.utf8), value: event.serializedBytes(),
                headers: [
                    KafkaHeader(name: "content-type", value: Self.tokenEventContentType),
                    KafkaHeader(name: TraceParent.headerName, value: trace.text),
                ])
        } catch {
            logger.error("token event not acknowledged by Kafka", ["error": "\(error)", "event_id": event.eventID, "trace_id": trace.traceID])
            if let kafka = error as? KafkaError, kafka.code == .unknownTopic || kafka.code == .unknownTopicOrPartition {
                throw RegistrationError(code: .unavailable, message: "Kafka topic \(topic) does not exist; an operator must create it", cause: error)
            }
            throw RegistrationError(code: .unavailable, message: "the token event was not acknowledged by Kafka; retry", cause: error)
        }
    }
}
