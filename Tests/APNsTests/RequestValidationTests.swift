import Foundation
import PushDomain
import Testing
@testable import APNs

@Suite struct RequestValidationTests {
    let token = try! DeviceToken(validating: String(repeating: "5a", count: 32))
    let validator = APNsNotificationValidator()

    func request(_ type: APNsPushType = .alert, _ payload: String, priority: APNsPriority? = nil,
                 collapseID: String? = nil, topic: String? = nil) -> APNsRequest {
        APNsRequest(deviceToken: token, topic: topic ?? type.topic(forBundleID: "com.example.app"), pushType: type,
                    priority: priority, collapseID: collapseID, payload: Array(payload.utf8))
    }

    func refusal(_ request: APNsRequest, with v: APNsNotificationValidator? = nil) -> APNsError? {
        do { try (v ?? validator).validate(request); return nil } catch { return error }
    }

    @Test func sizeIsCountedInUTF8BytesNotCharacters() throws {
        let emoji = #"{"aps":{"alert":{"body":""# + String(repeating: "😀", count: 1020) + #""}}}"#
        #expect(emoji.count == 1049)
        #expect(emoji.utf8.count == 4109)
        let refused = try #require(refusal(request(.alert, emoji)))
        #expect(refused.reason == .payloadTooLarge)
        #expect(refused.message.contains("4109 bytes"))

        let exact = #"{"aps":{"alert":{"body":""# + String(repeating: "a", count: 4067) + #""}}}"#
        #expect(exact.utf8.count == 4096)
        #expect(refusal(request(.alert, exact)) == nil)
        let over = #"{"aps":{"alert":{"body":""# + String(repeating: "a", count: 4068) + #""}}}"#
        #expect(refusal(request(.alert, over))?.reason == .payloadTooLarge)
    }

    @Test func voipAllows5120Bytes() {
        func voip(_ size: Int) -> String {
            let frame = #"{"call":""# + #""}"#
            return #"{"call":""# + String(repeating: "v", count: size - frame.utf8.count) + #""}"#
        }
        #expect(voip(4500).utf8.count == 4500)
        #expect(refusal(request(.voip, voip(4500))) == nil)
        #expect(refusal(request(.voip, voip(5120))) == nil)
        #expect(refusal(request(.voip, voip(5121)))?.reason == .payloadTooLarge)
        #expect(refusal(request(.alert, #"{"aps":{"alert":"x"},"p":""# + String(repeating: "v", count: 4400) + #""}"#))?.reason == .payloadTooLarge)
    }

    @Test func collapseIDIsLimitedTo64Bytes() {
        let alert = #"{"aps":{"alert":"hi"}}"#
        let long = String(repeating: "é", count: 33)
        #expect(long.count == 33 && long.utf8.count == 66)
        let refused = refusal(request(.alert, alert, collapseID: long))
        #expect(refused?.reason == .badCollapseId)
        #expect(refused?.message.contains("66 bytes") == true)
        #expect(refusal(request(.alert, alert, collapseID: String(repeating: "é", count: 32))) == nil)
        #expect(refusal(request(.alert, alert, collapseID: ""))?.reason == .badCollapseId)
    }

    @Test func prioritiesAndBackground() {
        let background = #"{"aps":{"content-available":1},"custom":{"url":"https://x/y"}}"#
        #expect(request(.background, background).effectivePriority == .consideringDevicePower)
        #expect(refusal(request(.background, background)) == nil)
        #expect(refusal(request(.background, background, priority: .immediately))?.reason == .badPriority)
        #expect(refusal(request(.background, background, priority: .prioritizingDevicePower))?.reason == .badPriority)
        #expect(refusal(request(.alert, #"{"aps":{"badge":1}}"#, priority: APNsPriority(rawValue: 7)))?.reason == .badPriority)
        for priority in [APNsPriority.immediately, .consideringDevicePower, .prioritizingDevicePower] {
            #expect(refusal(request(.alert, #"{"aps":{"badge":1}}"#, priority: priority)) == nil)
        }
    }

