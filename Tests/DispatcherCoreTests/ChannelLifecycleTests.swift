import Kafka
import PushDomain
import PushMessages
import Testing

@testable import DispatcherCore

/// The broadcast channel's state machine and the check of `ChannelCommand` records
/// (docs/live-activities.md), without I/O.
@Suite struct ChannelLifecycleTests {
    static let now: Int64 = 1_800_000_000_000

    static func command(_ action: ChannelCommand.Action, name: String = "match-8812") -> ChannelCommand {
        var command = ChannelCommand()
        command.action = action
        command.bundleID = "com.example.scores"
        command.environment = .production
        command.name = name
        return command
    }

    static func row(_ state: ChannelState, id: String? = "ch1", updatedAtMs: Int64 = now, deleteAtMs: Int64? = nil) -> ChannelRow {
        ChannelRow(bundleID: "com.example.scores", environment: .production, name: "match-8812", channelID: id, state: state,
                   deleteAtMs: deleteAtMs, createdAtMs: updatedAtMs, updatedAtMs: updatedAtMs)
    }

    // MARK: Commands

    @Test func aCreateReservesWhenNoRowOrAFailedRowHasTheName() {
        #expect(ChannelLifecycle.step(for: Self.command(.create), row: nil) == .reserveAndCreate)
        #expect(ChannelLifecycle.step(for: Self.command(.create), row: Self.row(.failed, id: nil)) == .reserveAndCreate)
    }

    /// Idempotent repeats: a create for an active row and a delete for a deleted one publish their
    /// event again with the same event id, and ask Apple nothing.
    @Test func repeatsRepublishTheSameEvent() {
        #expect(ChannelLifecycle.step(for: Self.command(.create), row: Self.row(.active)) == .republish(.created))
        #expect(ChannelLifecycle.step(for: Self.command(.delete), row: Self.row(.deleted)) == .republish(.deleted))
        let first = ChannelLifecycle.event(.created, row: Self.row(.active), atMs: Self.now)
        let again = ChannelLifecycle.event(.created, row: Self.row(.active), atMs: Self.now + 5_000)
        #expect(first.eventID == again.eventID)
        #expect(first.eventID == FeedbackEventID.channelEvent(bundleID: "com.example.scores", environment: .production, name: "match-8812", kind: .created))
        #expect(first.channelID == "ch1")
        let deleted = ChannelLifecycle.event(.deleted, row: Self.row(.deleted), atMs: Self.now)
        #expect(deleted.eventID != first.eventID)
    }

    @Test func aDeleteAsksAppleForTheRowsChannel() {
        #expect(ChannelLifecycle.step(for: Self.command(.delete), row: Self.row(.active)) == .deleteAtApple(channelID: "ch1"))
        // A delete that did not get through is asked again.
        #expect(ChannelLifecycle.step(for: Self.command(.delete), row: Self.row(.deleting)) == .deleteAtApple(channelID: "ch1"))
        // A failed create holds nothing at Apple.
        #expect(ChannelLifecycle.step(for: Self.command(.delete), row: Self.row(.failed, id: nil)) == .markDeleted)
        // An unanswered create: the recovery settles it.
        #expect(ChannelLifecycle.step(for: Self.command(.delete), row: Self.row(.creating, id: nil)) == .deleteAfterRecovery)
        #expect(ChannelLifecycle.step(for: Self.command(.create), row: Self.row(.creating, id: nil)) == .awaitRecovery)
    }

    @Test func refusalsNameTheReason() {
        guard case .refuse(let reason, let error) = ChannelLifecycle.step(for: Self.command(.delete, name: "nope"), row: nil) else {
            Issue.record("a delete of an unknown name was not refused")
            return
        }
        #expect(reason == .channelNotRegistered)
        #expect(error.contains("\"nope\""))
        guard case .refuse(let again, let text) = ChannelLifecycle.step(for: Self.command(.create), row: Self.row(.deleted)) else {
            Issue.record("a create of a deleted name was not refused")
            return
        }
        #expect(again == .invalidRequest)
        #expect(text.hasPrefix("name:"))
    }

