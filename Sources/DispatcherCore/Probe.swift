import Foundation
import Synchronization
// TEMPORARY instrumentation (not committed).
final class Probe: Sendable {
    static let shared = Probe()
    private let sums = Mutex<[String: (Int, Double)]>([:])
    private let started = Mutex<Bool>(false)
    func add(_ name: String, _ seconds: Double) {
        sums.withLock { s in let v = s[name] ?? (0, 0); s[name] = (v.0 + 1, v.1 + seconds) }
        let first = started.withLock { s -> Bool in defer { s = true }; return !s }
        if first {
            Thread.detachNewThread {
                while true {
                    Thread.sleep(forTimeInterval: 2)
                    let snapshot = self.sums.withLock { s -> [String: (Int, Double)] in defer { s = [:] }; return s }
                    if snapshot.isEmpty { continue }
                    let line = snapshot.keys.sorted().map { k in let v = snapshot[k]!; return "\(k): n=\(v.0) avg=\(String(format: "%.1f", v.1 / Double(v.0) * 1000))ms" }.joined(separator: " | ")
                    FileHandle.standardError.write(("PROBE " + line + "\n").data(using: .utf8)!)
                }
            }
        }
    }
}
@inline(__always) func probeNow() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
