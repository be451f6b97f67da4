import ProtobufCodec
import PushMessages
import Testing

/// Broken input must throw a `ProtobufError`, never trap, and agree with Python's protobuf parser
/// on what is broken.
@Suite("Malformed binary input")
struct MalformedInputTests {
    func decodeError<M: ProtobufMessage>(_ type: M.Type, _ bytes: [UInt8]) -> ProtobufError? {
        do {
            _ = try M(protobufBytes: bytes)
            return nil
        } catch {
            return error
        }
    }

    @Test func everyTruncationAgreesWithPython() throws {
        let messages: [(String, [UInt8])] = [
            ("push.v1.SendRequest", Samples.sendRequestTokens.serializedBytes()),
            ("push.v1.DeliveryReport", Samples.deliveryReport.serializedBytes()),
            ("push.v1.TokenEvent", Samples.tokenEvent.serializedBytes()),
            ("push.v1.DeadLetter", Samples.deadLetter.serializedBytes()),
        ]
        for (type, full) in messages {
            let prefixes = (0..<full.count).map { Array(full[..<$0]) }
            let python = try PythonOracle.parses(type, prefixes)
            var failures = 0
            for (length, prefix) in prefixes.enumerated() {
                let error: ProtobufError?
                switch type {
                case "push.v1.SendRequest": error = decodeError(SendRequest.self, prefix)
                case "push.v1.DeliveryReport": error = decodeError(DeliveryReport.self, prefix)
                case "push.v1.TokenEvent": error = decodeError(TokenEvent.self, prefix)
                default: error = decodeError(DeadLetter.self, prefix)
                }
                if error != nil { failures += 1 }
                #expect((error == nil) == python[length], "\(type) cut at \(length) of \(full.count): Swift \(error.map { "\($0)" } ?? "accepts"), Python \(python[length] ? "accepts" : "refuses")")
            }
            // Most cuts fall inside a field.
            #expect(failures > full.count / 2, "\(type): only \(failures) of \(full.count) truncations refused")
        }
    }

    @Test func truncatedValuesNameTheProblem() throws {
        let error = try #require(decodeError(SendRequest.self, Array(Samples.sendRequestUsers.serializedBytes().dropLast(3))))
        #expect(error.code == .lengthPastEnd)
        #expect(error.fieldPath == "notification")
        let varint = try #require(decodeError(DeliveryReport.self, [0x48, 0x96]))
        #expect(varint.code == .truncated)
        #expect(varint.fieldPath == "http_status")
        #expect(varint.description == "http_status: truncated varint")
        #expect(decodeError(DeliveryReport.self, [0x48])?.code == .truncated)
        #expect(decodeError(Scalars.self, [0x0D, 1, 2, 3])?.code == .truncated)  // fixed32 short
        #expect(decodeError(Scalars.self, [0x09, 1, 2, 3, 4, 5, 6, 7])?.code == .truncated)  // fixed64 short
        #expect(decodeError(Scalars.self, [0xF8, 0xFF, 0xFF])?.code == .truncated)  // tag cut
    }

    @Test func invalidWireTypesAndFieldNumbers() throws {
        for wireType: UInt8 in [6, 7] {
            let error = try #require(decodeError(Notification.self, [0x08 | wireType, 0x01]))
            #expect(error.code == .invalidWireType)
            #expect(error.offset == 0)
        }
        #expect(decodeError(Notification.self, [0x00, 0x01])?.code == .invalidFieldNumber)
        #expect(decodeError(Notification.self, [0x02, 0x00])?.code == .invalidFieldNumber)
        // Field number 2^29 (one past the largest) in a 5-byte tag.
        #expect(decodeError(Notification.self, [0x80, 0x80, 0x80, 0x80, 0x10, 0x01])?.code == .invalidFieldNumber)
        // An end-group tag with no group, and a group that ends with another field's end tag.
        #expect(decodeError(Notification.self, [0x64])?.code == .unmatchedGroup)
        #expect(decodeError(Notification.self, [0x63, 0x08, 0x01, 0x6C])?.code == .unmatchedGroup)
        #expect(decodeError(Notification.self, [0x63, 0x08, 0x01])?.code == .truncated)
    }

