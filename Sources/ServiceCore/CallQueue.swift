/// Calls handed from a thread outside Swift concurrency (a C library's callback: nghttp2's, libmicrohttpd's)
/// to one serving task, which runs each as a child of its own task group, so that no call is an
/// unstructured task and the server's owner awaits every call it started.
///
/// Calls wait in an unbounded buffer (an `AsyncStream`) until `serve` takes them; the server holds
/// their number to its connection and stream limits. Safe to use from any thread.
public final class CallQueue<Call: Sendable>: Sendable {
    private let calls = AsyncStream<Call>.makeStream(bufferingPolicy: .unbounded)

    /// An open queue.
    public init() {}

    /// Hands `call` to `serve` (from any thread).
    /// - Returns: false when the queue was finished: the call was dropped.
    @discardableResult
    public func enqueue(_ call: Call) -> Bool {
        if case .terminated = calls.continuation.yield(call) { return false }
        return true
    }

    /// Ends `serve` once it has started every call enqueued before; later calls are dropped.
    /// Idempotent.
    public func finish() {
        calls.continuation.finish()
    }

    /// Runs `run` for each call as a child task until `finish()` (or the calling task's cancellation,
    /// which ends the buffer as `finish()` does), then cancels the calls still running and returns
    /// once they ended. Call it once per queue (the buffer has one reader).
    /// - Parameter run: handles one call.
    public func serve(_ run: @escaping @Sendable (Call) async -> Void) async {
        await withDiscardingTaskGroup { group in
            for await call in calls.stream {
                group.addTask { await run(call) }
            }
            group.cancelAll()
        }
    }
}
