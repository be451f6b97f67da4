@testable import DispatcherCore
import Testing

/// The `content-type` header of a record, parsed once (docs/contracts.md "Scheduling and cancelling").
@Suite struct RecordContentTypeTests {
    @Test(arguments: [
        ("application/x-protobuf; message=push.v1.SendRequest", "application/x-protobuf", "push.v1.SendRequest"),
        ("Application/JSON;message=push.v1.CancelRequest", "application/json", "push.v1.CancelRequest"),
        ("application/json; charset=utf-8", "application/json", nil),
        ("  application/json ; Message = x ", "application/json", "x"),
        ("application/json; MESSAGE=push.v1.SendRequest", "application/json", "push.v1.SendRequest"),
        ("application/x-protobuf; message=push.v1.sendrequest", "application/x-protobuf", "push.v1.sendrequest"),
        ("application/jsonx", "application/jsonx", nil),
        ("", "", nil),
    ] as [(String, String, String?)])
    func mediaTypeAndMessageParameter(header: String, mediaType: String, message: String?) {
        let parsed = RecordContentType(Array(header.utf8))
        #expect(parsed.text == header)
        #expect(parsed.mediaType == mediaType)
        #expect(parsed.message == message)
    }

    @Test func anAbsentHeaderIsEmpty() {
        let parsed = RecordContentType(nil)
        #expect(parsed.isEmpty && !parsed.isJSON && !parsed.isProtobuf && parsed.message == nil)
        #expect(RecordContentType(Array("application/json".utf8)).isJSON)
        #expect(!RecordContentType(Array("application/jsonx".utf8)).isJSON)
    }
}