    @Test func payloadMustBeAJSONObjectThatSuitsThePushType() {
        #expect(refusal(request(.alert, ""))?.reason == .payloadEmpty)
        for bad in ["[1]", "\"aps\"", "{\"aps\":", "{\"aps\":{}} x", "{\"aps\":[]}"] {
            let error = refusal(request(.voip, bad))
            #expect(error?.code == .invalidRequest, "\(bad)")
        }
        var invalidUTF8 = Array(#"{"aps":{"alert":"x"#.utf8); invalidUTF8 += [0xC3, 0x28] + Array(#""}}"#.utf8)
        #expect(refusal(APNsRequest(deviceToken: token, topic: "com.example.app", pushType: .alert, payload: invalidUTF8))?.message.contains("UTF-8") == true)

        func mismatch(_ type: APNsPushType, _ payload: String) -> String? {
            guard let error = refusal(request(type, payload)) else { return nil }
            #expect(error.code == .payloadDoesNotMatchPushType)
            return error.message
        }
        #expect(mismatch(.background, #"{"aps":{"content-available":1,"alert":"hi"}}"#)?.contains("aps.alert") == true)
        #expect(mismatch(.background, #"{"aps":{"content-available":1,"sound":"default"}}"#)?.contains("aps.sound") == true)
        #expect(mismatch(.background, #"{"aps":{"content-available":true}}"#)?.contains("content-available = 1") == true)
        #expect(mismatch(.alert, #"{"aps":{"content-available":1}}"#)?.contains("background") == true)
        #expect(mismatch(.widgets, #"{"aps":{"content-changed":1}}"#)?.contains("content-changed") == true)
        #expect(mismatch(.widgets, #"{"aps":{"content-changed":true}}"#) == nil)
        #expect(mismatch(.liveactivity, #"{"aps":{"content-state":{}}}"#)?.contains("aps.event") == true)
        #expect(mismatch(.liveactivity, #"{"aps":{"event":"start","attributes":{},"alert":"x"}}"#)?.contains("attributes-type") == true)
        #expect(mismatch(.liveactivity, #"{"aps":{"event":"update"}}"#)?.contains("content-state") == true)
        #expect(mismatch(.liveactivity, #"{"aps":{"event":"update","content-state":{"n":1},"timestamp":1}}"#) == nil)
        #expect(mismatch(.mdm, #"{"aps":{}}"#)?.contains("PushMagic") == true)
        #expect(mismatch(.location, "{}") == nil)
        // The same payloads pass Apple's own checks only.
        #expect(refusal(request(.background, #"{"aps":{"content-available":1,"alert":"hi"}}"#), with: .appleChecksOnly) == nil)
    }

    @Test func topicMustCarryThePushTypesSuffix() {
        let voip = refusal(request(.voip, "{}", topic: "com.example.app"))
        #expect(voip?.code == .topicDoesNotMatchPushType)
        #expect(voip?.message.contains(".voip") == true)
        #expect(refusal(request(.alert, #"{"aps":{"alert":"x"}}"#, topic: "com.example.app.voip"))?.code == .topicDoesNotMatchPushType)
        #expect(refusal(request(.pushtotalk, "{}", topic: "com.example.app.voip"))?.code == .topicDoesNotMatchPushType)
        #expect(refusal(request(.pushtotalk, "{}")) == nil)
        #expect(refusal(request(.alert, #"{"aps":{"alert":"x"}}"#, topic: ""))?.reason == .missingTopic)
    }

    @Test func apnsIDMustBeACanonicalUUID() throws {
        let id = try APNsID(validating: "123E4567-E89B-12D3-A456-426614174000")
        #expect(id.uuidString == "123e4567-e89b-12d3-a456-426614174000")
        for bad in ["", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g",
                    "{123e4567-e89b-12d3-a456-426614174000}", "123e4567-e89b-12d3-a456-4266141740000"] {
            #expect(throws: PushDomainError.self) { try APNsID(validating: bad) }
            do { _ = try APNsID(validating: bad) } catch { #expect(APNsError(error).reason == .badMessageId) }
        }
        for _ in 0..<100 {
            let random = APNsID.random()
            #expect(try APNsID(validating: random.uuidString) == random)
            #expect(UUID(uuidString: random.uuidString) != nil)
        }
    }

    @Test func payloadBytesAreNeverRewritten() throws {
        let payload = #"{"aps":{"alert":"a/b \u00e9 1.0e2"},"url":"https://x.example/p?q=1"}"#
        let request = request(.alert, payload)
        try validator.validate(request)
        #expect(request.payload == Array(payload.utf8))
    }

    @Test func headerList() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        let jwt = try APNsJWT(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_700_000_000, signingKey: key)
        var full = request(.background, #"{"aps":{"content-available":1}}"#, collapseID: "c1")
        full.expiration = .at(secondsSinceEpoch: 1_700_003_600)
        full.apnsID = try APNsID(validating: "123e4567-e89b-12d3-a456-426614174000")
        let headers = full.headers(providerToken: jwt)
        #expect(headers.map(\.name) == [":method", ":path", "apns-topic", "apns-push-type", "apns-priority",
                                         "apns-expiration", "apns-collapse-id", "apns-id", "authorization"])
        #expect(headers.map(\.value) == ["POST", "/3/device/" + token.hex, "com.example.app", "background", "5",
                                          "1700003600", "c1", "123e4567-e89b-12d3-a456-426614174000", "bearer " + jwt.token])
        let minimal = request(.alert, "{}").headers()
        #expect(minimal.map(\.name) == [":method", ":path", "apns-topic", "apns-push-type", "apns-priority"])
        #expect(minimal[4].value == "10")
        var immediate = request(.pushtotalk, "{}")
        immediate.expiration = .immediately
        #expect(immediate.headers().first { $0.name == "apns-expiration" }?.value == "0")
    }

    @Test func parsesIncomingRequestsLikeAPNs() throws {
        let base: [(name: String, value: String)] = [(":method", "POST"), (":scheme", "https"), (":path", "/3/device/" + token.hex),
                                                      ("apns-topic", "com.example.app"), ("apns-push-type", "alert")]
        let body = Array(#"{"aps":{"alert":"x"}}"#.utf8)
        let parsed = try APNsRequest(parsingHeaders: base + [("apns-priority", "5"), ("apns-expiration", "0"), ("apns-collapse-id", "c")], body: body)
        #expect(parsed.deviceToken == token && parsed.priority == .consideringDevicePower && parsed.expiration == .immediately && parsed.collapseID == "c")
        #expect(parsed.headers().contains { $0.name == "apns-priority" && $0.value == "5" })
        func reason(_ headers: [(name: String, value: String)], _ body: [UInt8] = Array("{}".utf8)) -> APNsReason? {
            do {
                let request = try APNsRequest(parsingHeaders: headers, body: body)
                try APNsNotificationValidator.appleChecksOnly.validate(request)
                return nil
            } catch { return error.reason }
        }
        func replacing(_ name: String, _ value: String?) -> [(name: String, value: String)] {
            var headers = base.filter { $0.name != name }
            if let value { headers.append((name, value)) }
            return headers
        }
        #expect(reason(base) == nil)
        #expect(reason(replacing(":method", "GET")) == .methodNotAllowed)
        #expect(reason(replacing(":path", "/3/devices/ab")) == .badPath)
        #expect(reason(replacing(":path", "/3/device/")) == .missingDeviceToken)
        #expect(reason(replacing(":path", "/3/device/abc")) == .badDeviceToken)
        #expect(reason(replacing("apns-push-type", "silent")) == .invalidPushType)
        #expect(reason(replacing("apns-topic", nil)) == .missingTopic)
        #expect(reason(replacing("apns-priority", "high")) == .badPriority)
        #expect(reason(replacing("apns-priority", "7")) == .badPriority)
        #expect(reason(replacing("apns-expiration", "tomorrow")) == .badExpirationDate)
        #expect(reason(replacing("apns-id", "nope")) == .badMessageId)
        #expect(reason(base + [("apns-topic", "again")]) == .duplicateHeaders)
        #expect(reason(base, []) == .payloadEmpty)
        #expect(reason(base, Array(repeating: 0x20, count: 4097)) == .payloadTooLarge)
        #expect(reason(replacing("apns-collapse-id", String(repeating: "x", count: 65))) == .badCollapseId)
        #expect(APNsReason.badPath.httpStatus == 404 && APNsReason.methodNotAllowed.httpStatus == 405)
    }
}
