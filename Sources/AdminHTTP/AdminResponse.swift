/// One answer of the admin port.
public struct AdminResponse: Sendable, Equatable {
    /// HTTP status code.
    public var status: Int
    /// `Content-Type` header value.
    public var contentType: String
    /// The body (UTF-8).
    public var body: String

    /// - Parameters: see the properties.
    public init(status: Int, contentType: String = AdminResponse.plainText, body: String) {
        self.status = status
        self.contentType = contentType
        self.body = body
    }

    /// `text/plain; charset=utf-8`.
    public static let plainText = "text/plain; charset=utf-8"
    /// `application/json`.
    public static let json = "application/json"
    /// The Prometheus text exposition format, version 0.0.4.
    public static let prometheusText = "text/plain; version=0.0.4; charset=utf-8"
}
