import Foundation
import RegistrationServiceCore
import ServiceCore
import Testing

/// `registration-service --check-config` loads the key file as start loads it (`RegistrationProgram`).
@Suite struct RegistrationProgramTests {
    static func errors(_ environment: [String: String]) -> [String] {
        RegistrationProgram.main.loadSettings(environment: environment).environment.errors.map { "\($0.variable): \($0.problem)" }
    }

    static func keyFile(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("registration-keys-\(UUID().uuidString).json").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func withoutAKeyFileTheCheckFails() {
        let errors = Self.errors([:])
        #expect(errors.count == 1 && errors[0].hasPrefix("PUSH_AUTH_KEYS_FILE: authentication is on but no keys"), "\(errors)")
        #expect(Self.errors(["PUSH_AUTH_DISABLED": "true"]).isEmpty)
    }

    @Test func aKeyFileThatDoesNotExistOrDoesNotParseFailsTheCheck() throws {
        #expect(Self.errors(["PUSH_AUTH_KEYS_FILE": "/nonexistent/keys.json"]) == ["PUSH_AUTH_KEYS_FILE: cannot read the key file /nonexistent/keys.json"])
        let garbage = try Self.keyFile("{\"api_keys\": [{\"id\": 1}]}")
        let errors = Self.errors(["PUSH_AUTH_KEYS_FILE": garbage])
        #expect(errors.count == 1 && errors[0].hasPrefix("PUSH_AUTH_KEYS_FILE:"), "\(errors)")
        #expect(Self.errors(["PUSH_AUTH_KEYS": "not json"]).first?.hasPrefix("PUSH_AUTH_KEYS:") == true)
        let good = try Self.keyFile("{\"api_keys\": [], \"registration_jwt_keys\": []}")
        #expect(Self.errors(["PUSH_AUTH_KEYS_FILE": good]).isEmpty)
    }

    @Test func everyBadSettingIsNamedAndAdminSettingsAreRead() throws {
        let good = try Self.keyFile("{\"api_keys\": [], \"registration_jwt_keys\": []}")
        let loaded = RegistrationProgram.main.loadSettings(environment: [
            "PUSH_AUTH_KEYS_FILE": good, "PUSH_GRPC_PORT": "70000", "PUSH_ADMIN_PORT": "-1", "PUSH_ADMIN_HOST": "127.0.0.1",
            "PUSH_SHUTDOWN_GRACE_MS": "soon", "LOG_FORMAT": "xml",
        ])
        #expect(Set(loaded.environment.errors.map(\.variable)) == ["PUSH_GRPC_PORT", "PUSH_ADMIN_PORT", "PUSH_SHUTDOWN_GRACE_MS", "LOG_FORMAT"])
        #expect(!loaded.environment.checkReport(program: "registration-service").contains("does not read"))
        #expect(loaded.launch == nil)
    }
}
