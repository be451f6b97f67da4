import APNs
import HTTP2
import Testing

/// `APNsStreamFailure` without I/O: what each way a stream fails means for the send.
@Suite struct StreamFailureTests {
    @Test func everyStreamErrorHasItsMeaning() {
        func classify(_ code: HTTP2Error.Code, notProcessed: Bool = false, usable: Bool = true, cancelled: Bool = false) -> APNsStreamFailure {
            APNsStreamFailure.classify(code: code, wasNotProcessed: notProcessed, connectionUsable: usable, taskCancelled: cancelled)
        }
        #expect(classify(.cancelled) == .cancelled)
        #expect(classify(.timeout, cancelled: true) == .cancelled, "the caller's cancellation wins")
        #expect(classify(.goingAway, notProcessed: true, usable: false) == .notProcessed(retireConnection: true))
        #expect(classify(.goingAway, notProcessed: true, usable: true) == .notProcessed(retireConnection: false))
        #expect(classify(.streamRefused, notProcessed: true, usable: false) == .notProcessed(retireConnection: false))
        #expect(classify(.timeout) == .timedOut)
        #expect(classify(.connectionClosed) == .connectionLost(retireConnection: true))
        #expect(classify(.protocolError) == .connectionLost(retireConnection: true))
        #expect(classify(.streamReset) == .connectionLost(retireConnection: false), "a reset stream leaves its connection in service")
        #expect(classify(.invalidRequest) == .unexpected)
        #expect(classify(.internalError) == .unexpected)
    }
}
