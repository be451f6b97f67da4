import Foundation
import PushTestSupport
import ServiceCore
import Testing

@Suite struct MetricsRegistryTests {
    @Test func countsPerLabelCombination() {
        let registry = MetricsRegistry()
        let requests = registry.counter("push_test_requests_total", help: "Requests.", labelNames: ["status", "reason"])
        requests.increment(labels: ["200", ""])
        requests.increment(by: 2, labels: ["410", "Unregistered"])
        requests.increment(labels: ["410", "Unregistered"])
        #expect(registry.value("push_test_requests_total", labels: ["200", ""]) == 1)
        #expect(registry.value("push_test_requests_total", labels: ["410", "Unregistered"]) == 3)
        #expect(registry.value("push_test_requests_total", labels: ["503", ""]) == nil)
        #expect(registry.value("push_test_missing_total") == nil)
    }

    @Test func registeringAgainReturnsTheSameFamily() {
        let registry = MetricsRegistry()
        registry.counter("push_test_total", help: "First.").increment()
        registry.counter("push_test_total", help: "Second.").increment()
        #expect(registry.value("push_test_total") == 2)
    }

    @Test func rendersTheTextFormatExactly() {
        let registry = MetricsRegistry()
        registry.counter("push_b_total", help: "Counts \"b\" with a\nnewline and \\.", labelNames: ["reason"])
            .increment(labels: ["say \"hi\"\n\\"])
        let gauge = registry.gauge("push_a", help: "A gauge.")
        gauge.set(2.5)
        gauge.decrement(by: 0.5)
        registry.gaugeCallback("push_c", help: "Read at scrape.", labelNames: ["partition"]) {
            [MetricSample(labels: ["1"], value: 7), MetricSample(labels: ["0"], value: 1e20)]
        }
        registry.counter("push_d_total", help: "Never incremented.")
        registry.counterCallback("push_e_total", help: "Kept elsewhere, read at scrape.") { [MetricSample(value: 3)] }
        #expect(registry.render() == """
            # HELP push_a A gauge.
            # TYPE push_a gauge
            push_a 2
            # HELP push_b_total Counts "b" with a\\nnewline and \\\\.
            # TYPE push_b_total counter
            push_b_total{reason="say \\"hi\\"\\n\\\\"} 1
            # HELP push_c Read at scrape.
            # TYPE push_c gauge
            push_c{partition="0"} 1e+20
            push_c{partition="1"} 7
            # HELP push_d_total Never incremented.
            # TYPE push_d_total counter
            push_d_total 0
            # HELP push_e_total Kept elsewhere, read at scrape.
            # TYPE push_e_total counter
            push_e_total 3

            """)
    }

    @Test func histogramBucketsAreCumulative() {
        let registry = MetricsRegistry()
        let latency = registry.histogram("push_test_seconds", help: "Latency.", labelNames: ["type"], buckets: [0.1, 1])
        for value in [0.05, 0.1, 0.5, 3] { latency.observe(value, labels: ["alert"]) }
        #expect(registry.value("push_test_seconds", labels: ["alert"]) == 4)
        #expect(registry.render() == """
            # HELP push_test_seconds Latency.
            # TYPE push_test_seconds histogram
            push_test_seconds_bucket{type="alert",le="0.1"} 2
            push_test_seconds_bucket{type="alert",le="1"} 3
            push_test_seconds_bucket{type="alert",le="+Inf"} 4
            push_test_seconds_sum{type="alert"} 3.65
            push_test_seconds_count{type="alert"} 4

            """)
    }

    @Test func countsFromManyThreadsAtOnce() async {
        let registry = MetricsRegistry()
        let counter = registry.counter("push_test_total", help: "Concurrent.", labelNames: ["worker"])
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask { for _ in 0..<1_000 { counter.increment(labels: ["\(worker % 2)"]) } }
            }
        }
        #expect(registry.value("push_test_total", labels: ["0"]) == 4_000)
        #expect(registry.value("push_test_total", labels: ["1"]) == 4_000)
    }

    /// Prometheus's own parser (`promtool check metrics`) accepts what the registry renders.
    @Test func promtoolAcceptsTheRendering() async throws {
        let registry = MetricsRegistry()
        registry.counter("push_apns_requests_total", help: "APNs requests.", labelNames: ["status", "reason"])
            .increment(labels: ["410", "Unregistered"])
        registry.gauge("push_apns_connections", help: "Open connections.", labelNames: ["environment"]).set(4, labels: ["production"])
        registry.histogram("push_apns_request_duration_seconds", help: "Latency.", labelNames: ["push_type"])
            .observe(0.003, labels: ["alert"])
        registry.gaugeCallback("process_open_fds", help: "Open file descriptors.") { [MetricSample(value: 12)] }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID().uuidString).txt")
        try registry.render().write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let (status, output) = try await runProgram(["sh", "-c", "promtool check metrics < '\(file.path)'"])
        #expect(status == 0, "promtool: \(output)")
    }
}

/// Caller-chosen label values cannot grow the series without bound (issue 23: 2,000 bundle ids from
/// a wildcard key, 300 from a Kafka producer, each a series).
@Suite struct LabelValueLimiterTests {
    @Test func twoThousandDistinctValuesMakeAtMostTheBoundPlusOther() {
        let registry = MetricsRegistry()
        let counter = registry.counter("push_test_calls_total", help: "Calls.", labelNames: ["bundle_id", "outcome"])
        let gauge = registry.gauge("push_test_depth", help: "Depth.", labelNames: ["bundle_id"])
        let histogram = registry.histogram("push_test_seconds", help: "Seconds.", labelNames: ["bundle_id"])
        for index in 0..<2_000 {
            counter.increment(labels: ["com.example.app\(index)", index % 2 == 0 ? "ok" : "failed"])
            gauge.set(Double(index), labels: ["com.example.app\(index)"])
            histogram.observe(0.01, labels: ["com.example.app\(index)"])
        }
        // 100 bundle ids × their one outcome each, plus other × 2 outcomes.
        #expect(registry.seriesCount("push_test_calls_total") == 102)
        #expect(registry.seriesCount("push_test_depth") == 101)
        #expect(registry.seriesCount("push_test_seconds") == 101)
        #expect(registry.value("push_test_calls_total", labels: ["other", "ok"]) == 950)
        #expect(registry.value("push_test_calls_total", labels: ["other", "failed"]) == 950)
        #expect(registry.value("push_test_calls_total", labels: ["com.example.app99", "failed"]) == 1)
        #expect(registry.value("push_test_depth", labels: ["other"]) == 1_999)
        #expect(registry.value("push_test_seconds", labels: ["other"]) == 1_900)
        // The overflow is counted per family and label, and rendered.
        #expect(registry.value(MetricsRegistry.labelOverflowMetric, labels: ["push_test_calls_total", "bundle_id"]) == 1_900)
        #expect(registry.value(MetricsRegistry.labelOverflowMetric, labels: ["push_test_seconds", "bundle_id"]) == 1_900)
        #expect(registry.render().contains("push_metrics_label_overflow_total{metric=\"push_test_depth\",label=\"bundle_id\"} 1900"))
        // Values admitted before the bound keep their own series; the label with few values is untouched.
        counter.increment(labels: ["com.example.app0", "failed"])
        #expect(registry.value("push_test_calls_total", labels: ["com.example.app0", "failed"]) == 1)
    }

    @Test func theBoundIsSetFromTheEnvironment() throws {
        let registry = MetricsRegistry(maximumLabelValues: 3)
        let counter = registry.counter("push_test_total", help: "T.", labelNames: ["app"])
        for index in 0..<10 { counter.increment(labels: ["a\(index)"]) }
        #expect(registry.seriesCount("push_test_total") == 4)
        #expect(MetricsRegistry().maximumLabelValues == 100)
        // No overflow yet: the overflow family is not rendered.
        #expect(!MetricsRegistry().render().contains("overflow"))
        let bad = EnvironmentConfig(["PUSH_METRICS_MAX_LABEL_VALUES": "0"])
        #expect(throws: EnvironmentConfig.Error.self) { try MetricsRegistry.maximumLabelValues(environment: bad) }
        #expect(try MetricsRegistry.maximumLabelValues(environment: EnvironmentConfig(["PUSH_METRICS_MAX_LABEL_VALUES": "7"])) == 7)
    }

    @Test func limiterKeepsTheFirstValuesAndAlwaysAllowsOther() {
        var limiter = LabelValueLimiter(labelCount: 2)
        #expect(limiter.limit(["a", "x"], maximum: 1) == (["a", "x"], []))
        #expect(limiter.limit(["b", "x"], maximum: 1) == (["other", "x"], [0]))
        #expect(limiter.limit(["b", "y"], maximum: 1) == (["other", "other"], [0, 1]))
        #expect(limiter.limit(["other", "x"], maximum: 1) == (["other", "x"], []))
        #expect(limiter.admittedCount(label: 0) == 1)
    }
}
