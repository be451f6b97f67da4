import Foundation
import GRPC
import HTTP2
import PushMessages
import ServiceCore

/// `pushctl register` and `pushctl unregister`.
enum RegistrationCommands {
    /// Runs `body` with a client of the registration service, closing it afterwards; a gRPC status
    /// becomes its exit status (`exitError`).
    static func withClient<T>(
        _ arguments: CommandLineArguments, _ settings: PushCtlSettings, _ body: (GRPCUnaryClient) async throws -> T
    ) async throws -> T {
        let env = settings.env
        let address = arguments.value("grpc") ?? env.string("PUSH_GRPC_ADDRESS", default: "127.0.0.1:50051")
        let apiKey = arguments.value("api-key") ?? env.string("PUSH_API_KEY")
        let tls = arguments.flag("tls") ? HTTP2ClientTLS(caFile: env.string("PUSH_GRPC_CA_FILE")) : nil
        let client: GRPCUnaryClient
        do {
            client = try await GRPCUnaryClient.connect(address: address, apiKey: apiKey, tls: tls)
        } catch let error as PushCtlError where error.exitCode == .unavailable {
            throw settings.withSettingsHint(error, variable: "PUSH_GRPC_ADDRESS", option: "--grpc")
        }
        do {
            let result = try await body(client)
            await client.close()
            return result
        } catch let status as GRPCStatus {
            await client.close()
            var error = exitError(status)
            if status.code == .unauthenticated {
                error.message += apiKey == nil
                    ? " (no API key given: pass --api-key KEY or set PUSH_API_KEY; the local stack's is in $PUSH_VAR_DIR/stack.env: --env-file)"
                    : " (check --api-key or PUSH_API_KEY)"
            }
            throw error
        } catch let error as PushCtlError where error.exitCode == .unavailable {
            await client.close()
            throw settings.withSettingsHint(error, variable: "PUSH_GRPC_ADDRESS", option: "--grpc")
        } catch {
            await client.close()
            throw error
        }
    }

    static func register(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 0)
        let bundle = try arguments.required("bundle")
        let environment: Environment = try arguments.choice("environment", default: .sandbox, ["sandbox": .sandbox, "production": .production])
        let random = try arguments.value("random").map { _ in try arguments.int("random", default: 1, in: 1...10_000_000) }
        let concurrency = try arguments.int("concurrency", default: 64, in: 1...10_000)
        if random == nil, arguments.value("token") == nil { throw CommandLineArguments.UsageError("option --token (or --random N) is required") }
        if random != nil, arguments.value("token") != nil { throw CommandLineArguments.UsageError("give --token or --random, not both") }

        let user = arguments.value("user") ?? ""
        let request: @Sendable (String, String?) -> RegisterTokenRequest = { token, installation in
            var device = Device()
            device.deviceToken = token
            device.bundleID = bundle
            device.environment = environment
            device.userID = user
            device.installationID = installation ?? ""
            var request = RegisterTokenRequest()
            request.device = device
            return request
        }
        try await withClient(arguments, settings) { client in
            if let count = random {
                let started = ContinuousClock.now
                let registered = try await registerMany(client, count: count, concurrency: concurrency) { _ in
                    request(randomToken(), nil)
                }
                let elapsed = ContinuousClock.now - started
                print("registered \(ProgressBar.grouped(registered)) random tokens for bundle \(bundle)\(arguments.value("user").map { ", user \($0)" } ?? "") in \(elapsed.formatted(.units(allowed: [.seconds, .milliseconds], width: .narrow)))")
                return
            }
            let response: RegisterTokenResponse = try await client.call(
                "/push.v1.TokenRegistry/RegisterToken", request(try arguments.required("token"), arguments.value("installation")))
            if arguments.flag("json") {
                print(response.jsonString())
            } else {
                print("registered \(response.deviceToken) (event \(response.eventID))")
            }
        }
    }

    static func unregister(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 0)
        var request = UnregisterTokenRequest()
        request.deviceToken = try arguments.required("token")
        request.bundleID = try arguments.required("bundle")
        request.reason = arguments.value("reason") ?? ""
        try await withClient(arguments, settings) { client in
            let response: UnregisterTokenResponse = try await client.call("/push.v1.TokenRegistry/UnregisterToken", request)
            if arguments.flag("json") {
                print(response.jsonString())
            } else {
                print("unregistered \(response.deviceToken) (event \(response.eventID))")
            }
        }
    }

    /// `count` calls, at most `concurrency` at once; a progress line on standard error.
    private static func registerMany(
        _ client: GRPCUnaryClient, count: Int, concurrency: Int, _ make: @escaping @Sendable (Int) -> RegisterTokenRequest
    ) async throws -> Int {
        let bar = ProgressBar()
        let started = ContinuousClock.now
        return try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0, done = 0
            while next < min(concurrency, count) {
                let index = next
                group.addTask { let _: RegisterTokenResponse = try await client.call("/push.v1.TokenRegistry/RegisterToken", make(index)) }
                next += 1
            }
            while try await group.next() != nil {
                done += 1
                if done % 500 == 0 || done == count {
                    PushCtl.printProgress(bar.render(done: done, total: count, elapsed: ContinuousClock.now - started))
                }
                if next < count {
                    let index = next
                    group.addTask { let _: RegisterTokenResponse = try await client.call("/push.v1.TokenRegistry/RegisterToken", make(index)) }
                    next += 1
                }
            }
            PushCtl.endProgress()
            return done
        }
    }

    /// A random 32-byte device token in lowercase hex.
    static func randomToken() -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// The exit status for a gRPC status: `UNAVAILABLE` and `DEADLINE_EXCEEDED` → 3, others → 1.
    static func exitError(_ status: GRPCStatus) -> PushCtlError {
        let code: PushCtlExitCode = status.code == .unavailable || status.code == .deadlineExceeded ? .unavailable : .failed
        return PushCtlError(code, "registration service answered \(status)")
    }
}

extension PushCtl {
    /// Rewrites the progress line on standard error.
    static func printProgress(_ line: String) {
        FileHandle.standardError.write(Data(("\r" + line + "\u{1B}[K").utf8))
    }

    /// Ends the progress line.
    static func endProgress() {
        FileHandle.standardError.write(Data("\n".utf8))
    }
}
