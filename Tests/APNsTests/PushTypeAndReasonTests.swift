import PushDomain
import Testing
@testable import APNs

@Suite struct PushTypeTests {
    @Test func headerValuesTopicsAndTokenKinds() {
        let expected: [(APNsPushType, String, String, APNsTokenKind)] = [
            (.alert, "alert", "com.example.app", .standard),
            (.background, "background", "com.example.app", .standard),
            (.voip, "voip", "com.example.app.voip", .voip),
            (.complication, "complication", "com.example.app.complication", .complication),
            (.fileprovider, "fileprovider", "com.example.app.pushkit.fileprovider", .fileProvider),
            (.mdm, "mdm", "com.example.app", .mdm),
            (.location, "location", "com.example.app.location-query", .location),
            (.liveactivity, "liveactivity", "com.example.app.push-type.liveactivity", .liveActivity),
            (.pushtotalk, "pushtotalk", "com.example.app.voip-ptt", .pushToTalk),
            (.widgets, "widgets", "com.example.app.push-type.widgets", .widget),
            (.controls, "controls", "com.example.app.push-type.controls", .standard),
        ]
        #expect(APNsPushType.allCases.count == 11)
        for (type, header, topic, kind) in expected {
            #expect(type.rawValue == header)
            #expect(APNsPushType(rawValue: header) == type)
            #expect(type.topic(forBundleID: "com.example.app") == topic)
            #expect(type.tokenKind == kind)
        }
    }

    @Test func prioritiesSizesAndAuthentication() {
        for type in APNsPushType.allCases {
            #expect(type.defaultPriority.rawValue == (type == .background ? 5 : 10))
            #expect(type.maximumPayloadBytes == (type == .voip ? 5120 : 4096))
            #expect(type.requiresTokenAuthentication == (type == .location))
            #expect(type.requiresCertificateAuthentication == (type == .mdm))
        }
    }

