import HTTP2

/// What a stream that failed without an answer means for one send, as a value (docs/apns-client.md
/// "Liveness"; the retry decision that follows is ``APNsRetryStateMachine``'s).
public enum APNsStreamFailure: Sendable, Hashable {
    /// The caller was cancelled: the send ends with `CancellationError`.
    case cancelled
    /// APNs provably did not process the stream (above a GOAWAY's last-stream-id, REFUSED_STREAM,
    /// never left our queue; RFC 9113 §8.7): sent again at once elsewhere, not an attempt.
    /// `retireConnection`: the connection is going away and takes no new streams.
    case notProcessed(retireConnection: Bool)
    /// No answer within the stream's timeout (reset with CANCEL): the device token's failure, its
    /// gate closes; the connection is pinged unless it answered another stream since.
    case timedOut
    /// The connection closed or broke, or the peer reset the stream: an attempt, and Apple-wide
    /// trouble for the circuit breaker. `retireConnection`: the connection itself failed (not just
    /// the stream).
    case connectionLost(retireConnection: Bool)
    /// Anything else (a bug, not a network condition): the send fails with `.deliveryFailed`.
    case unexpected

    /// Classifies a stream's `HTTP2Error`.
    /// - Parameters:
    ///   - code: the error's code.
    ///   - wasNotProcessed: `HTTP2Error.wasNotProcessed`.
    ///   - connectionUsable: whether the connection still takes new streams.
    ///   - taskCancelled: whether the sending task was cancelled.
    public static func classify(code: HTTP2Error.Code, wasNotProcessed: Bool, connectionUsable: Bool, taskCancelled: Bool) -> Self {
        if code == .cancelled || taskCancelled { return .cancelled }
        if wasNotProcessed { return .notProcessed(retireConnection: code == .goingAway && !connectionUsable) }
        if code == .timeout { return .timedOut }
        if code == .connectionClosed || code == .protocolError || code == .streamReset {
            return .connectionLost(retireConnection: code != .streamReset)
        }
        return .unexpected
    }

    /// Classifies `error`, a stream's failure on a connection that is `connectionUsable` or not.
    public static func classify(_ error: HTTP2Error, connectionUsable: Bool, taskCancelled: Bool) -> Self {
        classify(code: error.code, wasNotProcessed: error.wasNotProcessed, connectionUsable: connectionUsable, taskCancelled: taskCancelled)
    }
}
