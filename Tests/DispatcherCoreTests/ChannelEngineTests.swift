import APNs
import Foundation
import Kafka
import PushDomain
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// `ChannelCommand` records on a running dispatcher (docs/live-activities.md): the real engine,
    /// PostgreSQL, librdkafka's mock broker, and the APNs simulator's channel-management API over TLS.
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
    struct ChannelEngineTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        static let bundleID = EngineWorld.bundleID

        static func command(_ action: ChannelCommand.Action, _ name: String, deleteAfterMs: Int64 = 0,
                            policy: MessageStoragePolicy = .mostRecentMessageStored) -> ChannelCommand {
            var command = ChannelCommand()
            command.action = action
            command.bundleID = bundleID
            command.environment = .production
            command.name = name
            command.messageStoragePolicy = policy
            command.deleteAfterMs = deleteAfterMs
            command.requestedAtMs = SystemWallClock().nowMilliseconds()
            return command
        }

        static func produce(_ command: ChannelCommand, in world: EngineWorld) async throws {
            _ = try await world.producer.send(
                topic: world.topics.sendRequests, key: command.recordKey, value: command.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: "application/x-protobuf; message=push.v1.ChannelCommand")])
        }

        /// The channel events published for `name`, in order.
        static func events(_ name: String, in world: EngineWorld) -> [(id: String, event: ChannelEvent)] {
            world.feedback.all.compactMap { event in
                if case .channelEvent(let channel)? = event.event, channel.name == name { return (event.eventID, channel) }
                return nil
            }
        }

        static func row(_ name: String, in world: EngineWorld) async throws -> ChannelRow? {
            try await ChannelStore(pool: world.pool).row(bundleID: bundleID, environment: .production, name: name)
        }

        /// The channel ids the simulator holds for the app (Apple's `all-channels`, asked through the
        /// engine's own client).
        static func atApple(_ engine: RunningEngine) async throws -> [String] {
            try await engine.client.listChannels(bundleID: bundleID, environment: .production).channelIDs
        }

        /// The first record of the dead-letter topic, read from its start (the suite's time limit bounds the wait).
        static func firstDeadLetter(in world: EngineWorld) async throws -> DeadLetter {
            var configuration = KafkaConsumerConfiguration(
                bootstrapServers: [world.cluster.bootstrapServers], groupID: "letters-\(UUID())", topics: [world.topics.deadLetter])
            configuration.fetchMaxWait = .milliseconds(10)
            let consumer = try KafkaConsumer(configuration: configuration, logger: EngineWorld.quiet)
            return try await withAsyncCleanup {
                guard let record = await consumer.nextMessages(maxCount: 10).first else { throw TestFailure("the dead-letter reader closed") }
                return try DeadLetter(protobufBytes: record.value)
            } cleanup: {
                await consumer.close()
            }
        }

        /// Runs `body` on a world and an engine started with `configure`, then stops the engine and
        /// closes the world, whether `body` threw or not.
        static func withEngine(
            _ world: EngineWorld, configure: (inout DispatcherConfiguration) -> Void = { _ in },
            _ body: (EngineWorld, RunningEngine) async throws -> Void
        ) async throws {
            let engine: RunningEngine
            do {
                engine = try world.startEngine(configure: configure)
            } catch {
                await world.close()
                throw error
            }
            do {
                try await body(world, engine)
            } catch {
                try? await engine.stop()
                await world.close()
                throw error
            }
            try await engine.stop()
            await world.close()
        }

        static func requests(_ world: EngineWorld, _ method: String) -> Int {
            world.simulator.receivedRequests().filter { $0.method == method && $0.path == "/1/apps/\(bundleID)/channels" }.count
        }

        /// Create → the row active with the simulator's id and CREATED published; the same command
        /// again → CREATED again with the same event id and no second channel at Apple; delete → the
        /// simulator no longer has it and DELETED is published; the delete again → DELETED again, no
        /// Apple request.
        @Test func createRepeatAndDelete() async throws {
            try await Self.withEngine(try await EngineWorld()) { world, engine in
                try await Self.produce(Self.command(.create, "match-1"), in: world)
                try await eventually("CREATED published") { Self.events("match-1", in: world).count == 1 }
                let created = try #require(Self.events("match-1", in: world).first)
                #expect(created.event.kind == .created)
                let row = try #require(try await Self.row("match-1", in: world))
                #expect(row.state == .active && row.storagePolicy == .mostRecentMessageStored)
                #expect(created.event.channelID == row.channelID && !(row.channelID ?? "").isEmpty)
                #expect(try await Self.atApple(engine) == [row.channelID ?? ""])
                #expect(created.id == FeedbackEventID.channelEvent(bundleID: Self.bundleID, environment: .production, name: "match-1", kind: .created))

                try await Self.produce(Self.command(.create, "match-1"), in: world)
                try await eventually("CREATED republished") { Self.events("match-1", in: world).count == 2 }
                let again = Self.events("match-1", in: world)[1]
                #expect(again.id == created.id && again.event.kind == .created && again.event.channelID == row.channelID)
                #expect(Self.requests(world, "POST") == 1)
                #expect(try await Self.atApple(engine).count == 1)

                try await Self.produce(Self.command(.delete, "match-1"), in: world)
                try await eventually("DELETED published") { Self.events("match-1", in: world).count == 3 }
                let deleted = Self.events("match-1", in: world)[2]
                #expect(deleted.event.kind == .deleted && deleted.event.channelID == row.channelID)
                #expect(try await Self.row("match-1", in: world)?.state == .deleted)
                #expect(try await Self.atApple(engine).isEmpty)

                try await Self.produce(Self.command(.delete, "match-1"), in: world)
                try await eventually("DELETED republished") { Self.events("match-1", in: world).count == 4 }
                #expect(Self.events("match-1", in: world)[3].id == deleted.id)
                #expect(Self.requests(world, "DELETE") == 1)
            }
        }

        /// With a limit of 10: ten channels are created; the 11th is refused locally (FAILED
        /// OUTCOME_REASON_CHANNEL_LIMIT) with no request to the simulator.
        @Test func theEleventhChannelIsRefusedLocally() async throws {
            try await Self.withEngine(try await EngineWorld(), configure: { $0.channels.limit = 10 }) { world, engine in
                for index in 0..<10 { try await Self.produce(Self.command(.create, "c\(index)"), in: world) }
                try await eventually("ten CREATED") {
                    (0..<10).allSatisfy { Self.events("c\($0)", in: world).contains { $0.event.kind == .created } }
                }
                #expect(Self.requests(world, "POST") == 10)
                try await Self.produce(Self.command(.create, "c10"), in: world)
                try await eventually("the 11th refused") { !Self.events("c10", in: world).isEmpty }
                let refused = try #require(Self.events("c10", in: world).first?.event)
                #expect(refused.kind == .failed && refused.outcomeReason == .channelLimit && refused.apnsReason.isEmpty)
                #expect(refused.httpStatus == 0 && refused.error.contains("PUSH_CHANNEL_LIMIT"))
                #expect(Self.requests(world, "POST") == 10)
                #expect(try await Self.row("c10", in: world) == nil)
                #expect(try await Self.atApple(engine).count == 10)
            }
        }

        /// Apple's own limit (channels made outside the platform count there): CannotCreateChannelConfig
        /// is FAILED OUTCOME_REASON_CHANNEL_LIMIT with Apple's reason, and the row is failed.
        @Test func applesLimitIsTheSameReason() async throws {
            try await Self.withEngine(try await EngineWorld(channelLimit: 1)) { world, engine in
                try await Self.produce(Self.command(.create, "first"), in: world)
                try await eventually("first CREATED") { Self.events("first", in: world).contains { $0.event.kind == .created } }
                try await Self.produce(Self.command(.create, "second"), in: world)
                try await eventually("second FAILED") { !Self.events("second", in: world).isEmpty }
                let refused = try #require(Self.events("second", in: world).first?.event)
                #expect(refused.kind == .failed && refused.outcomeReason == .channelLimit)
                #expect(refused.apnsReason == "CannotCreateChannelConfig" && refused.httpStatus == 400)
                #expect(try await Self.row("second", in: world)?.state == .failed)
            }
        }

        /// A channel created with delete_after_ms is deleted at Apple by hygiene, marked deleted and
        /// announced DELETED, within a deadline.
        @Test func hygieneDeletesAChannelPastItsDeleteAfter() async throws {
            try await Self.withEngine(try await EngineWorld(), configure: { $0.channels.hygieneInterval = .milliseconds(200) }) { world, engine in
                try await Self.produce(Self.command(.create, "short", deleteAfterMs: 500), in: world)
                try await eventually("CREATED") { Self.events("short", in: world).contains { $0.event.kind == .created } }
                let created = try #require(Self.events("short", in: world).first?.event)
                #expect(created.deleteAtMs >= created.atMs + 500)
                try await eventually("DELETED by hygiene", timeout: .seconds(20)) {
                    Self.events("short", in: world).contains { $0.event.kind == .deleted }
                }
                #expect(try await Self.row("short", in: world)?.state == .deleted)
                #expect(try await Self.atApple(engine).isEmpty)
            }
        }

        /// A create that crashed (a `creating` row two minutes old, its channel made at Apple but never
        /// recorded) is recovered by hygiene: the orphan is deleted at Apple, the channel created again,
        /// the row active with the new id and CREATED published. A channel the app has at Apple beside an
        /// active row is kept only when a row knows it.
        @Test func hygieneRecoversACrashedCreate() async throws {
            try await Self.withEngine(try await EngineWorld(), configure: { $0.channels.hygieneInterval = .milliseconds(200) }) { world, engine in
                try await Self.produce(Self.command(.create, "kept"), in: world)
                try await eventually("kept CREATED") { Self.events("kept", in: world).contains { $0.event.kind == .created } }
                let kept = try #require(try await Self.row("kept", in: world)?.channelID)
                // The crash: Apple made the channel, the process died before writing its id.
                let orphan = try #require(try await engine.client.createChannel(
                    bundleID: Self.bundleID, environment: .production, policy: .noMessageStored).channelID)
                let old = SystemWallClock().nowMilliseconds() - 2 * ChannelLifecycle.crashedAfterMs
                _ = try await world.pool.execute("""
                    INSERT INTO channels (bundle_id, environment, name, state, storage_policy, created_at_ms, updated_at_ms)
                    VALUES ($1, 'production', 'crashed', 'creating', 0, $2, $2)
                    """, [.string(Self.bundleID), .int64(old)])
                try await eventually("CREATED by the recovery", timeout: .seconds(20)) {
                    Self.events("crashed", in: world).contains { $0.event.kind == .created }
                }
                let recovered = try #require(try await Self.row("crashed", in: world))
                #expect(recovered.state == .active && recovered.channelID != nil && recovered.channelID != orphan)
                #expect(Set(try await Self.atApple(engine)) == [kept, recovered.channelID ?? ""])
            }
        }

        /// A bad command is dead-lettered naming the field, and the partition goes on.
        @Test func aBadCommandIsDeadLettered() async throws {
            try await Self.withEngine(try await EngineWorld()) { world, engine in
                var bad = Self.command(.create, "has space")
                bad.name = "has space"
                try await Self.produce(bad, in: world)
                try await Self.produce(Self.command(.create, "after"), in: world)
                try await eventually("the next command applied") { Self.events("after", in: world).contains { $0.event.kind == .created } }
                let letter = try await Self.firstDeadLetter(in: world)
                #expect(letter.error.hasPrefix("name:"), "\(letter.error)")
                #expect(letter.originalKey == Array("\(Self.bundleID)/production/has space".utf8))
                #expect(Self.events("has space", in: world).isEmpty)
            }
        }
    }
}
