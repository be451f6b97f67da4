import Foundation
internal import CLibPQ
import ServiceCore

/// The owner of one libpq connection (`PGconn`) and its cancel object (`PGcancel`).
///
/// libpq: "a PGconn must not be used by two threads at once" (PostgreSQL 15 docs, §34.19 "Behavior in
/// Threaded Programs"). Every method except `cancelRunningStatement()` runs on the connection's
/// `DedicatedThread`, one at a time, which is why this wrapper may be `@unchecked Sendable`.
/// `PQcancel` is documented as safe to call from any thread (§34.7), and the `PGcancel` it uses is
/// freed only in `deinit`, after every job that could reach it released this object.
final class PQConnection: @unchecked Sendable {
    private var conn: OpaquePointer?
    private let cancelHandle: OpaquePointer?
    /// Read by the notice receiver through an unretained pointer; this object owns it, and
    /// `PQfinish` (in `finish()` or `deinit`) runs before this property is released.
    private let notices: NoticeSink

    private init(conn: OpaquePointer, notices: NoticeSink) {
        self.conn = conn
        self.notices = notices
        self.cancelHandle = PQgetCancel(conn)
        PQsetNoticeReceiver(conn, pqNoticeReceiver, Unmanaged.passUnretained(notices).toOpaque())
    }

    deinit {
        if let conn { PQfinish(conn) }
        if let cancelHandle { PQfreeCancel(cancelHandle) }
    }

    /// Opens a connection with `PQconnectdbParams` (blocking; honours `connect_timeout`).
    ///
    /// Adds `client_encoding=UTF8` and server options `DateStyle=ISO,YMD`, `TimeZone=UTC`,
    /// `bytea_output=hex` and `jit=off` (before the caller's own `options`, which win),
    /// `connect_timeout=10` when unset, and `fallback_application_name`.
    ///
    /// `jit=off`: the project's statements are short look-ups and writes, and PostgreSQL compiles a
    /// statement whose *estimated* cost passes `jit_above_cost` again at every execution, prepared or
    /// not. A batched look-up of many request ids on a day of a few large fan-outs is estimated at
    /// hundreds of thousands of rows while it reads none, and its compilation took 575 ms of the
    /// server's CPU per execution (docs/send-log.md "No JIT").
    static func connect(conninfo: String, password: String? = nil, applicationName: String, notices: NoticeSink) -> Result<PQConnection, PostgresError> {
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let parsed = PQconninfoParse(conninfo, &errorMessage) else {
            let reason = errorMessage.map { String(cString: $0) } ?? "out of memory"
            if let errorMessage { PQfreemem(errorMessage) }
            return .failure(PostgresError(code: .connectionFailed, message: "invalid connection string: \(clean(reason))"))
        }
        var parameters: [(String, String)] = []
        var option = parsed
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { parameters.append((String(cString: keyword), String(cString: value))) }
            option += 1
        }
        PQconninfoFree(parsed)

        func value(_ key: String) -> String? { parameters.last { $0.0 == key }?.1 }
        let target = describeTarget(host: value("hostaddr") ?? value("host"), port: value("port"), database: value("dbname"), user: value("user"))
        let ours = "-c DateStyle=ISO,YMD -c TimeZone=UTC -c bytea_output=hex -c jit=off"
        let serverOptions = value("options").map { "\(ours) \($0)" } ?? ours
        parameters.removeAll { ["client_encoding", "options"].contains($0.0) }
        parameters.append(("client_encoding", "UTF8"))
        parameters.append(("options", serverOptions))
        if let password {
            parameters.removeAll { $0.0 == "password" }
            parameters.append(("password", password))
        }
        if value("connect_timeout") == nil { parameters.append(("connect_timeout", "10")) }
        if value("fallback_application_name") == nil { parameters.append(("fallback_application_name", applicationName)) }

