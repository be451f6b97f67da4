import PushMessages
import ServiceCore
import Testing

@testable import DispatcherCore

/// The label values of `push_notifications_total`: bounded sets only.
@Suite struct DispatcherMetricsTests {
    @Test func applesReasonFirstThenTheDispatchersThenNone() {
        var report = DeliveryReport()
        report.outcome = .rejected
        report.apnsReason = "Unregistered"
        #expect(DispatcherMetrics.labels(of: report) == ["rejected", "Unregistered"])
        report.outcome = .failed
        report.apnsReason = "ServiceUnavailable"
        report.outcomeReason = .retryHorizonExceeded
        #expect(DispatcherMetrics.labels(of: report) == ["failed", "ServiceUnavailable"])
        report.apnsReason = ""
        #expect(DispatcherMetrics.labels(of: report) == ["failed", "retry_horizon_exceeded"])
        report.outcome = .delivered
        report.outcomeReason = .unspecified
        #expect(DispatcherMetrics.labels(of: report) == ["delivered", "none"])
        // Whatever a peer answers, a label value never carries free text.
        report.outcome = .rejected
        report.apnsReason = "Bad reason with spaces and a token 0123456789abcdef"
        report.outcomeReason = .invalidRequest
        #expect(DispatcherMetrics.labels(of: report) == ["rejected", "invalid_request"])
    }

    /// `push_request_stage_seconds{stage}`: seconds from `requested_at_ms`, in the stage's series; a
    /// wall clock behind the request's `created_at_ms` (another host's clock) counts as 0 s, never as
    /// a negative time.
    @Test func requestStagesAreTimedFromTheRequest() {
        let registry = MetricsRegistry()
        let metrics = DispatcherMetrics(registry: registry)
        metrics.observe(.consumed, requestedAtMs: 1_000, nowMs: 1_020)
        metrics.observe(.resolved, requestedAtMs: 1_000, nowMs: 1_060)
        metrics.observe(.sent, requestedAtMs: 1_000, nowMs: 2_500)
        metrics.observe(.sent, requestedAtMs: 5_000, nowMs: 4_000)
        let text = registry.render()
        #expect(text.contains(#"push_request_stage_seconds_bucket{stage="consumed",le="0.01"} 0"#), "\(text)")
        #expect(text.contains(#"push_request_stage_seconds_bucket{stage="consumed",le="0.025"} 1"#), "\(text)")
        #expect(text.contains(#"push_request_stage_seconds_bucket{stage="resolved",le="0.05"} 0"#), "\(text)")
        #expect(text.contains(#"push_request_stage_seconds_bucket{stage="resolved",le="0.1"} 1"#), "\(text)")
        #expect(text.contains(#"push_request_stage_seconds_bucket{stage="sent",le="0.005"} 1"#), "\(text)")
        #expect(text.contains(#"push_request_stage_seconds_bucket{stage="sent",le="1"} 1"#), "\(text)")
        #expect(text.contains(#"push_request_stage_seconds_bucket{stage="sent",le="2"} 2"#), "\(text)")
        #expect(text.contains(#"push_request_stage_seconds_sum{stage="sent"} 1.5"#), "\(text)")
        #expect(Set(RequestStage.allCases.map(\.rawValue)) == ["consumed", "resolved", "sent"])
    }

    @Test func countsGoToTheRegistry() {
        let registry = MetricsRegistry()
        let metrics = DispatcherMetrics(registry: registry)
        var report = DeliveryReport()
        report.outcome = .rejected
        report.apnsReason = "BadDeviceToken"
        metrics.count(report)
        metrics.count(report)
        #expect(registry.value("push_notifications_total", labels: ["rejected", "BadDeviceToken"]) == 2)
        #expect(registry.render().contains("push_notifications_total{outcome=\"rejected\",reason=\"BadDeviceToken\"} 2"))
    }
}