    // MARK: Apple's answers

    @Test func createAnswers() {
        #expect(ChannelLifecycle.afterCreate(.success(channelID: "abc=")) == .init(state: .active, channelID: "abc=", kind: .created))
        let limit = ChannelLifecycle.afterCreate(.refused(status: 400, reason: "CannotCreateChannelConfig"))
        #expect(limit.state == .failed && limit.kind == .failed && limit.outcomeReason == .channelLimit)
        #expect(limit.apnsReason == "CannotCreateChannelConfig" && limit.httpStatus == 400)
        let disabled = ChannelLifecycle.afterCreate(.refused(status: 400, reason: "FeatureNotEnabled"))
        #expect(disabled.state == .failed && disabled.outcomeReason == .unspecified && disabled.apnsReason == "FeatureNotEnabled")
        let noCredential = ChannelLifecycle.afterCreate(.failed(.noCredential, error: "no key"))
        #expect(noCredential.state == .failed && noCredential.outcomeReason == .noCredential && noCredential.httpStatus == 0)
        // No answer: Apple may have the channel; the row stays creating for the recovery, nothing published.
        let lost = ChannelLifecycle.afterCreate(.failed(.connectionError, error: "reset"))
        #expect(lost.state == .creating && lost.kind == .unspecified)
                // A 201 without Apple's id cannot be used.
        #expect(ChannelLifecycle.afterCreate(.success(channelID: nil)).state == .failed)
    }

    @Test func deleteAnswers() {
        #expect(ChannelLifecycle.afterDelete(.success(channelID: nil)).state == .deleted)
        // Apple no longer knows it: deleted all the same.
        let gone = ChannelLifecycle.afterDelete(.refused(status: 404, reason: "ChannelNotRegistered"))
        #expect(gone.state == .deleted && gone.kind == .deleted)
        let failed = ChannelLifecycle.afterDelete(.refused(status: 500, reason: "InternalServerError"))
        #expect(failed.state == .deleting && failed.kind == .failed)
        #expect(ChannelLifecycle.afterDelete(.failed(.connectionError, error: "reset")).state == .deleting)
    }

    // MARK: Hygiene

    @Test func hygieneDeletesDueChannelsAndRecoversCrashedCommands() {
        let minute = ChannelLifecycle.crashedAfterMs
        #expect(ChannelLifecycle.hygiene(Self.row(.active, deleteAtMs: Self.now), nowMs: Self.now) == .deleteAtApple(channelID: "ch1"))
        #expect(ChannelLifecycle.hygiene(Self.row(.active, deleteAtMs: Self.now + 1), nowMs: Self.now) == .none)
        #expect(ChannelLifecycle.hygiene(Self.row(.active), nowMs: Self.now + 10 * minute) == .none)
        #expect(ChannelLifecycle.hygiene(Self.row(.creating, id: nil), nowMs: Self.now + minute - 1) == .none)
        #expect(ChannelLifecycle.hygiene(Self.row(.creating, id: nil), nowMs: Self.now + minute) == .recover)
        #expect(ChannelLifecycle.hygiene(Self.row(.deleting, id: nil), nowMs: Self.now + minute) == .recover)
        #expect(ChannelLifecycle.hygiene(Self.row(.deleting), nowMs: Self.now + minute) == .deleteAtApple(channelID: "ch1"))
        #expect(ChannelLifecycle.hygiene(Self.row(.deleted), nowMs: Self.now + minute) == .none)
    }

