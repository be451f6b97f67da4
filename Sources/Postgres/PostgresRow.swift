import Foundation

/// One row of a `PostgresRows`, read by column name with typed accessors.
///
/// Every accessor returns `nil` for SQL NULL and throws `PostgresError` with code `.columnNotFound`
/// when the result has no such column, or `.typeMismatch` (naming the column and its PostgreSQL type)
/// when the column's type cannot give the Swift type asked for. When several columns share a name,
/// the first one is read.
public struct PostgresRow: Sendable {
    let storage: PostgresRows.Storage
    let row: Int

    /// The column names of this row's result, in order.
    public var columnNames: [String] { storage.columns.map(\.name) }

    /// Whether `column` is SQL NULL.
    /// - Throws: `PostgresError` `.columnNotFound`.
    public func isNull(_ column: String) throws -> Bool { try cell(column).text == nil }

    /// The server's text representation of any column type except `bytea` (read that with `bytes`):
    /// `text`, `varchar`, `uuid`, `jsonb` (its JSON text), enums, numbers…
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch` for `bytea`.
    public func string(_ column: String) throws -> String? {
        let (text, type) = try cell(column)
        guard type != PostgresTypeOID.bytea else { throw mismatch(column, type, "String (use bytes(_:))") }
        return text
    }

    /// An integer column (`smallint`, `integer`, `bigint`, `oid`, or a `numeric` holding an integer
    /// in Int64's range, such as `sum(bigint)`).
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch`.
    public func int64(_ column: String) throws -> Int64? {
        let (text, type) = try cell(column)
        switch type {
        case PostgresTypeOID.int2, PostgresTypeOID.int4, PostgresTypeOID.int8, PostgresTypeOID.oid, PostgresTypeOID.numeric:
            guard let text else { return nil }
            guard let value = Int64(text) else { throw mismatch(column, type, "Int64", value: "\(text.prefix(40))") }
            return value
        default:
            throw mismatch(column, type, "Int64")
        }
    }

    /// An integer column, as `int64(_:)`.
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch`.
    public func int(_ column: String) throws -> Int? {
        guard let value = try int64(column) else { return nil }
        return Int(value)
    }

    /// A floating-point or numeric column (`real`, `double precision`, `numeric`, or an integer type).
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch`.
    public func double(_ column: String) throws -> Double? {
        let (text, type) = try cell(column)
        switch type {
        case PostgresTypeOID.float4, PostgresTypeOID.float8, PostgresTypeOID.numeric,
             PostgresTypeOID.int2, PostgresTypeOID.int4, PostgresTypeOID.int8:
            guard let text else { return nil }
            let swiftText = text == "Infinity" ? "inf" : text == "-Infinity" ? "-inf" : text == "NaN" ? "nan" : text
            guard let value = Double(swiftText) else { throw mismatch(column, type, "Double", value: text) }
            return value
        default:
            throw mismatch(column, type, "Double")
        }
    }

    /// A `boolean` column.
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch`.
    public func bool(_ column: String) throws -> Bool? {
        let (text, type) = try cell(column)
        guard type == PostgresTypeOID.bool else { throw mismatch(column, type, "Bool") }
        guard let text else { return nil }
        switch text {
        case "t": return true
        case "f": return false
        default: throw mismatch(column, type, "Bool", value: text)
        }
    }

    /// A `bytea` column's bytes (decoded from the server's hex output, `bytea_output = hex`).
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch`.
    public func bytes(_ column: String) throws -> [UInt8]? {
        let (text, type) = try cell(column)
        guard type == PostgresTypeOID.bytea else { throw mismatch(column, type, "[UInt8]") }
        guard let text else { return nil }
        guard let bytes = Self.decodeHexBytea(text) else {
            throw mismatch(column, type, "[UInt8]", value: "not in hex format (set bytea_output = hex)")
        }
        return bytes
    }

    /// A `timestamp with time zone`, `timestamp without time zone` (taken as UTC) or `date` column
    /// (midnight UTC), as milliseconds since 1970-01-01T00:00:00Z; microseconds are rounded down.
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch` (also for `infinity`).
    public func milliseconds(_ column: String) throws -> Int64? {
        let (text, type) = try cell(column)
        switch type {
        case PostgresTypeOID.timestamptz, PostgresTypeOID.timestamp, PostgresTypeOID.date:
            guard let text else { return nil }
            guard let value = PostgresTimestamp.parse(text) else { throw mismatch(column, type, "milliseconds", value: text) }
            return value
        default:
            throw mismatch(column, type, "milliseconds")
        }
    }

    /// A timestamp or date column as a `Date` (see `milliseconds(_:)`).
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch`.
    public func date(_ column: String) throws -> Date? {
        guard let ms = try milliseconds(column) else { return nil }
        return Date(timeIntervalSince1970: Double(ms) / 1000)
    }

    /// A `uuid` column.
    /// - Throws: `PostgresError` `.columnNotFound`, `.typeMismatch`.
    public func uuid(_ column: String) throws -> UUID? {
        let (text, type) = try cell(column)
        guard type == PostgresTypeOID.uuid else { throw mismatch(column, type, "UUID") }
        guard let text else { return nil }
        guard let value = UUID(uuidString: text) else { throw mismatch(column, type, "UUID", value: text) }
        return value
    }

    private func cell(_ column: String) throws -> (text: String?, type: UInt32) {
        guard let index = storage.indexByName[column] else {
            let known = storage.columns.map { "\"\($0.name)\"" }.joined(separator: ", ")
            throw PostgresError(code: .columnNotFound, message: "the result has no column \"\(column)\" (columns: \(known))")
        }
        return (storage.cells[row * storage.columns.count + index], storage.columns[index].typeOID)
    }

    private func mismatch(_ column: String, _ type: UInt32, _ swiftType: String, value: String? = nil) -> PostgresError {
        var message = "column \"\(column)\" has type \(PostgresTypeOID.name(of: type)), which cannot be read as \(swiftType)"
        if let value { message += " (value \(value))" }
        return PostgresError(code: .typeMismatch, message: message)
    }

    static func decodeHexBytea(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x"), utf8.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity((utf8.count - 2) / 2)
        var i = 2
        while i < utf8.count {
            guard let high = nibble(utf8[i]), let low = nibble(utf8[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
