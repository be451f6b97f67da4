import Foundation
import Synchronization

/// Process-wide signal set-up that every `main` and test bundle needs.
public enum ProcessSignals {
    /// Ignores SIGPIPE, which Linux delivers when OpenSSL or `write(2)` hits a socket the peer closed;
    /// the write then fails with `EPIPE` instead of killing the process. Idempotent.
    public static func ignoreSIGPIPE() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Waits until the process receives one of `signals` (default SIGTERM and SIGINT) and returns it.
    /// The signals are ignored by their default handlers from the first call on.
    public static func waitForTermination(_ signals: [Int32] = [SIGTERM, SIGINT]) async -> Int32 {
        await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let queue = DispatchQueue(label: "signals")
            let once = OnceFlag()
            var sources: [DispatchSourceSignal] = []
            for number in signals {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler {
                    if once.claim() { continuation.resume(returning: number) }
                }
                source.resume()
                sources.append(source)
            }
            retainedSignalSources.append(contentsOf: sources)
        }
    }
}

nonisolated(unsafe) private var retainedSignalSources: [DispatchSourceSignal] = []

/// A flag that can be claimed once across threads.
final class OnceFlag: Sendable {
    private let claimed = Atomic<Bool>(false)
    func claim() -> Bool { claimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged }
}