        let keywords = parameters.map { strdup($0.0) } + [nil]
        let values = parameters.map { strdup($0.1) } + [nil]
        defer {
            keywords.forEach { free($0) }
            values.forEach { free($0) }
        }
        let conn = keywords.map { UnsafePointer($0) }.withUnsafeBufferPointer { keywordBuffer in
            values.map { UnsafePointer($0) }.withUnsafeBufferPointer { valueBuffer in
                PQconnectdbParams(keywordBuffer.baseAddress, valueBuffer.baseAddress, 0)
            }
        }
        guard let conn else {
            return .failure(PostgresError(code: .connectionFailed, message: "could not connect to \(target): out of memory"))
        }
        guard PQstatus(conn) == CONNECTION_OK else {
            let reason = clean(String(cString: PQerrorMessage(conn)))
            PQfinish(conn)
            return .failure(PostgresError(code: .connectionFailed, message: "could not connect to \(target): \(reason)"))
        }
        return .success(PQConnection(conn: conn, notices: notices))
    }

    /// Whether the connection is up as far as libpq knows (no I/O).
    var isConnected: Bool { conn.map { PQstatus($0) == CONNECTION_OK } ?? false }

    /// Whether a transaction block is open (idle in it, or failed in it).
    var isInTransaction: Bool {
        guard let conn else { return false }
        let status = PQtransactionStatus(conn)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// The server process id serving this connection.
    var backendPID: Int32 { conn.map { PQbackendPID($0) } ?? 0 }

    /// Prepared statements of this session by SQL text and parameter types, named `push_1`, `push_2`…
    private var preparedStatements: [PreparedKey: String] = [:]
    private struct PreparedKey: Hashable {
        let sql: String
        let types: [UInt32]
    }
    /// The most statements one session keeps prepared; later ones run unprepared.
    static let maximumPreparedStatements = 256

    /// Runs one statement with the extended query protocol, parameters sent apart from the SQL text,
    /// results in text format: `PQexecParams`, or with `prepared`, `PQprepare` once per session and
    /// SQL text, then `PQexecPrepared`. Blocking.
    func execute(_ sql: String, _ parameters: [PostgresValue?], prepared: Bool = false) -> Result<PostgresRows, PostgresError> {
        guard let conn else { return .failure(Self.closedError) }
        var statementName: String?
        if prepared {
            let types = parameters.map { $0?.typeOID ?? 0 }
            let key = PreparedKey(sql: sql, types: types)
            if let name = preparedStatements[key] {
                statementName = name
            } else if preparedStatements.count < Self.maximumPreparedStatements {
                let name = "push_\(preparedStatements.count + 1)"
                switch collect(PQprepare(conn, name, sql, Int32(types.count), types), conn: conn) {
                case .failure(let error): return .failure(error)
                case .success: break
                }
                preparedStatements[key] = name
                statementName = name
            }
        }
        let count = parameters.count
        var types = [UInt32](repeating: 0, count: count)
        var lengths = [Int32](repeating: 0, count: count)
        var formats = [Int32](repeating: 0, count: count)
        var offsets = [Int?](repeating: nil, count: count)
        // One buffer holds every value; text values get a NUL terminator (libpq reads them as C strings).
        var buffer: [UInt8] = []
        buffer.reserveCapacity(parameters.reduce(0) { $0 + ($1?.bytes.count ?? 0) + 1 })
        for (index, parameter) in parameters.enumerated() {
            guard let parameter else { continue }
            types[index] = parameter.typeOID
            lengths[index] = Int32(parameter.bytes.count)
            formats[index] = parameter.isBinary ? 1 : 0
            offsets[index] = buffer.count
            buffer.append(contentsOf: parameter.bytes)
            buffer.append(0)
        }
        let result: OpaquePointer? = buffer.withUnsafeBufferPointer { storage in
            let base = storage.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }
            let pointers: [UnsafePointer<CChar>?] = offsets.map { offset -> UnsafePointer<CChar>? in
                guard let offset, let base else { return nil }
                return base + offset
            }
            if let statementName {
                return PQexecPrepared(conn, statementName, Int32(count), pointers, lengths, formats, 0)
            }
            return PQexecParams(conn, sql, Int32(count), types, pointers, lengths, formats, 0)
        }
        let rows = collect(result, conn: conn)
        if case .failure(let error) = rows, let statementName,
           error.code == .featureNotSupported || error.sqlState == "26000" {
            // "cached plan must not change result type" after a schema change, or the session's
            // statements were dropped (`DISCARD ALL`, `DEALLOCATE`): prepare again next time.
            preparedStatements = preparedStatements.filter { $0.value != statementName }
        }
        return rows
    }

    /// Runs a script of one or more statements with the simple query protocol (`PQexec`), no
    /// parameters; returns the last statement's result. Blocking.
    func executeScript(_ sql: String) -> Result<PostgresRows, PostgresError> {
        guard let conn else { return .failure(Self.closedError) }
        return collect(PQexec(conn, sql), conn: conn)
    }

    /// Reads what the server sent while the connection sat idle (without blocking) and reports
    /// whether it is still usable: a terminated backend sends a FATAL message and closes the socket.
    func probe() -> Bool {
        guard let conn, PQstatus(conn) == CONNECTION_OK else { return false }
        for _ in 0..<8 {
            var descriptor = pollfd(fd: PQsocket(conn), events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 0)
            if ready == 0 { break }
            if ready < 0 { return false }
            if PQconsumeInput(conn) == 0 { return false }
            while let notify = PQnotifies(conn) { PQfreemem(notify) }
            if PQstatus(conn) != CONNECTION_OK { return false }
        }
        return PQstatus(conn) == CONNECTION_OK
    }

    /// Asks the server to cancel the statement running on this connection; any thread.
    func cancelRunningStatement() {
        guard let cancelHandle else { return }
        var errorBuffer = [CChar](repeating: 0, count: 256)
        _ = PQcancel(cancelHandle, &errorBuffer, Int32(errorBuffer.count))
    }

    /// Closes the connection (sends Terminate). Idempotent.
    func finish() {
        if let conn { PQfinish(conn) }
        conn = nil
    }

    private static let closedError = PostgresError(code: .connectionClosed, message: "the connection was closed")

    /// Turns a `PGresult` into rows or an error, and frees it.
    private func collect(_ result: OpaquePointer?, conn: OpaquePointer) -> Result<PostgresRows, PostgresError> {
        guard let result else {
            let reason = Self.clean(String(cString: PQerrorMessage(conn)))
            return .failure(PostgresError(code: .connectionLost, message: reason.isEmpty ? "libpq returned no result" : reason))
        }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        switch status {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return .success(Self.rows(of: result))
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            abandonCopy(conn: conn, status: status)
            return .failure(PostgresError(code: .unsupportedResult, message: "COPY is not supported by this client"))
        default:
            return .failure(error(of: result, conn: conn))
        }
    }

    private func error(of result: OpaquePointer, conn: OpaquePointer) -> PostgresError {
        func field(_ code: UInt8) -> String? { PQresultErrorField(result, Int32(code)).map { String(cString: $0) } }
        // PG_DIAG_* field codes (postgres_ext.h) are character literals, which Swift does not import.
        let sqlState = field(UInt8(ascii: "C"))
        let lost = PQstatus(conn) != CONNECTION_OK
        // Errors libpq generates itself (a closed socket) have no fields: take its whole message,
        // which then includes the FATAL message the server sent before closing.
        var message = field(UInt8(ascii: "M"))
            ?? Self.clean(String(cString: lost ? PQerrorMessage(conn) : PQresultErrorMessage(result)))
        if message.isEmpty { message = lost ? "the server closed the connection" : "unknown error" }
        return PostgresError(
            code: lost ? .connectionLost : (sqlState.map { PostgresError.Code(sqlState: $0) } ?? .connectionLost),
            message: message,
            sqlState: sqlState,
            detail: field(UInt8(ascii: "D")),
            hint: field(UInt8(ascii: "H")),
            constraint: field(UInt8(ascii: "n")),
            severity: field(UInt8(ascii: "V")) ?? field(UInt8(ascii: "S")))
    }

    /// Ends a COPY the caller did not expect, so the connection returns to idle.
    private func abandonCopy(conn: OpaquePointer, status: ExecStatusType) {
        if status == PGRES_COPY_IN || status == PGRES_COPY_BOTH {
            _ = PQputCopyEnd(conn, "COPY is not supported by this client")
        }
        if status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH {
            var chunk: UnsafeMutablePointer<CChar>?
            while PQgetCopyData(conn, &chunk, 0) > 0 {
                if let chunk { PQfreemem(chunk) }
                chunk = nil
            }
        }
        while let next = PQgetResult(conn) { PQclear(next) }
    }

    private static func rows(of result: OpaquePointer) -> PostgresRows {
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        var columns: [PostgresRows.Column] = []
        columns.reserveCapacity(columnCount)
        for column in 0..<columnCount {
            columns.append(.init(name: String(cString: PQfname(result, Int32(column))), typeOID: PQftype(result, Int32(column))))
        }
        var cells: [String?] = []
        cells.reserveCapacity(rowCount * columnCount)
        for row in 0..<Int32(rowCount) {
            for column in 0..<Int32(columnCount) {
                if PQgetisnull(result, row, column) == 1 {
                    cells.append(nil)
                } else {
                    let length = Int(PQgetlength(result, row, column))
                    let bytes = UnsafeRawBufferPointer(start: PQgetvalue(result, row, column), count: length)
                    cells.append(String(decoding: bytes, as: UTF8.self))
                }
            }
        }
        let tag = String(cString: PQcmdStatus(result))
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresRows(columns: columns, cells: cells, rowCount: rowCount, commandTag: tag, affectedRows: affected)
    }

    /// libpq messages end with a newline and may contain tab-indented continuation lines.
    static func clean(_ message: String) -> String {
        message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: "; ")
    }

    private static func describeTarget(host: String?, port: String?, database: String?, user: String?) -> String {
        "\(host ?? "the default socket"):\(port ?? "5432") (database \(database ?? user ?? "default"), user \(user ?? "default"))"
    }
}

