import APNs
import HTTP2
import Testing

/// `APNsError.isStreamTimeout` tells an unanswered stream apart from other connection failures, so
/// the dispatcher can report OUTCOME_REASON_STREAM_TIMEOUT instead of CONNECTION_ERROR.
@Suite struct StreamTimeoutTests {
    @Test func onlyATimedOutStreamCounts() {
        let timedOut = APNsError(code: .deliveryFailed, message: "no answer", cause: HTTP2Error(.timeout, "30 s"), attempts: 3)
        #expect(timedOut.isStreamTimeout)
        for code in [HTTP2Error.Code.connectionClosed, .streamReset, .protocolError, .goingAway] {
            let failed = APNsError(code: .deliveryFailed, message: "failed", cause: HTTP2Error(code, "x"), attempts: 1)
            #expect(!failed.isStreamTimeout, "\(code)")
        }
        #expect(!APNsError(code: .deliveryFailed, message: "no cause").isStreamTimeout)
        #expect(!APNsError(code: .shutDown, message: "down").isStreamTimeout)
    }
}
