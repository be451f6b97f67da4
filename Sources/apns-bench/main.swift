import APNs
import APNsSimulator
import Foundation
import PushDomain
import ServiceCore
import Synchronization

// apns-bench: sends N notifications through APNsClient's pool to the APNs simulator (started
// in-process, or a running one with --port) and prints notifications/s, p50/p99 latency and peak
// RSS (VmHWM from /proc/self/status).
//
//   apns-bench --n 100000 --p8 key.p8 --key-id K --team T --ca cert.pem --port 2197
//   apns-bench --n 100000 --p8 key.p8 --key-id K --team T --ca cert.pem \
//              --in-process --cert cert.pem --key key.pem --pub key.pub.pem
// Options: --connections C (4), --concurrency K (1000 sends in flight), --body FILE (1 KB alert),
// --host H (127.0.0.1), --environment sandbox|production (sandbox), --label TEXT.

ProcessSignals.ignoreSIGPIPE()

struct Options {
    var values: [String: String] = [:]
    var flags: Set<String> = []
    init(_ arguments: [String]) {
        var index = 0
        while index < arguments.count {
            let name = arguments[index]
            guard name.hasPrefix("--") else { index += 1; continue }
            let key = String(name.dropFirst(2))
            if index + 1 < arguments.count, !arguments[index + 1].hasPrefix("--") {
                values[key] = arguments[index + 1]
                index += 2
            } else {
                flags.insert(key)
                index += 1
            }
        }
    }
    func string(_ key: String) -> String? { values[key] }
    func required(_ key: String) -> String {
        guard let value = values[key] else {
            FileHandle.standardError.write(Data("apns-bench: --\(key) is required\n".utf8))
            exit(2)
        }
        return value
    }
    func int(_ key: String, _ defaultValue: Int) -> Int { values[key].flatMap { Int($0.replacingOccurrences(of: "_", with: "")) } ?? defaultValue }
}

/// Latency histogram with 10 µs buckets up to 10 s: constant memory whatever N is.
final class Histogram: Sendable {
    static let bucketMicroseconds = 10
    static let buckets = 1_000_000
    private let counts = Mutex<[UInt32]>([UInt32](repeating: 0, count: Histogram.buckets))

    func record(nanoseconds: UInt64) {
        let bucket = min(Int(nanoseconds / UInt64(Self.bucketMicroseconds * 1000)), Self.buckets - 1)
        counts.withLock { $0[bucket] &+= 1 }
    }

    /// The latency at quantile `q` (0…1), in milliseconds.
    func quantile(_ q: Double) -> Double {
        counts.withLock { counts in
            let total = counts.reduce(0) { $0 + Int($1) }
            let target = max(1, Int((Double(total) * q).rounded(.up)))
            var seen = 0
            for (bucket, count) in counts.enumerated() {
                seen += Int(count)
                if seen >= target { return Double((bucket + 1) * Self.bucketMicroseconds) / 1000 }
            }
            return .nan
        }
    }
}

func peakRSSKilobytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return -1 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.split(separator: " ").dropFirst().first { Int($0) != nil } ?? "") ?? -1
    }
    return -1
}

func monotonicNanos() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

let options = Options(Array(CommandLine.arguments.dropFirst()))
let total = options.int("n", 100_000)
let connections = options.int("connections", 4)
let concurrency = options.int("concurrency", 1000)
let host = options.string("host") ?? "127.0.0.1"
let environment = APNsEnvironment(rawValue: options.string("environment") ?? "sandbox") ?? .sandbox
let label = options.string("label") ?? "apns-bench"

let keyText = try String(contentsOfFile: options.required("p8"), encoding: .utf8)
let tokens = APNsProviderTokenCache(
    signingKey: try APNsSigningKey(p8: keyText), keyID: options.required("key-id"), teamID: options.required("team"))

var simulator: APNsSimulator?
var port = options.int("port", 0)
if options.flags.contains("in-process") {
    var configuration = APNsSimulator.Configuration(
        certificateChainFile: options.required("cert"), privateKeyFile: options.required("key"),
        trustedKeys: [.init(keyID: tokens.keyID, teamID: tokens.teamID, publicKeyPEM: try String(contentsOfFile: options.required("pub"), encoding: .utf8))])
    configuration.adminPort = nil
    configuration.recordLimit = 1000
    configuration.host = host
    let started = try APNsSimulator.start(configuration: configuration)
    simulator = started
    port = started.port(for: environment)
}
guard port > 0 else {
    FileHandle.standardError.write(Data("apns-bench: give --port or --in-process\n".utf8))
    exit(2)
}

var configuration = APNsClient.Configuration()
configuration.production = .init(host: host, port: port)
configuration.sandbox = .init(host: host, port: port)
configuration.caFile = options.string("ca")
configuration.connectionsPerPool = connections
configuration.connectStagger = .milliseconds(options.int("stagger-ms", 20))
configuration.maxQueuedRequests = max(10_000, concurrency)
configuration.requestTimeout = .seconds(30)
let client = APNsClient(configuration: configuration, tokens: tokens, logger: Logger(label: "apns-bench", logLevel: .warning))

let body: [UInt8]
if let path = options.string("body") {
    body = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
} else {
    body = Array((#"{"aps":{"alert":{"title":"Benchmark","body":""# + String(repeating: "x", count: 950) + #""}}}"#).utf8)
}
// 1,024 distinct device tokens, reused round-robin.
let deviceTokens: [DeviceToken] = (0..<1024).map { index in
    try! DeviceToken(validating: String(format: "%08x", index) + String(repeating: "5c", count: 28))
}
let template = APNsRequest(deviceToken: deviceTokens[0], topic: "com.example.app", pushType: .alert, expiration: .immediately, payload: body)

let histogram = Histogram()
let next = Atomic<Int>(0)
let failures = Atomic<Int>(0)
let statuses = Mutex<[Int: Int]>([:])

// Warm-up: open the pool (its staggered connections) before the clock starts.
_ = try await client.send(template, environment: environment)
try await Task.sleep(for: configuration.connectStagger * connections + .milliseconds(200))

let start = monotonicNanos()
await withTaskGroup(of: [Int: Int].self) { group in
    for _ in 0..<min(concurrency, total) {
        group.addTask {
            var local: [Int: Int] = [:]
            while true {
                let index = next.add(1, ordering: .relaxed).oldValue
                if index >= total { break }
                var request = template
                request.deviceToken = deviceTokens[index & 1023]
                let sent = monotonicNanos()
                do {
                    let response = try await client.send(request, environment: environment)
                    local[response.status, default: 0] += 1
                } catch {
                    failures.add(1, ordering: .relaxed)
                }
                histogram.record(nanoseconds: monotonicNanos() - sent)
            }
            return local
        }
    }
    for await local in group {
        statuses.withLock { all in for (status, count) in local { all[status, default: 0] += count } }
    }
}
let elapsed = Double(monotonicNanos() - start) / 1e9
let rate = Double(total) / elapsed
let codes = statuses.withLock { $0 }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
print(String(
    format: "%@: n=%d connections=%d concurrency=%d  %.0f notifications/s  p50 %.2f ms  p99 %.2f ms  peak RSS %d KiB  (%.2f s, statuses %@, failures %d, retries %d, resends %d)",
    label, total, connections, concurrency, rate, histogram.quantile(0.5), histogram.quantile(0.99), peakRSSKilobytes(), elapsed,
    codes, failures.load(ordering: .relaxed), client.metrics["retries"], client.metrics["unprocessed_resends"]))
await client.shutdown()
simulator?.close()
