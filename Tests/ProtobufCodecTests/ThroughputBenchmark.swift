import Foundation
import ProtobufCodec
import PushMessages
import Testing

extension Tag {
    /// Timing runs, off unless `CODEC_BENCHMARK=1`.
    @Tag static var benchmark: Self
}

/// Prints encode/decode throughput of a DeliveryReport (binary and JSON). Off by default; run with
/// `CODEC_BENCHMARK=1 swift test -c release --filter ThroughputBenchmark`.
@Suite("Codec throughput", .tags(.benchmark), .enabled(if: ProcessInfo.processInfo.environment["CODEC_BENCHMARK"] != nil))
struct ThroughputBenchmark {
    func measure(_ label: String, iterations: Int, bytesPerIteration: Int, _ body: () throws -> Void) rethrows {
        let clock = ContinuousClock()
        let elapsed = try clock.measure { for _ in 0..<iterations { try body() } }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let perSecond = Double(iterations) / seconds
        print("\(label): \(Int(perSecond)) messages/s, \(Int(perSecond * Double(bytesPerIteration) / 1_048_576)) MiB/s")
    }

    @Test(.timeLimit(.minutes(1))) func deliveryReport() throws {
        let report = Samples.deliveryReport
        let bytes = report.serializedBytes()
        let json = report.jsonUTF8Bytes()
        let iterations = 200_000
        var sink = 0
        measure("DeliveryReport encode (\(bytes.count) B)", iterations: iterations, bytesPerIteration: bytes.count) {
            sink &+= report.serializedBytes().count
        }
        try measure("DeliveryReport decode (\(bytes.count) B)", iterations: iterations, bytesPerIteration: bytes.count) {
            sink &+= Int(try DeliveryReport(protobufBytes: bytes).httpStatus)
        }
        measure("DeliveryReport JSON encode (\(json.count) B)", iterations: iterations / 10, bytesPerIteration: json.count) {
            sink &+= report.jsonUTF8Bytes().count
        }
        try measure("DeliveryReport JSON decode (\(json.count) B)", iterations: iterations / 10, bytesPerIteration: json.count) {
            sink &+= Int(try DeliveryReport(jsonUTF8: json).httpStatus)
        }
        #expect(sink != 0)
    }
}
