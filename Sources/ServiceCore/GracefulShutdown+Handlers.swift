extension GracefulShutdown {
    /// Identifies a handler registered with `onTrigger(_:)`, for `removeHandler(_:)`.
    public struct HandlerID: Hashable, Sendable {
        let rawValue: UInt64
    }

    /// Registers `handler` to run once when the trigger fires, or runs it at once (on the calling
    /// thread) when it already has. Handlers run in registration order on the thread that calls
    /// `trigger()`: keep them short and non-blocking (set a flag, resume a continuation, close a listener).
    /// - Returns: an id for `removeHandler(_:)`; ignore it when the handler never needs removing.
    @discardableResult
    public func onTrigger(_ handler: @escaping @Sendable () -> Void) -> HandlerID {
        let id = state.withLock { s -> UInt64? in
            s.nextID += 1
            guard !s.isTriggered else { return nil }
            s.handlers[s.nextID] = handler
            return s.nextID
        }
        guard let id else {
            handler()
            return HandlerID(rawValue: 0)
        }
        return HandlerID(rawValue: id)
    }

    /// Removes a handler that has not run yet.
    /// - Returns: `true` when it was removed; `false` when it already ran (or the id is unknown).
    @discardableResult
    public func removeHandler(_ id: HandlerID) -> Bool {
        state.withLock { $0.handlers.removeValue(forKey: id.rawValue) != nil }
    }
}

extension GracefulShutdown {
    /// Waits `duration`, or less when the trigger fires first: the pause of a loop that should not
    /// wait out its interval once asked to stop. Returns at once when the trigger has fired.
    /// - Throws: `CancellationError` when the calling task is cancelled (escalation).
    public func sleep(for duration: Duration) async throws {
        guard !isTriggered else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: duration) }
            group.addTask { await self.wait() }
            await group.next()
            group.cancelAll()
        }
        try Task.checkCancellation()
    }
}
