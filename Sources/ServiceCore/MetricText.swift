/// Metric and label name rules of the Prometheus data model.
enum MetricName {
    static func check(_ name: String, _ labelNames: [String]) {
        precondition(valid(name, allowColon: true), "invalid metric name \(name)")
        for label in labelNames {
            precondition(valid(label, allowColon: false) && !label.hasPrefix("__"), "invalid label name \(label) on \(name)")
        }
        precondition(Set(labelNames).count == labelNames.count, "duplicate label names on \(name)")
    }

    static func valid(_ name: String, allowColon: Bool) -> Bool {
        guard let first = name.unicodeScalars.first else { return false }
        func letter(_ c: Unicode.Scalar) -> Bool {
            (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || c == "_" || (allowColon && c == ":")
        }
        return letter(first) && name.unicodeScalars.allSatisfy { letter($0) || ($0 >= "0" && $0 <= "9") }
    }
}

/// The text exposition format 0.0.4: `# HELP`, `# TYPE`, then one `name{labels} value` line a series.
enum MetricText {
    static func family(name: String, help: String, type: String, labelNames: [String],
                       samples: [MetricSample], into text: inout String) {
        header(name: name, help: help, type: type, into: &text)
        if samples.isEmpty && labelNames.isEmpty {
            sample(name: name, labelNames: [], labels: [], value: 0, into: &text)
            return
        }
        for entry in samples.sorted(by: { $0.labels.lexicographicallyPrecedes($1.labels) }) {
            sample(name: name, labelNames: labelNames, labels: entry.labels, value: entry.value, into: &text)
        }
    }

    static func header(name: String, help: String, type: String, into text: inout String) {
        let escapedHelp = help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
        text += "# HELP \(name) \(escapedHelp)\n# TYPE \(name) \(type)\n"
    }

    static func sample(name: String, labelNames: [String], labels: [String], value: Double, into text: inout String) {
        text += name
        if !labelNames.isEmpty {
            text += "{"
            for (index, (label, labelValue)) in zip(labelNames, labels).enumerated() {
                if index > 0 { text += "," }
                text += label + "=\"" + escapeLabel(labelValue) + "\""
            }
            text += "}"
        }
        text += " " + number(value) + "\n"
    }

    static func escapeLabel(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    /// Integers without a fraction, `+Inf`/`-Inf`/`NaN` as the format spells them.
    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}
