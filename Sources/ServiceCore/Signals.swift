import Foundation
import Synchronization

/// Process-wide signal set-up that every `main` and test bundle needs, and the one place that
/// handles signals: `signals(_:)` installs a handler once per signal number and fans every
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
    /// - Every occurrence is delivered, also repeats of the same signal (only the kernel merges a
    ///   signal that arrives again while the first is still pending, before its handler ran).
    /// - Every subscriber gets every occurrence of the signals it asked for.
    /// - The first subscription to a signal number installs a handler (`sigaction`) that replaces the
    ///   default action (for SIGTERM and SIGINT: terminate the process) for the rest of the process's
    ///   life; without subscribers, the signal is then dropped.
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

/// The installed signal handlers and their subscribers.
///
/// Why not `DispatchSource.makeSignalSource`: on Linux, libdispatch reads signals through a
/// `signalfd` and blocks the signal on one of its own threads only; a signal whose action is "ignore"
/// and that the kernel directs at another thread is then discarded, so a `kill` could be lost (seen
/// in tests). Instead each signal gets a real handler that writes the signal number into a
/// non-blocking pipe (`write(2)` is async-signal-safe), and a `DispatchSource` reads the pipe.
private final class SignalHub: Sendable {
    static let shared = SignalHub()

    private struct State {
        var installed: Set<Int32> = []
        var subscribers: [UInt64: (signals: Set<Int32>, continuation: AsyncStream<Int32>.Continuation)] = [:]
        var nextID: UInt64 = 0
        /// Reads the pipe; kept for the life of the process.
        var reader: (any DispatchSourceRead)?
    }

    private let state = Mutex(State())
    private let readFD: Int32

    private init() {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { fatalError("pipe(2) failed for signal handling: errno \(errno)") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        readFD = fds[0]
        signalPipeWriteFD = fds[1]
    }

    func subscribe(_ signals: Set<Int32>, _ continuation: AsyncStream<Int32>.Continuation) -> UInt64 {
        state.withLock { s in
            if s.reader == nil {
                let fd = readFD
                let reader = DispatchSource.makeReadSource(fileDescriptor: fd, queue: DispatchQueue(label: "process-signals"))
                reader.setEventHandler { SignalHub.shared.drainPipe() }
                reader.resume()
                s.reader = reader
            }
            for number in signals.sorted() where !s.installed.contains(number) {
                var action = sigaction()
                action.__sigaction_handler.sa_handler = forwardSignalToPipe
                sigemptyset(&action.sa_mask)
                action.sa_flags = SA_RESTART
                sigaction(number, &action, nil)
                s.installed.insert(number)
            }
            s.nextID += 1
            s.subscribers[s.nextID] = (signals, continuation)
            return s.nextID
        }
    }

    func unsubscribe(_ id: UInt64) {
        _ = state.withLock { $0.subscribers.removeValue(forKey: id) }
    }

    /// Reads every signal number waiting in the pipe and hands each to its subscribers, in order.
    private func drainPipe() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(readFD, $0.baseAddress, $0.count) }
            guard count > 0 else { return }  // EAGAIN: drained
            for byte in buffer[0..<count] { deliver(Int32(byte)) }
        }
    }

    private func deliver(_ number: Int32) {
        let targets = state.withLock { s in s.subscribers.values.filter { $0.signals.contains(number) }.map(\.continuation) }
        for continuation in targets { continuation.yield(number) }
    }
}

/// The pipe's write end, set once before the first handler is installed and never changed.
nonisolated(unsafe) private var signalPipeWriteFD: Int32 = -1

/// The handler of every subscribed signal: async-signal-safe (one `write(2)`, `errno` preserved).
private func forwardSignalToPipe(_ number: Int32) {
    let savedErrno = errno
    var byte = UInt8(truncatingIfNeeded: number)
    _ = write(signalPipeWriteFD, &byte, 1)
    errno = savedErrno
}
