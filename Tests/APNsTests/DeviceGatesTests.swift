import APNs
import Testing

/// `APNsDeviceGates` without I/O: one backoff per burst, one at a time, growing strikes, the bound.
@Suite struct DeviceGatesTests {
    var policy: APNsDeviceGates.Policy {
        var policy = APNsDeviceGates.Policy()
        policy.backoff = .init(initial: .seconds(1), maximum: .seconds(30))
        policy.capacity = 100
        return policy
    }

    @Test func anOpenGateCostsNothingAndOnlyTokenFailuresCloseIt() {
        var gates = APNsDeviceGates(policy: policy)
        #expect(gates.enter("a", nowMilliseconds: 0) == .open)
        #expect(gates.finish("a", wasTurn: false, outcome: .delivered, nowMilliseconds: 1, random: 1) == nil)
        #expect(gates.finish("a", wasTurn: false, outcome: .other, nowMilliseconds: 1, random: 1) == nil)
        #expect(gates.count == 0 && !gates.hasFailureHistory("a"))
        _ = gates.finish("a", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: 10, random: 1)
        #expect(gates.count == 1 && gates.gatedCount == 1 && gates.hasFailureHistory("a"))
        #expect(gates.enter("b", nowMilliseconds: 10) == .open, "other tokens are untouched")
    }

    /// A burst of notifications in flight when the token fails: one strike, one backoff; then they
    /// go one at a time, the next when the one before has an outcome.
    @Test func aBurstWaitsBehindOneBackoffAndGoesOneAtATime() {
        var gates = APNsDeviceGates(policy: policy)
        for i in 0..<10 { _ = gates.finish("t", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: 100 + Int64(i), random: 1) }
        #expect(gates.gates["t"]?.strikes == 1)
        #expect(gates.enter("t", nowMilliseconds: 200) == .turn(notBefore: 1_100))
        for _ in 0..<9 { #expect(gates.enter("t", nowMilliseconds: 200) == .queued) }
        #expect(gates.gates["t"]?.waiting == 9)
        // The turn is throttled again: the backoff doubles, the next in line goes after it.
        #expect(gates.finish("t", wasTurn: true, outcome: .tokenFailure, nowMilliseconds: 1_200, random: 1) == 3_200)
        #expect(gates.gates["t"]?.strikes == 2)
        // It went through: the next goes at once, and so on; the strikes come down by one.
        #expect(gates.finish("t", wasTurn: true, outcome: .delivered, nowMilliseconds: 3_300, random: 1) == 3_300)
        #expect(gates.gates["t"]?.strikes == 1)
        #expect(gates.enter("t", nowMilliseconds: 3_300) == .queued, "the failed one goes back in line")
        var now: Int64 = 3_300
        var handed = 0
        while let next = gates.finish("t", wasTurn: true, outcome: .delivered, nowMilliseconds: now, random: 1) {
            #expect(next == now)
            handed += 1
            now += 5
        }
        #expect(handed == 8)
        #expect(gates.gates["t"]?.closed == false && gates.gatedCount == 0)
        #expect(gates.enter("t", nowMilliseconds: now) == .open)
    }

    @Test func theBackoffGrowsWithJitterAndIsCapped() {
        var gates = APNsDeviceGates(policy: policy)
        var waits: [Int64] = []
        var now: Int64 = 0
        _ = gates.finish("t", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: now, random: 1)
        for _ in 0..<7 {
            guard case .turn(let at) = gates.enter("t", nowMilliseconds: now) else { Issue.record("no turn"); return }
            waits.append(at - now)
            now = at
            _ = gates.finish("t", wasTurn: true, outcome: .tokenFailure, nowMilliseconds: now, random: 0.5)
        }
        #expect(waits == [1_000, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000])
    }

    @Test func aCancelledCallerLeavesTheLineAndOtherOutcomesPassTheSlotOn() {
        var gates = APNsDeviceGates(policy: policy)
        _ = gates.finish("t", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: 0, random: 1)
        #expect(gates.enter("t", nowMilliseconds: 0) == .turn(notBefore: 1_000))
        #expect(gates.enter("t", nowMilliseconds: 0) == .queued)
        #expect(gates.enter("t", nowMilliseconds: 0) == .queued)
        gates.leaveLine("t")
        // A 503 for the turn: not the token's; the slot passes on at the same backoff.
        #expect(gates.finish("t", wasTurn: true, outcome: .other, nowMilliseconds: 1_000, random: 1) == 1_000)
        #expect(gates.gates["t"]?.strikes == 1 && gates.gates["t"]?.waiting == 0)
    }

    @Test func theMapIsBoundedLeastRecentlyUsedFirstAndKeepsWhoWaits() {
        var gates = APNsDeviceGates(policy: policy)
        _ = gates.finish("busy", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: 0, random: 1)
        #expect(gates.enter("busy", nowMilliseconds: 0) == .turn(notBefore: 1_000))
        for i in 0..<150 {
            _ = gates.finish("t\(i)", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: Int64(i + 1), random: 1)
            #expect(gates.count <= 100)
        }
        #expect(gates.gates["busy"] != nil, "a gate with its slot held is never evicted")
        #expect(gates.gates["t149"] != nil && gates.gates["t0"] == nil, "the oldest go first")
        #expect(gates.gatedCount == gates.count)
    }

    @Test func strikesAreForgottenAfterTheMemory() {
        var gates = APNsDeviceGates(policy: policy)
        _ = gates.finish("t", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: 0, random: 1)
        _ = gates.enter("t", nowMilliseconds: 1_000)
        _ = gates.finish("t", wasTurn: true, outcome: .tokenFailure, nowMilliseconds: 1_000, random: 1)
        _ = gates.enter("t", nowMilliseconds: 3_000)
        _ = gates.finish("t", wasTurn: true, outcome: .delivered, nowMilliseconds: 3_000, random: 1)
        #expect(gates.gates["t"]?.strikes == 1 && gates.hasFailureHistory("t"))
        _ = gates.finish("t", wasTurn: false, outcome: .tokenFailure, nowMilliseconds: 3_000 + 601_000, random: 1)
        #expect(gates.gates["t"]?.strikes == 1, "a failure long after the last one starts over")
    }
}
