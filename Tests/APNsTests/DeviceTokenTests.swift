import PushDomain
import Testing
@testable import APNs

@Suite struct DeviceTokenTests {
    let hex64 = String(repeating: "a1B2", count: 16)

    @Test func normalizesCaseBracketsAndSpaces() throws {
        let plain = try DeviceToken(validating: hex64)
        #expect(plain.hex == hex64.lowercased())
        let grouped = stride(from: 0, to: 64, by: 8).map { i in
            String(hex64[hex64.index(hex64.startIndex, offsetBy: i)..<hex64.index(hex64.startIndex, offsetBy: i + 8)])
        }.joined(separator: " ")
        let described = try DeviceToken(validating: "<\(grouped)>")
        #expect(described == plain)
        #expect(try DeviceToken(validating: "  \(hex64.uppercased())  ") == plain)
        #expect(plain.bytes.count == 32)
        #expect(plain.bytes.prefix(2) == [0xA1, 0xB2])
        #expect(try DeviceToken(bytes: plain.bytes) == plain)
    }

    @Test func acceptsVariableLengthsUpTo256Bytes() throws {
        let eighty = String(repeating: "0f", count: 80)
        #expect(try DeviceToken(validating: eighty).bytes.count == 80)
        #expect(try DeviceToken(validating: String(repeating: "ab", count: 256)).hex.count == 512)
    }

    @Test func refusesWithTheExactProblem() {
        func message(_ input: String) -> String {
            do { _ = try DeviceToken(validating: input); return "accepted" } catch {
                #expect(error.apnsReason == "BadDeviceToken")
                #expect(APNsError(error).code == .invalidDeviceToken)
                #expect(APNsError(error).reason == .badDeviceToken)
                return error.message
            }
        }
        #expect(message(String(hex64.dropLast())).contains("odd number of hex digits (63)"))
        #expect(message("ab" + "g" + String(hex64.dropFirst(3))).contains("non-hex character 'g' at position 3"))
        #expect(message("<ab" + "Z" + String(hex64.dropFirst(3)) + ">").contains("non-hex character 'Z' at position 4"))
        #expect(message(String(repeating: "ab", count: 31)).contains("too short: 62 hex digits (31 bytes)"))
        #expect(message(String(repeating: "ab", count: 257)).contains("too long: 514 hex digits (257 bytes)"))
        #expect(message("").contains("is empty"))
        #expect(message("<>").contains("is empty"))
        #expect(message("<" + hex64).contains("'<' without a closing '>'"))
        #expect(message(hex64 + ">").contains("'>' without an opening '<'"))
        #expect(message("0x" + String(hex64.dropFirst(2))).contains("non-hex character 'x' at position 2"))
        #expect(message(String(hex64.dropLast()) + "é").contains("U+E9 at position 64"))
        #expect(message(hex64 + "\n").contains("position 65"))
    }
}