/// Where notices go: the connection's logger, and the caller's handler when one was given.
final class NoticeSink: Sendable {
    let logger: Logger
    let handler: (@Sendable (PostgresNotice) -> Void)?

    init(logger: Logger, handler: (@Sendable (PostgresNotice) -> Void)?) {
        self.logger = logger
        self.handler = handler
    }

    func deliver(_ notice: PostgresNotice) {
        let level: Logger.Level = switch notice.severity {
        case "WARNING": .warning
        case "NOTICE": .notice
        case "INFO", "LOG": .info
        case "FATAL", "PANIC", "ERROR": .warning
        default: .debug
        }
        var metadata: Logger.Metadata = ["pg.severity": notice.severity]
        if let sqlState = notice.sqlState { metadata["pg.sqlstate"] = sqlState }
        if let detail = notice.detail { metadata["pg.detail"] = detail }
        logger.log(level, notice.message, metadata)
        handler?(notice)
    }
}

/// libpq's notice receiver (`PQnoticeReceiver`); replaces the default one, which writes to stderr.
/// `arg` is the unretained `NoticeSink` owned by the `PQConnection` that installed it.
private func pqNoticeReceiver(_ arg: UnsafeMutableRawPointer?, _ result: OpaquePointer?) {
    guard let arg, let result else { return }
    let sink = Unmanaged<NoticeSink>.fromOpaque(arg).takeUnretainedValue()
    func field(_ code: UInt8) -> String? { PQresultErrorField(result, Int32(code)).map { String(cString: $0) } }
    sink.deliver(PostgresNotice(
        severity: field(UInt8(ascii: "V")) ?? field(UInt8(ascii: "S")) ?? "NOTICE",
        sqlState: field(UInt8(ascii: "C")),
        message: field(UInt8(ascii: "M")) ?? PQConnection.clean(String(cString: PQresultErrorMessage(result))),
        detail: field(UInt8(ascii: "D")),
        hint: field(UInt8(ascii: "H"))))
}
