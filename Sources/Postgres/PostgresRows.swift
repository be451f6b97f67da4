/// The complete result of one statement, copied out of libpq: its columns, its rows and its
/// command tag. A value type: safe to keep and pass between tasks after the connection moved on.
public struct PostgresRows: RandomAccessCollection, Sendable {
    /// One result column.
    public struct Column: Sendable, Hashable {
        /// The column's name (or alias) as the server reported it.
        public let name: String
        /// The OID of the column's PostgreSQL type (`pg_type.oid`).
        public let typeOID: UInt32
    }

    /// Shared storage of one result; rows point into it.
    final class Storage: Sendable {
        let columns: [Column]
        /// The first column of each name.
        let indexByName: [String: Int]
        /// Text-format cells, row-major; `nil` is SQL NULL.
        let cells: [String?]

        init(columns: [Column], cells: [String?]) {
            self.columns = columns
            self.cells = cells
            var index: [String: Int] = [:]
            for (position, column) in columns.enumerated() where index[column.name] == nil {
                index[column.name] = position
            }
            self.indexByName = index
        }
    }

    let storage: Storage
    /// The result's columns, in order.
    public var columns: [Column] { storage.columns }
    /// The command tag, such as `SELECT 3`, `INSERT 0 1` or `UPDATE 7`.
    public let commandTag: String
    /// Rows inserted, updated, deleted, selected, moved or copied, from the command tag; 0 for
    /// commands that report none (`CREATE TABLE`).
    public let affectedRows: Int
    public let count: Int

    init(columns: [Column], cells: [String?], rowCount: Int, commandTag: String, affectedRows: Int) {
        self.storage = Storage(columns: columns, cells: cells)
        self.count = rowCount
        self.commandTag = commandTag
        self.affectedRows = affectedRows
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }
    public subscript(position: Int) -> PostgresRow {
        precondition(position >= 0 && position < count, "row index \(position) out of range 0..<\(count)")
        return PostgresRow(storage: storage, row: position)
    }
}
