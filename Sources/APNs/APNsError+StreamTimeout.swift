import HTTP2

extension APNsError {
    /// True when the last failure behind this error was a stream that APNs did not answer within
    /// the request timeout (the stream was reset with CANCEL, RFC 9113 §8.1): `cause` is an
    /// `HTTP2Error` with code `.timeout`. False for dropped connections, resets and every other error.
    public var isStreamTimeout: Bool {
        (cause as? HTTP2Error)?.code == .timeout
    }
}
