import Foundation
import Kafka
import PushMessages
import ServiceCore

/// The logic behind `push.v1.TokenRegistry`: validate, normalize, publish a `TokenEvent` keyed by
/// the token, and answer only after Kafka acknowledged it (acks=all on an idempotent producer).
public final class TokenRegistryService: Sendable {
    /// The `content-type` header of every token event record.
    public static let tokenEventContentType = "application/x-protobuf; message=push.v1.TokenEvent"

    private let producer: KafkaProducer
    private let topic: String
    private let clock: any WallClock
    private let logger: Logger
    /// `push_registrations_total{bundle_id,operation,outcome}`: calls by outcome (`ok`,
    /// `invalid_argument`, `unavailable`); `bundle_id` is empty for calls refused before it was validated.
    private let registrations = MetricsRegistry.shared.counter(
        "push_registrations_total", help: "Registration calls by bundle id, operation (register, unregister) and outcome.",
        labelNames: ["bundle_id", "operation", "outcome"])

    /// - Parameters:
    ///   - producer: an idempotent producer with acks=all.
    ///   - topic: the token events topic (default `push.token-events.v1`).
    public init(producer: KafkaProducer, topic: String = "push.token-events.v1", clock: any WallClock = SystemWallClock(),
                logger: Logger = Logger(label: "registration")) {
        self.producer = producer
        self.topic = topic
        self.clock = clock
        self.logger = logger
    }

    /// Registers or refreshes a token.
    /// - Parameter traceParent: the caller's W3C `traceparent` (gRPC metadata or HTTP header); invalid
    ///   or nil: a new trace. Written as the token event record's `traceparent` header.
    /// - Throws: `RegistrationError` `.invalidArgument` naming the field, or `.unavailable` when
    ///   Kafka did not acknowledge the event (nothing was registered; the caller may retry).
    public func register(_ request: RegisterTokenRequest, traceParent: String? = nil) async throws(RegistrationError) -> RegisterTokenResponse {
        let device: Device
        do throws(RegistrationError) {
            device = try TokenRegistrationValidator.normalizedDevice(of: request)
        } catch {
            registrations.increment(labels: ["", "register", "invalid_argument"])
            throw error
        }
        var event = TokenEvent()
        event.eventID = UUID().uuidString.lowercased()
        event.action = .registered
        event.device = device
        event.eventTimeMs = clock.nowMilliseconds()
        try await publish(event, token: device.deviceToken, bundleID: device.bundleID, operation: "register", traceParent: traceParent)
        var response = RegisterTokenResponse()
        response.deviceToken = device.deviceToken
        response.eventID = event.eventID
        response.eventTimeMs = event.eventTimeMs
        return response
    }

    /// Removes a token.
    /// - Parameter traceParent: as for `register(_:traceParent:)`.
    /// - Throws: as `register(_:)`.
    public func unregister(_ request: UnregisterTokenRequest, traceParent: String? = nil) async throws(RegistrationError) -> UnregisterTokenResponse {
        let token: String, bundleID: String
        do throws(RegistrationError) {
            (token, bundleID) = try TokenRegistrationValidator.normalizedUnregistration(request)
        } catch {
            registrations.increment(labels: ["", "unregister", "invalid_argument"])
            throw error
        }
        var device = Device()
        device.deviceToken = token
        device.bundleID = bundleID
        var event = TokenEvent()
        event.eventID = UUID().uuidString.lowercased()
        event.action = .unregistered
        event.device = device
        event.eventTimeMs = clock.nowMilliseconds()
        event.reason = request.reason
        try await publish(event, token: token, bundleID: bundleID, operation: "unregister", traceParent: traceParent)
        var response = UnregisterTokenResponse()
        response.deviceToken = token
        response.eventID = event.eventID
        response.eventTimeMs = event.eventTimeMs
        return response
    }

    private func publish(_ event: TokenEvent, token: String, bundleID: String, operation: String, traceParent: String?) async throws(RegistrationError) {
        let trace = TraceParent.resolve([traceParent]).trace
        do {
            _ = try await producer.send(
                topic: topic, key: Array(token.utf8), value: event.serializedBytes(),
                headers: [
                    KafkaHeader(name: "content-type", value: Self.tokenEventContentType),
                    KafkaHeader(name: TraceParent.headerName, value: trace.text),
                ])
            registrations.increment(labels: [bundleID, operation, "ok"])
        } catch {
            registrations.increment(labels: [bundleID, operation, "unavailable"])
            logger.error("token event not acknowledged by Kafka", [
                "error": "\(error)", "event_id": event.eventID, "trace_id": trace.traceID, "token": Logger.shortened(token: token),
            ])
            throw RegistrationError(code: .unavailable, message: "the token event was not acknowledged by Kafka; retry", cause: error)
        }
    }
}
