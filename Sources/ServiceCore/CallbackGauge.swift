/// A gauge family whose samples come from a closure at render time.
public final class CallbackGauge: MetricFamily {
    let name: String
    let help: String
    let labelNames: [String]
    private let collect: @Sendable () -> [MetricSample]

    init(name: String, help: String, labelNames: [String], collect: @escaping @Sendable () -> [MetricSample]) {
        MetricName.check(name, labelNames)
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.collect = collect
    }

    func value(labels: [String]) -> Double? { collect().first { $0.labels == labels }?.value }

    var seriesCount: Int { collect().count }

    func render(into text: inout String) {
        let samples = collect().filter { $0.labels.count == labelNames.count }
        MetricText.family(name: name, help: help, type: "gauge", labelNames: labelNames,
                          samples: samples, into: &text)
    }
}
