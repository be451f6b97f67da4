import Foundation
import Kafka
import PushMessages

/// `pushctl cancel REQUEST_ID`: produces a `CancelRequest` to the send-requests topic, keyed by the
/// request id like the `SendRequest` it cancels (so both land on the same partition with the same
/// partitioner, README "Contracts").
enum CancelCommand {
    static func run(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 1)
        guard let requestID = arguments.positionals.first, !requestID.isEmpty else {
            throw CommandLineArguments.UsageError("the request id to cancel is required: pushctl cancel REQUEST_ID")
        }
        var cancel = CancelRequest()
        cancel.requestID = requestID
        cancel.reason = arguments.value("reason") ?? "cancelled_by_operator"
        cancel.requestedAtMs = Int64(Date().timeIntervalSince1970 * 1000)
        try await KafkaTools.requireTopics([settings.sendRequestsTopic], arguments, settings)
        let producer = try KafkaTools.producer(arguments, settings)
        do {
            let report = try await producer.send(
                topic: settings.sendRequestsTopic, key: requestID, value: cancel.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: CancelRequest.protobufContentType)])
            await producer.shutdown()
            print("cancel of \(requestID) sent (\(report.topic)[\(report.partition)]@\(report.offset)); pushctl status \(requestID) shows when it took effect")
        } catch {
            await producer.shutdown(timeout: .zero)
            throw error
        }
    }
}
