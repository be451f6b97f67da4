import APNsSimulator
import ServiceCore
import Testing
@testable import APNs

/// The decisions `APNsClient.send` performs, without I/O: the attempt's time budget, the circuit
/// breaker's admission, the choice of credentials and each connection's provider token.
@Suite struct SendDecisionTests {
    @Test func theStreamGetsWhatIsLeftOfTheAttemptBudget() {
        let budget = APNsAttemptBudget(requestTimeout: .seconds(30), connectTimeout: .seconds(10))
        #expect(budget.total == .seconds(40))
        #expect(budget.streamTimeout(afterWaiting: .zero) == .seconds(30))           // at most the request timeout
        #expect(budget.streamTimeout(afterWaiting: .seconds(10)) == .seconds(30))
        #expect(budget.streamTimeout(afterWaiting: .seconds(15)) == .seconds(25))     // the rest of the budget
        #expect(budget.streamTimeout(afterWaiting: .seconds(40)) == .milliseconds(1)) // never zero
        #expect(budget.streamTimeout(afterWaiting: .seconds(90)) == .milliseconds(1))
    }

    @Test func theHalfOpenTrialIsNeverANotificationWithAFailureOfItsOwn() {
        #expect(APNsCircuitAdmission.mayProbe(hadTokenFailure: false, circuit: .closed, deviceHasFailureHistory: true))
        #expect(APNsCircuitAdmission.mayProbe(hadTokenFailure: false, circuit: .halfOpen, deviceHasFailureHistory: false))
        #expect(!APNsCircuitAdmission.mayProbe(hadTokenFailure: false, circuit: .halfOpen, deviceHasFailureHistory: true))
        #expect(!APNsCircuitAdmission.mayProbe(hadTokenFailure: false, circuit: .open, deviceHasFailureHistory: true))
        #expect(!APNsCircuitAdmission.mayProbe(hadTokenFailure: true, circuit: .closed, deviceHasFailureHistory: false))
        var asked = false
        _ = APNsCircuitAdmission.mayProbe(hadTokenFailure: false, circuit: .closed, deviceHasFailureHistory: { asked = true; return true }())
        #expect(!asked, "a closed breaker does not look the device token up")
    }

    @Test func aCallerThatWaitedAsksTheBreakerAgainUnlessItIsTheTrial() {
        #expect(!APNsCircuitAdmission.mustAskAgain(isTrial: false, circuit: .closed))
        #expect(APNsCircuitAdmission.mustAskAgain(isTrial: false, circuit: .open))
        #expect(APNsCircuitAdmission.mustAskAgain(isTrial: false, circuit: .halfOpen))
        #expect(!APNsCircuitAdmission.mustAskAgain(isTrial: true, circuit: .halfOpen))
        #expect(APNsCircuitAdmission.step(.send) == .send(isTrial: false))
        #expect(APNsCircuitAdmission.step(.trial) == .send(isTrial: true))
        #expect(APNsCircuitAdmission.step(.wait(.seconds(2))) == .wait(.seconds(2)))
    }

    @Test func credentialsAreTheCallersThenByBundleIDThenByTopicThenTheDefault() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        func cache(_ id: String) -> APNsProviderTokenCache { APNsProviderTokenCache(signingKey: key, keyID: id, teamID: "TEAM000001") }
        let (app, mdm, fallback, chosen) = (cache("APPKEY0001"), cache("MDMKEY0001"), cache("DEFAULTKEY"), cache("CHOSENKEY1"))
        let choice = APNsCredentialChoice(byBundleID: ["com.example.app": .token(app), "com.apple.mgmt.X": .token(mdm)],
                                          defaultCredentials: .token(fallback))
        func keyID(_ credentials: APNsCredentials) -> String? { credentials.providerTokens?.keyID }
        #expect(keyID(try choice.credentials(chosen: .token(chosen), bundleID: "com.example.app", topic: "com.example.app")) == "CHOSENKEY1")
        #expect(keyID(try choice.credentials(chosen: nil, bundleID: "com.example.app", topic: "com.example.app.voip")) == "APPKEY0001")
        #expect(keyID(try choice.credentials(chosen: nil, bundleID: "com.apple.mgmt.X", topic: "com.apple.mgmt.X")) == "MDMKEY0001")
        #expect(keyID(try choice.credentials(chosen: nil, bundleID: "com.other", topic: "com.other")) == "DEFAULTKEY")
        let strict = APNsCredentialChoice(byBundleID: ["com.example.app": .token(app)], defaultCredentials: nil)
        #expect(throws: APNsError.self) { try strict.credentials(chosen: nil, bundleID: "com.other", topic: "com.other") }
        do {
            _ = try strict.credentials(chosen: nil, bundleID: "com.other", topic: "com.other")
        } catch {
            #expect(error.code == .missingCredentials)
            #expect(error.message.contains("com.other"))
        }
    }
}

