import Foundation
import HTTP2
import ServiceCore
import Testing

/// `h2load -n N -c 4 -m 100` (TLS, POST with a 1 KB body) against our server and against `nghttpd`.
/// Runs only when `HTTP2_BENCH=1` (through `scripts/bench-http2`, in release mode); prints req/s.
@Suite(.serialized)
struct HTTP2Benchmark {
    static let enabled = ProcessInfo.processInfo.environment["HTTP2_BENCH"] == "1"

    @Test(.enabled(if: enabled, "set HTTP2_BENCH=1 (scripts/bench-http2)"), .timeLimit(.minutes(5)))
    func h2loadOursVersusNghttpd() async throws {
        ProcessSignals.ignoreSIGPIPE()
        let requests = ProcessInfo.processInfo.environment["HTTP2_BENCH_REQUESTS"] ?? "200000"
        let certs = try await TestCertificates.make()
        let bodyFile = certs.directory + "/body-1k.json"
        try Data(repeating: 0x61, count: 1024).write(to: URL(fileURLWithPath: bodyFile))
        let docroot = certs.directory + "/docroot"
        try FileManager.default.createDirectory(atPath: docroot, withIntermediateDirectories: true)
        try Data().write(to: URL(fileURLWithPath: docroot + "/empty"))

        func h2load(_ port: Int) async throws -> (reqPerSecond: Double, summary: String) {
            let result = try await Tools.check("h2load", ["-n", requests, "-c", "4", "-m", "100", "-d", bodyFile, "https://127.0.0.1:\(port)/empty"], timeout: .seconds(240))
            let line = result.stdout.split(separator: "\n").first { $0.hasPrefix("finished in") }.map(String.init) ?? ""
            let rate = line.split(separator: ",").dropFirst().first.flatMap { Double($0.trimmingCharacters(in: .whitespaces).split(separator: " ")[0]) } ?? 0
            let requestsLine = result.stdout.split(separator: "\n").first { $0.hasPrefix("requests:") }.map(String.init) ?? ""
            #expect(requestsLine.contains("0 failed, 0 errored, 0 timeout"), "\(requestsLine)")
            return (rate, line + " | " + requestsLine)
        }

        let server = try HTTP2Server.start(configuration: .init(tls: HTTP2ServerTLS(certificateChainFile: certs.serverCert, privateKeyFile: certs.serverKey))) { _, responder in
            responder.respond(status: 200, headers: [HTTP2Header("apns-id", "6f1b7c3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f")])
        }
        let ours = try await h2load(server.port)
        server.close()

        let port = freePort()
        let nghttpd = try PeerProcess("nghttpd", ["-d", docroot, "-a", "127.0.0.1", String(port), certs.serverKey, certs.serverCert], port: port)
        defer { nghttpd.stop() }
        try await nghttpd.waitUntilListening()
        let theirs = try await h2load(port)

        print("BENCH ours:    \(Int(ours.reqPerSecond)) req/s  (\(ours.summary))")
        print("BENCH nghttpd: \(Int(theirs.reqPerSecond)) req/s  (\(theirs.summary))")
        #expect(ours.reqPerSecond > 0 && theirs.reqPerSecond > 0)
    }
}
