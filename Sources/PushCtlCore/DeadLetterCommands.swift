import Foundation
import Kafka
import ProtobufCodec
import PushMessages
import ServiceCore

/// `pushctl dead-letters list` and `pushctl dead-letters redrive`.
enum DeadLetterCommands {
    /// Which dead letters a command reads: partition and inclusive offset range.
    struct Selection: Sendable, Equatable {
        var partition: Int?
        var from: Int64
        var to: Int64?

        func contains(_ message: KafkaMessage) -> Bool {
            if let partition, message.partition.rawValue != Int32(partition) { return false }
            return message.offset.rawValue >= from && message.offset.rawValue <= (to ?? .max)
        }

        /// Whether `message` is at or past the end of the selection (so reading can stop).
        func isPastEnd(_ message: KafkaMessage) -> Bool {
            guard let partition, let to else { return false }
            return message.partition.rawValue == Int32(partition) && message.offset.rawValue >= to
        }
    }

    static func selection(_ arguments: CommandLineArguments, requireAll: Bool) throws(CommandLineArguments.UsageError) -> Selection {
        if requireAll {
            for name in ["partition", "from", "to"] where arguments.value(name) == nil {
                throw .init("option --\(name) is required (dead letters are re-driven by partition and offset range)")
            }
        }
        var partition: Int?
        if arguments.value("partition") != nil { partition = try arguments.int("partition", default: 0, in: 0...Int(Int32.max)) }
        let from = Int64(try arguments.int("from", default: 0, in: 0...Int.max))
        var to: Int64?
        if arguments.value("to") != nil { to = Int64(try arguments.int("to", default: 0, in: 0...Int.max)) }
        if let to, to < from { throw .init("option --to (\(to)) is before --from (\(from))") }
        return Selection(partition: partition, from: from, to: to)
    }

    /// Reads the dead-letter topic from the start and hands each selected record to `handle`, until the
    /// selection's end or `idle` without new records.
    static func read(
        _ selection: Selection, idle: Duration, _ arguments: CommandLineArguments, _ settings: PushCtlSettings,
        _ handle: (KafkaMessage, DeadLetter?) async throws -> Void
    ) async throws {
        try await KafkaTools.requireTopics([settings.deadLetterTopic], arguments, settings)
        let reader = try await KafkaTools.reader(topic: settings.deadLetterTopic, fromBeginning: true, arguments, settings)
        try await withAsyncCleanup {
            reading: while true {
                guard let batch = try await SendCommand.withDeadline(ContinuousClock.now + idle, { await reader.nextMessages(maxCount: 500) }),
                      !batch.isEmpty
                else { break }
                for message in batch {
                    if selection.contains(message) { try await handle(message, try? DeadLetter(protobufBytes: message.value)) }
                    if selection.isPastEnd(message) { break reading }
                }
            }
        } cleanup: {
            await reader.close()
        }
    }

    static func list(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 0)
        let selection = try selection(arguments, requireAll: false)
        let idle = try arguments.seconds("idle", default: .seconds(3))
        var count = 0
        try await read(selection, idle: idle, arguments, settings) { message, letter in
            count += 1
            print(render(message, letter, json: arguments.flag("json")))
        }
        PushCtl.printError("\(count) dead letter\(count == 1 ? "" : "s")")
    }

    static func redrive(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 0)
        let selection = try selection(arguments, requireAll: true)
        let idle = try arguments.seconds("idle", default: .seconds(5))
        let dryRun = arguments.flag("dry-run")
        let producer = dryRun ? nil : try KafkaTools.producer(arguments, settings)
        var redriven = 0, skipped = 0
        do {
            try await read(selection, idle: idle, arguments, settings) { message, letter in
                let position = "\(message.topic)[\(message.partition)]@\(message.offset)"
                guard let letter else {
                    skipped += 1
                    PushCtl.printError("skipped \(position): not a DeadLetter record")
                    return
                }
                let plan = RedrivePlan(letter, overrideTopic: arguments.value("to-topic"))
                guard case .produce(let topic, let key, let value, let headers) = plan else {
                    skipped += 1
                    if case .skip(let why) = plan { PushCtl.printError("skipped \(position): \(why)") }
                    return
                }
                if let producer {
                    let report = try await producer.send(topic: topic, key: key, value: value, headers: headers)
                    print("re-drove \(position) → \(report.topic)[\(report.partition)]@\(report.offset)")
                } else {
                    print("would re-drive \(position) → \(topic) (\(value.count) bytes)")
                }
                redriven += 1
            }
        } catch {
            await producer?.shutdown(timeout: .zero)
            throw error
        }
        await producer?.shutdown()
        PushCtl.printError("\(dryRun ? "would re-drive" : "re-drove") \(redriven), skipped \(skipped)")
        if skipped > 0 { throw PushCtlError(.failed, "\(skipped) dead letter\(skipped == 1 ? "" : "s") could not be re-driven") }
    }

    static func render(_ message: KafkaMessage, _ letter: DeadLetter?, json: Bool) -> String {
        guard let letter else { return "\(message.topic)[\(message.partition)]@\(message.offset) (not a DeadLetter record)" }
        if json {
            var writer = JSONWriter()
            writer.beginObject()
            writer.writeKey("topic")
            writer.writeString(message.topic)
            writer.writeKey("partition")
            writer.writeNumber(String(message.partition.rawValue))
            writer.writeKey("offset")
            writer.writeNumber(String(message.offset.rawValue))
            writer.writeKey("deadLetter")
            writer.writeRaw(letter.jsonString())
            writer.endObject()
            return String(decoding: writer.bytes, as: UTF8.self)
        }
        return "\(message.topic)[\(message.partition)]@\(message.offset) source=\(letter.sourceTopic)[\(letter.sourcePartition)]@\(letter.sourceOffset) "
            + "size=\(letter.originalValueSize)\(letter.originalValueTruncated ? " (truncated)" : "") by=\(letter.rejectedBy) error=\"\(letter.error)\""
    }
}

/// What re-driving one dead letter does: produce its original back, or skip it and why.
public enum RedrivePlan: Sendable, Equatable {
    /// Produce this record.
    case produce(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader])
    /// Do not produce; the reason.
    case skip(String)

    /// The plan for `letter`: its original key, value and headers to its source topic (or
    /// `overrideTopic`); skipped when the original was cut or the source topic is unknown.
    public init(_ letter: DeadLetter, overrideTopic: String?) {
        if letter.originalValueTruncated {
            self = .skip("the original value was cut to \(letter.originalValue.count) of \(letter.originalValueSize) bytes")
            return
        }
        guard let topic = overrideTopic ?? (letter.sourceTopic.isEmpty ? nil : letter.sourceTopic) else {
            self = .skip("no source topic (give --to-topic)")
            return
        }
        let headers = letter.originalHeaders.map { KafkaHeader(name: $0.key, value: $0.value) }
        self = .produce(topic: topic, key: letter.originalKey.isEmpty ? nil : letter.originalKey, value: letter.originalValue, headers: headers)
    }
}