/// `APNsConnectionProviderToken`: one connection's JWT under Apple's 20- and 60-minute rules, with a
/// clock that moves (docs/apns-protocol.md §4).
@Suite struct ConnectionProviderTokenTests {
    static let start: Int64 = 1_700_000_000

    func signer() async throws -> (Int64) throws -> APNsJWT {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        return { iat in try APNsJWT(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: iat, signingKey: key) }
    }

    @Test func aNewConnectionTakesTheSharedTokenOnlyWhileItCanHoldItTwentyMinutes() async throws {
        let jwt = try await signer()
        var connection = APNsConnectionProviderToken()
        #expect(connection.decide(now: Self.start) == .takeShared(maximumAge: .seconds(30 * 60)))
        let first = try jwt(Self.start)
        let firstIsAChange = connection.install(first, now: Self.start)
        #expect(!firstIsAChange, "the first JWT is not a change")
        #expect(connection.decide(now: Self.start + 44 * 60) == .keep(first))
        // 45 minutes old and held 45: time for the successor.
        #expect(connection.decide(now: Self.start + 45 * 60) == .takeShared(maximumAge: .seconds(30 * 60)))
        let second = try jwt(Self.start + 45 * 60)
        let secondIsAChange = connection.install(second, now: Self.start + 45 * 60)
        #expect(secondIsAChange, "a change")
        #expect(connection.installedAt == Self.start + 45 * 60)
    }

    @Test func aConnectionThatTookAnOldTokenKeepsItTwentyMinutesThenSwitchesBeforeTheHour() async throws {
        let jwt = try await signer()
        var connection = APNsConnectionProviderToken()
        let old = try jwt(Self.start)
        let installed = Self.start + 30 * 60   // the oldest a connection takes
        connection.install(old, now: installed)
        #expect(connection.decide(now: Self.start + 49 * 60) == .keep(old), "45 minutes old but held only 19")
        #expect(connection.decide(now: Self.start + 50 * 60) == .takeShared(maximumAge: .seconds(30 * 60)))
    }

    @Test func aClockJumpThatLeavesNoValidChoiceRetiresTheConnection() async throws {
        let jwt = try await signer()
        var connection = APNsConnectionProviderToken()
        let token = try jwt(Self.start - 50 * 60)  // installed when already 50 minutes old (a clock jump)
        connection.install(token, now: Self.start)
        #expect(connection.decide(now: Self.start + 5 * 60) == .keep(token), "55 minutes old, held 5: still usable")
        #expect(connection.decide(now: Self.start + 7 * 60) == .retireConnection, "57 minutes old, held 7: neither")
        // The wall clock stepped back more than 5 minutes before the token's iat: take a new one once held 20 min.
        var stepped = APNsConnectionProviderToken()
        let future = try jwt(Self.start + 10 * 60)
        stepped.install(future, now: Self.start - 30 * 60)
        #expect(stepped.decide(now: Self.start) == .takeShared(maximumAge: .seconds(30 * 60)))
    }

    /// 429 `TooManyProviderTokenUpdates` to a change: the connection goes back to its previous JWT,
    /// keeps it while valid without trying the refused one again, then is retired.
    @Test func aRefusedChangeGoesBackToThePreviousTokenWhileItIsValid() async throws {
        let jwt = try await signer()
        var connection = APNsConnectionProviderToken()
        let first = try jwt(Self.start)
        connection.install(first, now: Self.start)
        let second = try jwt(Self.start + 46 * 60)
        connection.install(second, now: Self.start + 46 * 60)
        #expect(connection.previous == first)
        let goesOn = connection.refusedChange(to: second, now: Self.start + 46 * 60)
        #expect(goesOn)
        #expect(connection.current == first)
        #expect(connection.installedAt == Self.start)
        #expect(connection.changeRefused)
        // Past the switch age it keeps the restored JWT instead of asking for another one…
        #expect(connection.decide(now: Self.start + 50 * 60) == .keep(first))
        #expect(connection.decide(now: Self.start + 56 * 60) == .keep(first))
        // …until it is unusable: then the connection is replaced.
        #expect(connection.decide(now: Self.start + 57 * 60) == .retireConnection)
        // A second report of the same refusal changes nothing.
        let again = connection.refusedChange(to: second, now: Self.start + 47 * 60)
        #expect(again)
        #expect(connection.current == first)
    }

    @Test func aRefusedChangeWithNothingValidToGoBackToRetiresTheConnection() async throws {
        let jwt = try await signer()
        var fresh = APNsConnectionProviderToken()
        let only = try jwt(Self.start)
        fresh.install(only, now: Self.start)
        let refusedFirst = fresh.refusedChange(to: only, now: Self.start)
        #expect(!refusedFirst, "no previous JWT")
        var stale = APNsConnectionProviderToken()
        stale.install(try jwt(Self.start), now: Self.start)
        let late = try jwt(Self.start + 58 * 60)
        stale.install(late, now: Self.start + 58 * 60)
        let refusedLate = stale.refusedChange(to: late, now: Self.start + 58 * 60)
        #expect(!refusedLate, "the previous JWT is 58 minutes old")
    }
}