    @Test func liveActivityStartNeedsAPushToStartToken() {
        let start = Array(#"{"aps":{"event":"start","attributes-type":"T","attributes":{},"alert":"x"}}"#.utf8)
        let update = Array(#"{"aps":{"event":"update","content-state":{}}}"#.utf8)
        #expect(APNsPushType.liveactivity.tokenKind(forPayload: start) == .pushToStart)
        #expect(APNsPushType.liveactivity.tokenKind(forPayload: update) == .liveActivity)
        #expect(APNsPushType.liveactivity.tokenKind(forPayload: Array("not json".utf8)) == .liveActivity)
        #expect(APNsPushType.alert.tokenKind(forPayload: start) == .standard)
    }
}

@Suite struct ReasonTests {
    @Test func rawValuesAreApplesExactStringsWithTheirStatus() {
        let table: [(String, Int)] = [
            ("BadCollapseId", 400), ("BadDeviceToken", 400), ("BadExpirationDate", 400), ("BadMessageId", 400),
            ("BadPriority", 400), ("BadTopic", 400), ("DeviceTokenNotForTopic", 400), ("DuplicateHeaders", 400),
            ("IdleTimeout", 400), ("InvalidPushType", 400), ("MissingDeviceToken", 400), ("MissingTopic", 400),
            ("PayloadEmpty", 400), ("TopicDisallowed", 400), ("BadCertificate", 403),
            ("BadCertificateEnvironment", 403), ("ExpiredProviderToken", 403), ("Forbidden", 403),
            ("InvalidProviderToken", 403), ("MissingProviderToken", 403), ("UnrelatedKeyIdInToken", 403),
            ("BadEnvironmentKeyIdInToken", 403), ("BadPath", 404), ("MethodNotAllowed", 405),
            ("ExpiredToken", 410), ("Unregistered", 410), ("PayloadTooLarge", 413),
            ("TooManyProviderTokenUpdates", 429), ("TooManyRequests", 429), ("InternalServerError", 500),
            ("ServiceUnavailable", 503), ("Shutdown", 503),
        ]
        #expect(APNsReason.documented.count == table.count)
        for (name, status) in table {
            let reason = APNsReason(rawValue: name)
            #expect(reason.rawValue == name)
            #expect(reason.httpStatus == status, "\(name)")
            if case .unknown = reason { Issue.record("\(name) parsed as unknown") }
        }
        #expect(APNsReason(rawValue: "badDeviceToken") == .unknown("badDeviceToken"))
    }

    @Test func actionsFollowTheRetryRules() {
        #expect(APNsReason.unregistered.action == .deactivateToken)
        #expect(APNsReason.expiredToken.action == .deactivateToken)
        #expect(APNsReason.badDeviceToken.action == .deactivateToken)
        #expect(APNsReason.badDeviceToken.mayMeanWrongEnvironment)
        #expect(APNsReason.internalServerError.action == .retryWithBackoff)
        #expect(APNsReason.serviceUnavailable.action == .retryWithBackoff)
        #expect(APNsReason.shutdown.action == .retryOnNewConnection)
        #expect(APNsReason.idleTimeout.action == .retryOnNewConnection)
        #expect(APNsReason.expiredProviderToken.action == .refreshProviderTokenAndRetryOnce)
        #expect(APNsReason.tooManyProviderTokenUpdates.action == .retryAfterDelayKeepingJWT)
        #expect(APNsReason.tooManyProviderTokenUpdates.raisesAlert)
        #expect(APNsReason.tooManyRequests.action == .backOffDeviceToken)
        let rejected: [APNsReason] = [.badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
            .deviceTokenNotForTopic, .duplicateHeaders, .invalidPushType, .missingDeviceToken, .missingTopic,
            .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment, .forbidden,
            .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken,
            .badPath, .methodNotAllowed, .payloadTooLarge, .unknown("SomethingNew")]
        for reason in rejected { #expect(reason.action == .reject, "\(reason)") }
        #expect(APNsReason.unknown("SomethingNew").raisesAlert)
        // Only these three ever deactivate a token (docs/semantics.md "Token hygiene follows Apple").
        #expect(APNsReason.documented.filter { $0.action == .deactivateToken } == [.badDeviceToken, .expiredToken, .unregistered])
        #expect(APNsReason.action(forStatus: 503, reason: nil) == .retryWithBackoff)
        #expect(APNsReason.action(forStatus: 500, reason: .unknown("Odd")) == .retryWithBackoff)
        #expect(APNsReason.action(forStatus: 410, reason: .unknown("Odd")) == .reject)
        #expect(APNsReason.action(forStatus: 410, reason: .unregistered) == .deactivateToken)
    }

    /// Field reports show the wrong-environment-key reason spelled two ways: both parse, keep what APNs
    /// said, and get the same status, action, alert and provider-fault treatment.
    @Test func bothSpellingsOfTheWrongEnvironmentKeyReasonAreOneReason() {
        let apple = APNsReason(rawValue: "BadEnvironmentKeyIdInToken")
        let field = APNsReason(rawValue: "BadEnvironmentKeyInToken")
        #expect(apple == .badEnvironmentKeyIdInToken)
        #expect(field == .badEnvironmentKeyInToken)
        #expect(field.rawValue == "BadEnvironmentKeyInToken")
        for reason in [apple, field] {
            #expect(reason.isWrongEnvironmentKey)
            #expect(reason.httpStatus == 403)
            #expect(reason.action == .reject)
            #expect(reason.raisesAlert)
            #expect(reason.isProviderTokenFault)
            var machine = APNsRetryStateMachine(
                policy: .init(backoff: .init(initial: .milliseconds(1), maximum: .milliseconds(2)), tooManyRequestsDelay: .seconds(1),
                              providerTokenUpdateDelay: .seconds(1), maxUnprocessedResends: 1),
                deadlineMilliseconds: 10_000)
            #expect(machine.handle(.response(status: 403, reason: reason), nowMilliseconds: 0) == .stop(.providerTokenFault))
            #expect(APNsClient.providerTokenFaultCause(reason, skewSeconds: 0) == APNsClient.providerTokenFaultCause(apple, skewSeconds: 0))
        }
        #expect(APNsErrorResponse(parsing: Array(#"{"reason":"BadEnvironmentKeyInToken"}"#.utf8)).reason == .badEnvironmentKeyInToken)
        #expect(!APNsReason.unrelatedKeyIdInToken.isWrongEnvironmentKey)
        #expect(!APNsReason.documented.contains(.badEnvironmentKeyInToken), "Apple's table keeps its own spelling")
    }

    @Test func errorBodiesParseRobustly() {
        let gone = APNsErrorResponse(parsing: Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8))
        #expect(gone.reason == .unregistered)
        #expect(gone.timestampMilliseconds == 1_700_000_000_123)
        #expect(APNsErrorResponse(parsing: Array(#" { "reason" : "BadDeviceToken" } "#.utf8)).reason == .badDeviceToken)
        #expect(APNsErrorResponse(parsing: Array(#"{"reason":"BrandNewReason"}"#.utf8)).reason == .unknown("BrandNewReason"))
        #expect(APNsErrorResponse(parsing: Array(#"{"reason":"Unregistered","timestamp":1.7e12}"#.utf8)).timestampMilliseconds == 1_700_000_000_000)
        let odd: [String] = ["", "null", "[]", "{", #"{"reason":42}"#, #"{"reason":"Shutdown""#, "\u{FF}\u{FE}",
                             #"{"reason":"Unregistered","timestamp":"soon"}"#, String(repeating: "[", count: 100_000)]
        for body in odd {
            let parsed = APNsErrorResponse(parsing: Array(body.utf8))
            #expect(parsed.timestampMilliseconds == nil)
            if body.hasPrefix(#"{"reason":"Unregistered""#) { #expect(parsed.reason == .unregistered) } else { #expect(parsed.reason == nil) }
        }
        let written = APNsErrorResponse(reason: .unregistered, timestampMilliseconds: 12)
        #expect(String(decoding: written.body, as: UTF8.self) == #"{"reason":"Unregistered","timestamp":12}"#)
        #expect(APNsErrorResponse(parsing: written.body) == written)
    }
}
