import Foundation
import Synchronization

/// Process-wide signal set-up that every `main` and test bundle needs, and the one place that
/// handles signals: `signals(_:)` installs a `DispatchSource` once per signal number and fans every
/// occurrence out to all current subscribers.
public enum ProcessSignals {
    /// Ignores SIGPIPE, which Linux delivers when OpenSSL or `write(2)` hits a socket the peer closed;
    /// the write then fails with `EPIPE` instead of killing the process. Idempotent.
    public static func ignoreSIGPIPE() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Subscribes to `signals` and returns every occurrence of them, in arrival order.
    ///
    /// - The subscription starts when this function returns, before the stream is iterated; signals
    ///   arriving in between are buffered (without bound; signals are rare).
    /// - Every occurrence is delivered, also repeats of the same signal (the kernel may merge
    ///   occurrences that arrive before the previous one was handled; the count it reports is honoured).
    /// - Every subscriber gets every occurrence of the signals it asked for.
    /// - The first subscription to a signal number replaces its default action (for SIGTERM and
    ///   SIGINT: terminate the process) with "ignore" for the rest of the process's life.
    /// - The stream ends when the iterating task is cancelled; the subscription ends when the stream
    ///   ends or is released.
    /// - Parameter signals: signal numbers such as `SIGTERM`.
    public static func signals(_ signals: [Int32]) -> AsyncStream<Int32> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .unbounded)
        let id = SignalHub.shared.subscribe(Set(signals), continuation)
        continuation.onTermination = { _ in SignalHub.shared.unsubscribe(id) }
        return stream
    }

    /// Waits until the process receives one of `signals` (default SIGTERM and SIGINT) and returns it.
    /// The signals are ignored by their default handlers from the first call on. Returns 0 when the
    /// calling task is cancelled first. Prefer a `ServiceGroup`, which also handles a second signal.
    public static func waitForTermination(_ signals: [Int32] = [SIGTERM, SIGINT]) async -> Int32 {
        for await number in Self.signals(signals) { return number }
        return 0
    }
}

/// The installed signal sources and their subscribers.
private final class SignalHub: Sendable {
    static let shared = SignalHub()

    private struct State {
        /// Installed once per signal number and kept for the life of the process.
        var sources: [Int32: any DispatchSourceSignal] = [:]
        var subscribers: [UInt64: (signals: Set<Int32>, continuation: AsyncStream<Int32>.Continuation)] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "process-signals")

    func subscribe(_ signals: Set<Int32>, _ continuation: AsyncStream<Int32>.Continuation) -> UInt64 {
        state.withLock { s in
            for number in signals.sorted() where s.sources[number] == nil {
                // The source needs the default action out of the way, or the signal would kill the process.
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler {  // keeps `source` alive, as intended: it lives as long as the process
                    // `data` is the number of occurrences since the handler last ran.
                    SignalHub.shared.deliver(number, count: max(1, Int(source.data)))
                }
                source.resume()
                s.sources[number] = source
            }
            s.nextID += 1
            s.subscribers[s.nextID] = (signals, continuation)
            return s.nextID
        }
    }

    func unsubscribe(_ id: UInt64) {
        _ = state.withLock { $0.subscribers.removeValue(forKey: id) }
    }

    private func deliver(_ number: Int32, count: Int) {
        let targets = state.withLock { s in s.subscribers.values.filter { $0.signals.contains(number) }.map(\.continuation) }
        for continuation in targets {
            for _ in 0..<count { continuation.yield(number) }
        }
    }
}
