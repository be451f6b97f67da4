import HTTP2

/// A gRPC status: a code and a message (https://grpc.github.io/grpc/core/md_doc_statuscodes.html).
///
/// It is also the GRPC module's error type: handlers throw it to end a call with that status, and any
/// other error thrown by a handler becomes `UNKNOWN`.
public struct GRPCStatus: Error, Sendable, Equatable, CustomStringConvertible {
    /// A gRPC status code, by gRPC's names. The raw value is the number sent in `grpc-status`.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// 0: not an error.
        public static let ok = Code(rawValue: 0)
        /// 1: the operation was cancelled, typically by the caller.
        public static let cancelled = Code(rawValue: 1)
        /// 2: unknown error (also: a handler threw something other than `GRPCStatus`).
        public static let unknown = Code(rawValue: 2)
        /// 3: the client sent an invalid argument.
        public static let invalidArgument = Code(rawValue: 3)
        /// 4: the deadline (`grpc-timeout`) expired before the operation completed.
        public static let deadlineExceeded = Code(rawValue: 4)
        /// 5: a requested entity was not found.
        public static let notFound = Code(rawValue: 5)
        /// 6: the entity a client tried to create already exists.
        public static let alreadyExists = Code(rawValue: 6)
        /// 7: the caller lacks permission.
        public static let permissionDenied = Code(rawValue: 7)
        /// 8: a resource (quota, message size) is exhausted.
        public static let resourceExhausted = Code(rawValue: 8)
        /// 9: the system is not in a state required for the operation.
        public static let failedPrecondition = Code(rawValue: 9)
        /// 10: the operation was aborted (concurrency conflict).
        public static let aborted = Code(rawValue: 10)
        /// 11: the operation was attempted past the valid range.
        public static let outOfRange = Code(rawValue: 11)
        /// 12: the method is not implemented or not supported.
        public static let unimplemented = Code(rawValue: 12)
        /// 13: an internal invariant was broken (also: protocol violations such as a bad frame).
        public static let `internal` = Code(rawValue: 13)
        /// 14: the service is currently unavailable; retrying may succeed.
        public static let unavailable = Code(rawValue: 14)
        /// 15: unrecoverable data loss or corruption.
        public static let dataLoss = Code(rawValue: 15)
        /// 16: the request lacks valid authentication credentials.
        public static let unauthenticated = Code(rawValue: 16)

        /// gRPC's name of the code, such as `DEADLINE_EXCEEDED`.
        public var name: String {
            let names = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                         "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                         "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]
            return rawValue >= 0 && rawValue < names.count ? names[rawValue] : "CODE_\(rawValue)"
        }

        public var description: String { name }
    }

    /// The status code.
    public var code: Code
    /// A message for developers, sent percent-encoded in `grpc-message`.
    public var message: String
    /// The underlying error, if any (never sent to the client).
    public var cause: (any Error)?
    /// Extra trailing metadata sent with the status (for example `retry-after` with RESOURCE_EXHAUSTED).
    public var metadata: [HTTP2Header] = []

    /// Creates a status.
    public init(_ code: Code, _ message: String = "", cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    public static func == (lhs: GRPCStatus, rhs: GRPCStatus) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    public var description: String {
        message.isEmpty ? "GRPCStatus(\(code.name))" : "GRPCStatus(\(code.name)): \(message)"
    }
}
