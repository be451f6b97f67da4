import Foundation
import Postgres
import PushMessages
import Testing

@testable import DispatcherCore

/// `TokenEventBatch` without I/O: which events may share a statement.
@Suite struct TokenEventBatchTests {
    static let a = String(repeating: "a", count: 64), b = String(repeating: "b", count: 64)
    static let c = String(repeating: "c", count: 64), d = String(repeating: "d", count: 64)

    static func register(_ token: String, at time: Int64, installation: String = "", kind: TokenKind = .standard,
                         bundle: String = "com.example.app") -> TokenEvent {
        TokenEvent(eventID: UUID().uuidString, action: .registered,
                   device: Device(deviceToken: token, bundleID: bundle, environment: .sandbox, kind: kind,
                                  userID: "u", installationID: installation),
                   eventTimeMs: time)
    }

    static func unregister(_ token: String, at time: Int64) -> TokenEvent {
        TokenEvent(eventID: UUID().uuidString, action: .unregistered,
                   device: Device(deviceToken: token, bundleID: "com.example.app"), eventTimeMs: time)
    }

    static func layout(_ batch: TokenEventBatch) -> [[String]] {
        batch.layers.map { layer in
            layer.registrations.map { "r\($0.token.prefix(1))\($0.eventTimeMs)" }
                + layer.unregistrations.map { "u\($0.token.prefix(1))\($0.eventTimeMs)" }
        }
    }

    @Test func eventsOfDistinctTokensAndKeysShareOneLayer() {
        let batch = TokenEventBatch([
            Self.register(Self.a, at: 1, installation: "x"), Self.register(Self.b, at: 2, installation: "y"),
            Self.register(Self.c, at: 3), Self.unregister(Self.d, at: 4),
        ])
        #expect(Self.layout(batch) == [["ra1", "rb2", "rc3", "ud4"]])
        #expect(batch.eventCount == 4)
    }

    @Test func aRepeatedTokenGoesToTheNextLayerInOrder() {
        let batch = TokenEventBatch([
            Self.register(Self.a, at: 5), Self.unregister(Self.a, at: 3), Self.register(Self.a, at: 4),
            Self.register(Self.b, at: 1),
        ])
        // b conflicts with nothing: it stays in the first layer although it comes last.
        #expect(Self.layout(batch) == [["ra5", "rb1"], ["ua3"], ["ra4"]])
    }

    @Test func registrationsWithTheSameReplacementKeyAreSeparated() {
        let batch = TokenEventBatch([
            Self.register(Self.a, at: 5, installation: "x"), Self.register(Self.b, at: 2, installation: "x"),
            // Another kind, bundle or installation is another key.
            Self.register(Self.c, at: 1, installation: "x", kind: .voip),
            Self.register(Self.d, at: 1, installation: "x", bundle: "com.example.other"),
        ])
        #expect(Self.layout(batch) == [["ra5", "rc1", "rd1"], ["rb2"]])
    }

    @Test func aLayerFollowsTheLatestConflictOfTokenOrKey() {
        let batch = TokenEventBatch([
            Self.register(Self.a, at: 1), Self.register(Self.a, at: 2), Self.register(Self.a, at: 3, installation: "x"),
            Self.register(Self.b, at: 4, installation: "x"),  // key of a's layer 2
            Self.unregister(Self.b, at: 5),                    // token of layer 3
            Self.register(Self.c, at: 6, installation: "y"),
        ])
        #expect(Self.layout(batch) == [["ra1", "rc6"], ["ra2"], ["ra3"], ["rb4"], ["ub5"]])
    }

    @Test func rotationsAndForgetsAreBarriers() {
        var rotation = Self.register(Self.c, at: 3)
        rotation.previousToken = Self.a
        let forget = TokenEvent(eventID: "f", action: .userForgotten, device: Device(bundleID: "com.example.app", userID: "u"), eventTimeMs: 4)
        let batch = TokenEventBatch([
            Self.register(Self.a, at: 1), Self.register(Self.b, at: 2), rotation, Self.register(Self.d, at: 5), forget,
            Self.unregister(Self.a, at: 6),
        ])
        // d conflicts with nothing but may not move before the rotation; nothing moves across the forget.
        #expect(Self.layout(batch) == [["ra1", "rb2"], ["rc3"], ["rd5"], [], ["ua6"]])
        #expect(batch.layers[3].forgets.count == 1 && batch.eventCount == 6)
    }

    @Test func eventsThatChangeNothingAreDropped() {
        var noDevice = Self.register(Self.a, at: 1)
        noDevice.device = nil
        var unspecified = Self.register(Self.b, at: 1)
        unspecified.action = .unspecified
        let batch = TokenEventBatch([noDevice, unspecified])
        #expect(batch.layers.isEmpty && batch.eventCount == 0)
    }

    @Test func registrationsAreStoredAsTheSingleEventPathStoresThem() throws {
        var event = Self.register(Self.a, at: 7, installation: "x", kind: .unspecified)
        event.device?.environment = .unspecified
        event.device?.attributes = ["locale": "de_CH"]
        let registration = try #require(TokenEventBatch([event]).layers.first?.registrations.first)
        #expect(registration.environment == "production" && registration.kind == "standard")
        #expect(registration.attributes == #"{"locale":"de_CH"}"#)
        #expect(registration.replacementKey == .init(bundleID: "com.example.app", installationID: "x", kind: "standard"))
    }
}