    /// Orphans are the ids no row knows, and none while a create may be waiting for Apple.
    @Test func orphansWaitForYoungCreates() {
        let minute = ChannelLifecycle.crashedAfterMs
        let rows = [Self.row(.active, id: "a"), Self.row(.creating, id: nil, updatedAtMs: Self.now - minute)]
        #expect(ChannelLifecycle.orphans(atApple: ["a", "b"], rows: rows, nowMs: Self.now) == ["b"])
        let young = rows + [Self.row(.creating, id: nil, updatedAtMs: Self.now - 10)]
        #expect(ChannelLifecycle.orphans(atApple: ["a", "b"], rows: young, nowMs: Self.now) == nil)
    }

    // MARK: Records

    static func record(_ command: ChannelCommand, key: String? = nil, json: Bool = false) -> KafkaMessage {
        let value = json ? command.jsonUTF8Bytes() : command.serializedBytes()
        let type = (json ? "application/json" : "application/x-protobuf") + "; message=push.v1.ChannelCommand"
        return KafkaMessage(
            topic: "t", partition: 0, offset: 1,
            key: Array((key ?? ChannelCommand.recordKey(bundleID: command.bundleID, environment: command.environment, name: command.name)).utf8),
            value: value, headers: [KafkaHeader(name: "content-type", value: type)], timestamp: nil)
    }

    func refusal(_ message: KafkaMessage) -> String? {
        do {
            _ = try ChannelCommandDecoder.channelCommand(in: message)
            return nil
        } catch {
            return error.description
        }
    }

    @Test func aGoodCommandIsReadInBothEncodings() throws {
        let command = Self.command(.create)
        #expect(try ChannelCommandDecoder.channelCommand(in: Self.record(command)) == command)
        #expect(try ChannelCommandDecoder.channelCommand(in: Self.record(command, json: true)) == command)
        #expect(Self.record(command).key.map { String(decoding: $0, as: UTF8.self) } == "com.example.scores/production/match-8812")
        // Another message's record is not a channel command.
        let other = KafkaMessage(topic: "t", partition: 0, offset: 1, key: nil, value: [],
                                 headers: [KafkaHeader(name: "content-type", value: SendRequest.protobufContentType)], timestamp: nil)
        #expect(try ChannelCommandDecoder.channelCommand(in: other) == nil)
    }

    /// Each bad field is refused by its name.
    @Test func badCommandsNameTheField() {
        var command = Self.command(.unspecified)
        #expect(refusal(Self.record(command))?.hasPrefix("action:") == true)
        command = Self.command(.create)
        command.bundleID = ""
        #expect(refusal(Self.record(command))?.hasPrefix("bundle_id:") == true)
        command.bundleID = "com.example.scores.push-type.liveactivity"
        #expect(refusal(Self.record(command))?.hasPrefix("bundle_id:") == true)
        command = Self.command(.create)
        command.environment = .unspecified
        #expect(refusal(Self.record(command, key: "com.example.scores/production/match-8812"))?.hasPrefix("environment:") == true)
        for bad in ["", String(repeating: "a", count: 129), "a b", "match/1", "é"] {
            let named = Self.command(.create, name: bad)
            #expect(refusal(Self.record(named))?.hasPrefix("name:") == true, "name \(bad)")
        }
        #expect(refusal(Self.record(Self.command(.create, name: String(repeating: "a", count: 128)))) == nil)
        #expect(refusal(Self.record(Self.command(.create, name: "A.b_c-d:9"))) == nil)
        command = Self.command(.create)
        command.deleteAfterMs = -1
        #expect(refusal(Self.record(command))?.hasPrefix("delete_after_ms:") == true)
        #expect(refusal(Self.record(Self.command(.create), key: "com.example.scores/sandbox/match-8812"))?.hasPrefix("key:") == true)
        let garbage = KafkaMessage(topic: "t", partition: 0, offset: 1, key: nil, value: [0xff, 0xff],
                                   headers: [KafkaHeader(name: "content-type", value: "application/x-protobuf; message=push.v1.ChannelCommand")], timestamp: nil)
        #expect(refusal(garbage)?.hasPrefix("undecodable ChannelCommand") == true)
    }
}
