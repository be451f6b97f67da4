import ServiceCore

/// The one-line progress display of `send --wait` (written to standard error with `\r`).
///
/// With a known total: `[#########...........]  4,512/10,000  45%  2,256/s`; without one (a user
/// or app audience whose fan-out is not known): `4,512 reports  2,256/s`. Counts by outcome follow.
public struct ProgressBar: Sendable {
    /// Characters of the bar between the brackets.
    public var width: Int

    /// - Parameter width: characters of the bar (default 30).
    public init(width: Int = 30) { self.width = max(1, width) }

    /// The line for `done` of `total` (when known) after `elapsed`, with `details` appended.
    public func render(done: Int, total: Int?, elapsed: Duration, details: String = "") -> String {
        let seconds = elapsed.inSeconds
        let rate = seconds > 0 ? Int((Double(done) / seconds).rounded()) : 0
        var line: String
        if let total, total > 0 {
            let fraction = min(1, Double(done) / Double(total))
            let filled = Int((fraction * Double(width)).rounded(.down))
            line = "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]"
            line += "  \(Self.grouped(done))/\(Self.grouped(total))  \(Int((fraction * 100).rounded(.down)))%"
        } else {
            line = "\(Self.grouped(done)) reports"
        }
        line += "  \(Self.grouped(rate))/s"
        if !details.isEmpty { line += "  " + details }
        return line
    }

    /// `n` with thousands separated by commas: `10000` → `10,000`.
    public static func grouped(_ n: Int) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (index, character) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(character)
        }
        return n < 0 ? "-" + out : out
    }
}
