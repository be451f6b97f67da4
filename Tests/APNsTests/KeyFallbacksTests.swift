import APNs
import Testing

/// `APNsKeyFallbacks` without I/O: which answers send a notification to the key before the one being
/// rotated in, and how long the refused key is left out.
@Suite struct KeyFallbacksTests {
    final class Key {}

    @Test func onlyAnswersThatBlameTheKeyFallBack() {
        let keyFaults: [APNsReason] = [.invalidProviderToken, .expiredProviderToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken,
                                       .unrelatedKeyIdInToken, .missingProviderToken]
        for reason in keyFaults { #expect(APNsKeyFallbacks.fallsBack(status: 403, reason: reason), "\(reason)") }
        #expect(APNsKeyFallbacks.fallsBack(status: 400, reason: .topicDisallowed))
        for reason in APNsReason.documented where !keyFaults.contains(reason) && reason != .topicDisallowed {
            #expect(!APNsKeyFallbacks.fallsBack(status: reason.httpStatus!, reason: reason), "\(reason)")
        }
        #expect(!APNsKeyFallbacks.fallsBack(status: 403, reason: nil))
        #expect(!APNsKeyFallbacks.fallsBack(status: 403, reason: .unknown("InvalidProviderTokenish")))
        #expect(!APNsKeyFallbacks.fallsBack(status: 400, reason: .badDeviceToken), "a device's reason never moves keys")
    }

    @Test func aRefusedKeyIsLeftOutPerBundleIDUntilItsRetryThenForgottenWhenAccepted() {
        let (new, other) = (Key(), Key())
        let id = ObjectIdentifier(new)
        var fallbacks = APNsKeyFallbacks(retryDelay: .seconds(60))
        #expect(fallbacks.isEmpty)
        #expect(!fallbacks.sendsToFallback(key: id, bundleID: "com.example.app", now: 0))
        let first = fallbacks.refuse(key: id, keyID: "NEWKEY0001", teamID: "TEAM000001", bundleID: "com.example.app",
                                     fallbackKeyID: "OLDKEY0001", reason: .invalidProviderToken, now: 1_000)
        #expect(first?.retryAt == 61_000)
        #expect(first?.refusals == 1)
        // A send under way when the refusal came is refused too: no second record, no second log line.
        #expect(fallbacks.refuse(key: id, keyID: "NEWKEY0001", teamID: "TEAM000001", bundleID: "com.example.app",
                                 fallbackKeyID: "OLDKEY0001", reason: .invalidProviderToken, now: 1_500) == nil)
        #expect(fallbacks.sendsToFallback(key: id, bundleID: "com.example.app", now: 60_999))
        #expect(!fallbacks.sendsToFallback(key: id, bundleID: "com.example.other", now: 2_000), "per bundle ID")
        #expect(!fallbacks.sendsToFallback(key: ObjectIdentifier(other), bundleID: "com.example.app", now: 2_000), "per key")
        #expect(!fallbacks.sendsToFallback(key: id, bundleID: "com.example.app", now: 61_000), "tried again after the delay")
        // Refused again on the retry: left out for another delay, since unchanged.
        let again = fallbacks.refuse(key: id, keyID: "NEWKEY0001", teamID: "TEAM000001", bundleID: "com.example.app",
                                     fallbackKeyID: "OLDKEY0001", reason: .badEnvironmentKeyInToken, now: 61_000)
        #expect(again?.refusals == 2)
        #expect(again?.since == 1_000)
        #expect(again?.reason == .badEnvironmentKeyInToken)
        #expect(fallbacks.refusals.map(\.keyID) == ["NEWKEY0001"])
        // Accepted: forgotten.
        #expect(fallbacks.accept(key: id, bundleID: "com.example.app")?.refusals == 2)
        #expect(fallbacks.isEmpty)
        #expect(!fallbacks.sendsToFallback(key: id, bundleID: "com.example.app", now: 62_000))
        withExtendedLifetime((new, other)) {}
    }
}
