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
