import ServiceCore
import Testing

@Suite struct LeastRecentlyUsedCacheTests {
    @Test func evictsTheLeastRecentlyUsedEntry() {
        var cache = LeastRecentlyUsedCache<String, Int>(capacity: 2)
        #expect(cache.set(1, forKey: "a") == nil)
        #expect(cache.set(2, forKey: "b") == nil)
        #expect(cache.value(forKey: "a") == 1)  // a is now the most recent
        #expect(cache.set(3, forKey: "c") == "b")
        #expect(cache.value(forKey: "b") == nil)
        #expect(cache.set(4, forKey: "a") == nil)  // an update evicts nothing
        #expect(cache.set(5, forKey: "d") == "c")
        #expect(cache.count == 2)
        #expect(cache.value(forKey: "a") == 4)
        #expect(cache.value(forKey: "d") == 5)
    }

    /// Against a plain model (an array ordered by use) over a long random sequence.
    @Test func matchesAModelOverRandomOperations() {
        var cache = LeastRecentlyUsedCache<Int, Int>(capacity: 7)
        var model: [(key: Int, value: Int)] = []  // most recent last
        var generator = SystemRandomNumberGenerator()
        for step in 0..<20_000 {
            let key = Int.random(in: 0..<20, using: &generator)
            if Bool.random(using: &generator) {
                let expected = model.firstIndex { $0.key == key }.map { model.remove(at: $0) }
                if let expected { model.append(expected) }
                #expect(cache.value(forKey: key) == expected?.value)
            } else {
                var evicted: Int?
                if let index = model.firstIndex(where: { $0.key == key }) {
                    model.remove(at: index)
                } else if model.count == 7 {
                    evicted = model.removeFirst().key
                }
                model.append((key, step))
                #expect(cache.set(step, forKey: key) == evicted)
            }
            #expect(cache.count == model.count)
        }
        for entry in model { #expect(cache.value(forKey: entry.key) == entry.value) }
    }
}
