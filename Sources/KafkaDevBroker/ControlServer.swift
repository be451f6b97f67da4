import Foundation
import Kafka
import ServiceCore
import Synchronization

/// The dev broker's loopback TCP control port: accepts connections on 127.0.0.1 and answers one line
/// per command line (see `KafkaDevBroker`). Each connection is served by a thread of its own with
/// blocking socket calls, away from Swift's cooperative pool.
final class ControlServer: Sendable {
    /// The bound port (the chosen one when 0 was asked for).
    let port: Int
    private let listener: Int32
    private let stopped = StopFlag()

    init(port requested: Int, controller: DevBrokerController, logger: Logger) throws(KafkaError) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw KafkaError(code: .invalidArgument, message: "socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(requested).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw KafkaError(code: .invalidArgument, message: "control port 127.0.0.1:\(requested): \(reason)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) {
            _ = $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: address.sin_port))
        self.listener = fd
        let stopped = self.stopped
        NamedThread.start(name: "dev-broker-control") {
            while !stopped.flag.load(ordering: .relaxed) {
                let connection = accept(fd, nil, nil)
                if connection < 0 {
                    if errno == EINTR { continue }
                    break
                }
                NamedThread.start(name: "control-conn") { ControlServer.serve(connection, controller: controller) }
            }
        }
        logger.info("control port listening", ["port": String(port)])
    }

    /// Stops accepting connections.
    func stop() {
        guard !stopped.flag.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private static func serve(_ fd: Int32, controller: DevBrokerController) {
        defer { close(fd) }
        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return }
            pending.append(contentsOf: chunk[0..<count])
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                if line.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { continue }
                let answer = Array((controller.execute(line) + "\n").utf8)
                var offset = 0
                while offset < answer.count {
                    let written = answer[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                    if written < 0, errno == EINTR { continue }
                    guard written > 0 else { return }
                    offset += written
                }
            }
        }
    }
}

/// A stop flag shared between the server object and its accept thread.
private final class StopFlag: Sendable {
    let flag = Atomic<Bool>(false)
}
