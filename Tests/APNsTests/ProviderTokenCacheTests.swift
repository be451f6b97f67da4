import APNsSimulator
import ServiceCore
import Testing
@testable import APNs

@Suite(.timeLimit(.minutes(1))) struct ProviderTokenCacheTests {
    static let start: Int64 = 1_700_000_000_000

    func makeCache(refreshAge: Duration = .seconds(50 * 60)) async throws -> (APNsProviderTokenCache, ManualWallClock, APNsJWTVerifier) {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        let clock = ManualWallClock(milliseconds: Self.start)
        let cache = APNsProviderTokenCache(signingKey: key, keyID: "ABC123DEFG", teamID: "DEF123GHIJ", refreshAge: refreshAge, clock: clock)
        return (cache, clock, try APNsJWTVerifier(publicKeyPEM: key.publicKeyPEM))
    }

    @Test func threeHoursMinuteByMinute() async throws {
        let (cache, clock, verifier) = try await makeCache()
        #expect(cache.currentIssuedAt == nil)  // minted on demand only
        var issued: [Int64] = []
        for minute in 0...180 {
            let token = try cache.currentToken()
            let now = clock.nowSeconds()
            #expect(token.age(atSeconds: now) < 60 * 60, "minute \(minute)")
            #expect(try verifier.verify(token.token).issuedAt == token.issuedAt)
            if issued.last != token.issuedAt { issued.append(token.issuedAt) }
            #expect(try cache.currentToken() == token)  // stable within the same instant
            clock.advance(by: .seconds(60))
        }
        let gaps = zip(issued.dropFirst(), issued).map { $0 - $1 }
        #expect(gaps.allSatisfy { $0 >= 20 * 60 })
        #expect(gaps == [2400, 2400, 2400, 2400])  // refreshed at 40 minutes
        #expect(issued.first == Self.start / 1000)
    }

    @Test func irregularCallsNeverHandOutAnExpiredToken() async throws {
        let (cache, clock, _) = try await makeCache(refreshAge: .seconds(55 * 60))
        var previous: APNsJWT?
        for step in [1, 54, 1, 59, 61, 3, 200, 19, 1, 20, 57] {
            clock.advance(by: .seconds(Int64(step) * 60))
            let token = try cache.currentToken()
            #expect(token.age(atSeconds: clock.nowSeconds()) < 3600)
            if let previous, previous != token { #expect(token.issuedAt - previous.issuedAt >= 1200) }
            previous = token
        }
    }

    @Test func invalidateRenewsButNeverWithin20Minutes() async throws {
        let (cache, clock, _) = try await makeCache()
        let first = try cache.currentToken()
        clock.advance(by: .seconds(5 * 60))
        cache.invalidate(first)
        #expect(try cache.currentToken() == first)  // 5 minutes old: too soon for a new one
        clock.advance(by: .seconds(14 * 60))
        #expect(try cache.currentToken() == first)  // 19 minutes
        clock.advance(by: .seconds(60))
        let second = try cache.currentToken()         // 20 minutes: renewed
        #expect(second != first)
        #expect(second.issuedAt - first.issuedAt == 20 * 60)
        clock.advance(by: .seconds(25 * 60))
        cache.invalidate(first)                       // a stale report about an old token changes nothing
        #expect(try cache.currentToken() == second)
        clock.advance(by: .seconds(25 * 60))          // second is now 50 minutes old
        #expect(try cache.currentToken() != second)
    }

    @Test func refreshAgeIsClampedTo20To40Minutes() async throws {
        let (short, _, _) = try await makeCache(refreshAge: .seconds(60))
        #expect(short.refreshAge == .seconds(20 * 60))
        let (long, clock, _) = try await makeCache(refreshAge: .seconds(3 * 3600))
        #expect(long.refreshAge == .seconds(40 * 60))
        let first = try long.currentToken()
        clock.advance(by: .seconds(40 * 60))
        #expect(try long.currentToken() != first)
    }

    /// Apple: a connection changes its token at most once per 20 minutes. A token handed out after an
    /// idle spell must therefore still live 20 minutes: the 46-minute-old cached token is not handed
    /// out (it would have to be replaced 14 minutes later); a fresh one is, and lasts.
    @Test func aTokenHandedOutAfterAnIdleSpellLastsTwentyMoreMinutes() async throws {
        let (cache, clock, _) = try await makeCache()
        let old = try cache.currentToken()
        clock.advance(by: .seconds(46 * 60))  // idle: nobody asked for 46 minutes
        let fresh = try cache.currentToken()
        #expect(fresh != old)
        #expect(fresh.issuedAt == clock.nowSeconds())
        clock.advance(by: .seconds(5 * 60))
        #expect(try cache.currentToken() == fresh, "not replaced minutes later")
        // Whenever it is asked, what it hands out has 20 minutes left.
        for step in [1, 13, 7, 19, 2, 29, 3, 11, 39, 1, 17] {
            clock.advance(by: .seconds(Int64(step) * 60))
            let token = try cache.currentToken()
            #expect(token.age(atSeconds: clock.nowSeconds()) <= 40 * 60, "at +\(step) min: \(token)")
        }
    }
}

@Suite(.timeLimit(.minutes(1))) struct ProviderTokenCacheConcurrencyTests {
    @Test func concurrentCallersShareOneToken() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        let clock = ManualWallClock(milliseconds: 1_700_000_000_000)
        let cache = APNsProviderTokenCache(signingKey: key, keyID: "ABC123DEFG", teamID: "DEF123GHIJ", clock: clock)
        let tokens = await withTaskGroup(of: Set<String>.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var seen = Set<String>()
                    for _ in 0..<200 { if let token = try? cache.currentToken() { seen.insert(token.token) } }
                    return seen
                }
            }
            return await group.reduce(into: Set<String>()) { $0.formUnion($1) }
        }
        #expect(tokens.count == 1)
    }
}
