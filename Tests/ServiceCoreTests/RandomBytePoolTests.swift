import Foundation
@testable import ServiceCore
import Synchronization
import Testing

@Suite struct RandomBytePoolTests {
    /// Draws of `size` bytes each from `pool`, `perThread` per thread on `threads` threads at once.
    func draws(from pool: RandomBytePool, size: Int, threads: Int, perThread: Int) -> [[UInt8]] {
        let all = Mutex<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            var mine: [[UInt8]] = []
            for _ in 0..<perThread {
                var bytes = [UInt8](repeating: 0, count: size)
                bytes.withUnsafeMutableBytes { pool.fill($0) }
                mine.append(bytes)
            }
            all.withLock { $0.append(contentsOf: mine) }
        }
        return all.withLock { $0 }
    }

    @Test func everyByteIsHandedOutOnceAcrossThreadsAndRefills() {
        // A 20-byte chunk: most 16-byte draws straddle a refill. Two draws that shared bytes, or a
        // refill that handed out zeroed or stale bytes, would repeat a 16-byte value.
        for chunk in [20, 4096] {
            let got = draws(from: RandomBytePool(chunk: chunk), size: 16, threads: 4, perThread: 2_500)
            #expect(got.count == 10_000)
            #expect(Set(got).count == got.count, "chunk \(chunk)")
            // Each bit is set in about half the draws: a zeroed or constant stretch would show.
            var setCounts = [Int](repeating: 0, count: 128)
            for bytes in got { for bit in 0..<128 where bytes[bit / 8] & (0x80 >> UInt8(bit % 8)) != 0 { setCounts[bit] += 1 } }
            #expect(setCounts.allSatisfy { (4_000...6_000).contains($0) }, "chunk \(chunk): \(setCounts)")
        }
    }

    @Test func aDrawLargerThanTheChunkSpansSeveralRefills() {
        let pool = RandomBytePool(chunk: 16)
        var bytes = [UInt8](repeating: 0, count: 100)
        bytes.withUnsafeMutableBytes { pool.fill($0) }
        // 100 bytes from 7 refills of 16: no 16-byte stretch repeats another, none is all zeros.
        let stretches = stride(from: 0, to: 96, by: 16).map { Array(bytes[$0..<$0 + 16]) }
        #expect(Set(stretches).count == stretches.count)
        #expect(!stretches.contains([UInt8](repeating: 0, count: 16)))
    }

    @Test func randomUUIDsDrawnOnManyThreadsAreDistinct() {
        let all = Mutex<[UUID]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let mine = (0..<5_000).map { _ in UUID.random() }
            all.withLock { $0.append(contentsOf: mine) }
        }
        let uuids = all.withLock { $0 }
        #expect(uuids.count == 20_000)
        #expect(Set(uuids).count == uuids.count)
    }

    @Test func pooledGeneratorsBitsVaryAndTracesAreDistinct() {
        var generator = PooledRandomNumberGenerator()
        let values = (0..<10_000).map { _ in generator.next() }
        #expect(Set(values).count == values.count)
        for bit in 0..<64 {
            let set = values.filter { $0 & (1 << UInt64(bit)) != 0 }.count
            #expect((4_000...6_000).contains(set), "bit \(bit) set in \(set) of 10,000")
        }
        let traces = (0..<2_000).map { _ in TraceParent.random() }
        #expect(Set(traces.map(\.traceID)).count == traces.count)
        #expect(traces.allSatisfy { TraceParent($0.text) != nil && $0.text.hasSuffix("-01") })
    }
}
