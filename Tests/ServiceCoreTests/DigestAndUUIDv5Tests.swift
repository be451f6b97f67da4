import Foundation
import ServiceCore
import Testing

@Suite struct DigestTests {
    func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test func matchesTheFIPS180Examples() {
        // FIPS 180-4 examples (NIST "SHA1.pdf", "SHA256.pdf"): "abc" and the empty message.
        #expect(hex(Digest.sha1(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(hex(Digest.sha1([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(hex(Digest.sha256(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(Digest.sha256([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test func matchesPythonHashlibOnBinaryInput() async throws {
        let bytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let script = "import hashlib, sys; d = sys.stdin.buffer.read(); print(hashlib.sha1(d).hexdigest()); print(hashlib.sha256(d).hexdigest())"
        let lines = try await runPython(script, arguments: [], stdin: bytes)
        #expect(lines == [hex(Digest.sha1(bytes)), hex(Digest.sha256(bytes))])
        #expect(Digest.sha1(bytes).count == 20)
        #expect(Digest.sha256(bytes).count == 32)
    }

    @Test func matchesPythonHashlibAtEveryLengthAroundTheBlockPadding() async throws {
        // Lengths 0 to 200 cross both hashes' padding cases (55/56 and 119/120 bytes: the length field
        // fits the last block or needs another) and block boundaries (64, 128, 192).
        let bytes = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 17) }
        let script = """
            import hashlib, sys
            d = sys.stdin.buffer.read()
            for n in range(len(d) + 1):
                print(hashlib.sha1(d[:n]).hexdigest(), hashlib.sha256(d[:n]).hexdigest())
            """
        let lines = try await runPython(script, arguments: [], stdin: bytes)
        let ours = (0...bytes.count).map { n in
            let prefix = Array(bytes.prefix(n))
            let raw = prefix.withUnsafeBytes { Digest.sha256($0) }
            #expect(raw == Digest.sha256(prefix), "length \(n): the two SHA-256 entry points differ")
            return "\(hex(Digest.sha1(prefix))) \(hex(Digest.sha256(prefix)))"
        }
        #expect(lines == ours)
    }
}

@Suite struct UUIDVersion5Tests {
    static let dns = UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!

    @Test func matchesRFC9562Example() {
        // RFC 9562 Appendix A.4: UUIDv5 of "www.example.com" in the DNS namespace.
        let uuid = UUID.v5(namespace: Self.dns, name: "www.example.com")
        #expect(uuid.uuidString.lowercased() == "2ed6657d-e927-568b-95e1-2665a8aea6a2")
    }

    @Test func setsVersionAndVariant() {
        for name in ["", "a", "b", "request-completed\nreq-1"] {
            let bytes = UUID.v5(namespace: Self.dns, name: name).uuid
            #expect(bytes.6 >> 4 == 5)
            #expect(bytes.8 >> 6 == 0b10)
        }
        #expect(UUID.v5(namespace: Self.dns, name: "a") != UUID.v5(namespace: Self.dns, name: "b"))
        #expect(UUID.v5(namespace: Self.dns, name: "a") == UUID.v5(namespace: Self.dns, name: "a"))
    }

    @Test func matchesPythonUUID5() async throws {
        let namespaces = [Self.dns, UUID(uuidString: "26a8710c-1894-4fc1-b8dc-e7e709f9240b")!, UUID()]
        let names = ["", "www.example.com", "héllo wörld — 日本語 🚀", "delivery-report\nreq-1\n" + String(repeating: "ab", count: 32),
                     String(repeating: "x", count: 10_000), "e\u{301} vs \u{e9}"]
        for namespace in namespaces {
            let script = """
                import sys, uuid
                ns = uuid.UUID(sys.argv[1])
                for name in sys.argv[2:]:
                    print(uuid.uuid5(ns, name))
                """
            let lines = try await runPython(script, arguments: [namespace.uuidString] + names, stdin: [])
            #expect(lines == names.map { UUID.v5(namespace: namespace, name: $0).uuidString.lowercased() })
        }
    }
}

/// Runs `python3 -c script arguments…` and returns its stdout lines. The wait happens in
/// `terminationHandler`, off the cooperative pool; output goes through a file, never a pipe.
private func runPython(_ script: String, arguments: [String], stdin: [UInt8]) async throws -> [String] {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("servicecore-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let inURL = scratch.appendingPathComponent("in"), outURL = scratch.appendingPathComponent("out")
    try Data(stdin).write(to: inURL)
    _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
    let input = try FileHandle(forReadingFrom: inURL), output = try FileHandle(forWritingTo: outURL)
    defer { try? input.close(); try? output.close() }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", script] + arguments
    process.environment = ProcessInfo.processInfo.environment.merging(["PYTHONIOENCODING": "utf-8", "PYTHONUTF8": "1"]) { $1 }
    process.standardInput = input
    process.standardOutput = output
    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
        do { try process.run() } catch { continuation.resume(throwing: error) }
    }
    guard status == 0 else { throw PythonFailure(description: "python3 exited with \(status)") }
    return String(decoding: try Data(contentsOf: outURL), as: UTF8.self).split(separator: "\n").map(String.init)
}

private struct PythonFailure: Error, CustomStringConvertible {
    let description: String
}

@Suite struct UUIDVersion4Tests {
    @Test func lowercasedStringIsTheLowercaseCanonicalText() {
        let fixed = [UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
                     UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)),
                     UUID(uuidString: "2ED6657D-E927-568B-95E1-2665A8AEA6A2")!]
        #expect(fixed.map(\.lowercasedString) == ["00000000-0000-0000-0000-000000000000",
                                                  "ffffffff-ffff-ffff-ffff-ffffffffffff",
                                                  "2ed6657d-e927-568b-95e1-2665a8aea6a2"])
        for uuid in (0..<1_000).map({ _ in UUID() }) {
            #expect(uuid.lowercasedString == uuid.uuidString.lowercased())
        }
    }

    @Test func randomSetsVersionAndVariantAndItsOtherBitsVary() {
        let draws = (0..<10_000).map { _ in UUID.random() }
        #expect(Set(draws).count == draws.count)
        // Each of the 122 random bits is set in about half the draws (a constant or zeroed byte would
        // show as 0 or 10,000); the 6 fixed bits are the version (0100) and the variant (10).
        var setCounts = [Int](repeating: 0, count: 128)
        for uuid in draws {
            withUnsafeBytes(of: uuid.uuid) { bytes in
                for bit in 0..<128 where bytes[bit / 8] & (0x80 >> UInt8(bit % 8)) != 0 { setCounts[bit] += 1 }
            }
        }
        let fixed: [Int: Int] = [48: 0, 49: 10_000, 50: 0, 51: 0, 64: 10_000, 65: 0]
        for bit in 0..<128 {
            if let expected = fixed[bit] {
                #expect(setCounts[bit] == expected, "bit \(bit)")
            } else {
                #expect((4_000...6_000).contains(setCounts[bit]), "bit \(bit) set in \(setCounts[bit]) of 10,000")
            }
        }
    }

    @Test func pythonReadsRandomUUIDsAsVersion4() async throws {
        let texts = (0..<200).map { _ in UUID.random().lowercasedString }
        let script = """
            import sys, uuid
            for text in sys.argv[1:]:
                u = uuid.UUID(text)
                print(u.version, u.variant == uuid.RFC_4122, str(u) == text)
            """
        let lines = try await runPython(script, arguments: texts, stdin: [])
        #expect(lines == Array(repeating: "4 True True", count: texts.count))
    }
}