    @Test func overlongVarints() throws {
        // 11 bytes, and a 10th byte that carries bits past 64.
        let eleven: [UInt8] = [0x20] + Array(repeating: 0xFF, count: 10) + [0x01]
        #expect(decodeError(Notification.self, eleven)?.code == .malformedVarint)
        let overflow: [UInt8] = [0x20] + Array(repeating: 0xFF, count: 9) + [0x02]
        #expect(decodeError(Notification.self, overflow)?.code == .malformedVarint)
        // A 10-byte varint that fits is fine (uint32 fields take the low 32 bits).
        let fits: [UInt8] = [0x20] + Array(repeating: 0xFF, count: 9) + [0x01]
        #expect(try Notification(protobufBytes: fits).priority == UInt32.max)
        #expect(try PythonOracle.parses("push.v1.Notification", [eleven, fits]) == [false, true])
    }

    @Test func lengthsPastTheEnd() throws {
        #expect(decodeError(Notification.self, [0x3A, 0x05, 0x7B, 0x7D])?.code == .lengthPastEnd)
        // A huge length must not be trusted for an allocation.
        let huge: [UInt8] = [0x3A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]
        #expect(decodeError(Notification.self, huge)?.code == .lengthPastEnd)
        // A nested length that fits the outer message but not its own enclosing message.
        let nested: [UInt8] = [0x2A, 0x03, 0x3A, 0x05, 0x41, 0x42, 0x43, 0x44, 0x45]
        let error = try #require(decodeError(SendRequest.self, nested))
        #expect(error.code == .lengthPastEnd)
        #expect(error.fieldPath == "notification.payload")
    }

    @Test func invalidUTF8InStrings() throws {
        let bad: [[UInt8]] = [[0xC3, 0x28], [0xFF], [0xED, 0xA0, 0x80], [0xF0, 0x9F, 0x98], [0xC0, 0xAF]]
        for bytes in bad {
            let message: [UInt8] = [0x2A, UInt8(bytes.count + 2), 0x3A, UInt8(bytes.count)] + bytes
            let error = try #require(decodeError(SendRequest.self, message))
            #expect(error.code == .invalidUTF8)
            #expect(error.description == "notification.payload: string is not valid UTF-8")
            // bytes fields take anything.
            #expect(try DeadLetter(protobufBytes: [0x22, UInt8(bytes.count)] + bytes).originalKey == bytes)
        }
        let python = try PythonOracle.parses("push.v1.Notification", bad.map { [0x3A, UInt8($0.count)] + $0 })
        #expect(python == Array(repeating: false, count: bad.count))
    }

    @Test func deepNestingIsRefused() throws {
        var bytes: [UInt8] = []
        for _ in 0..<150 { bytes = [0x1A] + varint(bytes.count) + bytes }  // Tree.parent, 150 deep
        #expect(decodeError(Tree.self, bytes)?.code == .nestingTooDeep)
        var groups: [UInt8] = []
        for _ in 0..<150 { groups = [0x63] + groups + [0x64] }
        #expect(decodeError(Notification.self, groups)?.code == .nestingTooDeep)
    }

    @Test func randomCorruptionNeverTraps() throws {
        var generator = SplitMix64(seed: 0x5EED)
        let valid = Samples.sendRequestTokens.serializedBytes() + Samples.deadLetter.serializedBytes()
        for _ in 0..<3000 {
            var bytes = valid
            for _ in 0..<(1 + Int(generator.next() % 4)) {
                let index = Int(generator.next() % UInt64(bytes.count))
                bytes[index] = UInt8(truncatingIfNeeded: generator.next())
            }
            if let request = try? SendRequest(protobufBytes: bytes) {
                // Whatever decodes re-encodes to something that decodes to the same value.
                #expect(try SendRequest(protobufBytes: request.serializedBytes()) == request)
            }
        }
    }
}

func varint(_ value: Int) -> [UInt8] {
    var writer = ProtobufWriter()
    writer.writeVarint(UInt64(value))
    return writer.bytes
}

/// A small deterministic generator, so a failure reproduces.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
