//! The one description of the store's schema: its tables (columns, kinds, keys), its indexes
//! and the status vocabulary its rows hold. `m3 migrate` copies the tables it lists, in this
//! order; each backend's migrations (`sqlite/migrations.rs`, `postgres/migrations.rs`) are the
//! frozen history that builds it, and tests hold their result to it on both
//! (`store::schema::tests`, `store_contract::the_postgres_schema_is_the_description`).

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `TEXT` (on PostgreSQL compared byte by byte where it is an id or a status).
    Text,
    /// `INTEGER` on SQLite, `BIGINT` on PostgreSQL.
    Integer,
}

/// One column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// Whether it may be `NULL`.
    pub nullable: bool,
    /// Whether it is compared and ordered byte by byte (ids, statuses, kinds: `COLLATE "C"` on
    /// PostgreSQL, SQLite's default `BINARY`), so listings and cursors order alike on both.
    pub bytewise: bool,
}

/// One table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    /// Its name.
    pub name: &'static str,
    /// Every column, in the order the table declares them.
    pub columns: &'static [Column],
    /// The primary key's columns, in order.
    pub key: &'static [&'static str],
    /// Whether SQLite keeps it `WITHOUT ROWID` (the narrow tables, packed by their key).
    pub without_rowid: bool,
}

/// One secondary index (described for the tests that hold both backends' migrations to the
/// description; nothing at run time reads it).
#[cfg(any(test, feature = "internals"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Index {
    /// Its name.
    pub name: &'static str,
    /// Its table.
    pub table: &'static str,
    /// Its columns, in order.
    pub columns: &'static [&'static str],
}

const fn id(name: &'static str) -> Column {
    Column {
        name,
        kind: Kind::Text,
        nullable: false,
        bytewise: true,
    }
}

const fn text(name: &'static str, nullable: bool) -> Column {
    Column {
        name,
        kind: Kind::Text,
        nullable,
        bytewise: false,
    }
}

const fn integer(name: &'static str, nullable: bool) -> Column {
    Column {
        name,
        kind: Kind::Integer,
        nullable,
        bytewise: false,
    }
}

/// The tables, in the order `m3 migrate` copies and hashes them.
pub const TABLES: &[Table] = &[
    Table {
        name: "managed_input_rounds",
        columns: &[
            id("round_id"),
            id("execution_id"),
            id("status"),
            text("owner_id", true),
            integer("deadline_ns", true),
            integer("created_at_ns", false),
            text("document", false),
        ],
        key: &["round_id"],
        without_rowid: false,
    },
    Table {
        name: "managed_input_round_versions",
        columns: &[
            id("round_id"),
            id("execution_id"),
            integer("version", false),
            integer("lease_expires_at_ns", true),
            integer("updated_at_ns", false),
        ],
        key: &["round_id"],
        without_rowid: true,
    },
    Table {
        name: "executions",
        columns: &[
            id("execution_id"),
            id("status"),
            text("owner_id", true),
            integer("created_at_ns", false),
            text("document", false),
        ],
        key: &["execution_id"],
        without_rowid: false,
    },
    Table {
        name: "execution_versions",
        columns: &[
            id("execution_id"),
            integer("version", false),
            integer("lease_expires_at_ns", true),
            integer("updated_at_ns", false),
        ],
        key: &["execution_id"],
        without_rowid: true,
    },
    Table {
        name: "execution_items",
        columns: &[
            id("execution_id"),
            integer("seq", false),
            id("kind"),
            text("document", false),
        ],
        key: &["execution_id", "seq"],
        without_rowid: true,
    },
    Table {
        name: "execution_wakeups",
        columns: &[id("execution_id"), integer("seq", false)],
        key: &["execution_id"],
        without_rowid: false,
    },
    Table {
        name: "notification_targets",
        columns: &[
            id("target_id"),
            text("label", false),
            integer("since_ns", false),
        ],
        key: &["target_id"],
        without_rowid: true,
    },
    Table {
        name: "notifications",
        columns: &[
            id("target_id"),
            id("event_id"),
            integer("seq", false),
            Column {
                nullable: true,
                ..id("round_id")
            },
            id("status"),
            integer("attempts", false),
            integer("due_at_ns", false),
            text("claimed_by", true),
            integer("claimed_until_ns", true),
            integer("created_at_ns", false),
            integer("updated_at_ns", false),
            text("last_error", true),
            text("document", false),
        ],
        key: &["target_id", "event_id"],
        without_rowid: true,
    },
];

/// The secondary indexes.
#[cfg(any(test, feature = "internals"))]
pub const INDEXES: &[Index] = &[
    Index {
        name: "managed_input_rounds_by_execution",
        table: "managed_input_rounds",
        columns: &["execution_id", "created_at_ns"],
    },
    Index {
        name: "managed_input_rounds_by_status",
        table: "managed_input_rounds",
        columns: &["status", "created_at_ns"],
    },
    Index {
        name: "managed_input_rounds_by_execution_status",
        table: "managed_input_rounds",
        columns: &["execution_id", "status", "created_at_ns"],
    },
    Index {
        name: "executions_by_status",
        table: "executions",
        columns: &["status", "created_at_ns"],
    },
    Index {
        name: "execution_wakeups_by_seq",
        table: "execution_wakeups",
        columns: &["seq"],
    },
    Index {
        name: "notifications_by_status",
        table: "notifications",
        columns: &["target_id", "status", "seq"],
    },
];

/// The statuses a round's row holds (`managed_input_rounds.status`), in lifecycle order; the
/// map to the component's enum (`component/store_rows.rs`) is held to it by a test.
#[cfg(any(test, feature = "internals"))]
pub const ROUND_STATUSES: &[&str] = &[
    "pending",
    "response_validated",
    "delivery_started",
    "delivered",
    "resolved",
    "failed",
];

/// The statuses a notification's row holds (`notifications.status`).
#[cfg(any(test, feature = "internals"))]
pub const NOTIFICATION_STATUSES: &[&str] = &["queued", "delivered", "abandoned"];

/// The statuses an execution's row holds (`executions.status`), in lifecycle order.
#[cfg(any(test, feature = "internals"))]
pub const EXECUTION_STATUSES: &[&str] = &["queued", "running", "finished"];

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// A SQLite database brought through every migration from empty holds exactly the
    /// description: each table's columns (names, order, kinds, `NOT NULL`), its primary key,
    /// whether it is `WITHOUT ROWID`, and the secondary indexes; nothing more.
    #[test]
    fn the_sqlite_schema_after_every_migration_is_the_description() {
        let conn = Connection::open_in_memory().unwrap();
        crate::store::sqlite::migrations::migrate(&conn).unwrap();
        let tables: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_schema WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite_%' ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut described: Vec<String> = TABLES.iter().map(|t| t.name.to_string()).collect();
        described.sort();
        assert_eq!(tables, described);
        for table in TABLES {
            // cid, name, type, notnull, default, pk (position in the key, 0 if none)
            let columns: Vec<(String, String, bool, i64)> = conn
                .prepare(&format!("PRAGMA table_info({})", table.name))
                .unwrap()
                .query_map([], |r| Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get(5)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let expected: Vec<(String, String, bool, i64)> = table
                .columns
                .iter()
                .map(|c| {
                    let in_key = table.key.iter().position(|k| *k == c.name);
                    (
                        c.name.to_string(),
                        match c.kind {
                            Kind::Text => "TEXT",
                            Kind::Integer => "INTEGER",
                        }
                        .to_string(),
                        !c.nullable,
                        in_key.map_or(0, |p| p as i64 + 1),
                    )
                })
                .collect();
            assert_eq!(columns, expected, "{}", table.name);
            let sql: String = conn
                .query_row(
                    "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                    [table.name],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(
                sql.contains("WITHOUT ROWID"),
                table.without_rowid,
                "{}",
                table.name
            );
        }
        let mut indexes: Vec<(String, String, Vec<String>)> = Vec::new();
        let names: Vec<(String, String)> = conn
            .prepare(
                "SELECT name, tbl_name FROM sqlite_schema WHERE type = 'index' \
                 AND sql IS NOT NULL ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        for (name, table) in names {
            let columns: Vec<String> = conn
                .prepare(&format!("PRAGMA index_info({name})"))
                .unwrap()
                .query_map([], |r| r.get(2))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            indexes.push((name, table, columns));
        }
        let mut described: Vec<(String, String, Vec<String>)> = INDEXES
            .iter()
            .map(|i| {
                (
                    i.name.to_string(),
                    i.table.to_string(),
                    i.columns.iter().map(|c| c.to_string()).collect(),
                )
            })
            .collect();
        described.sort();
        assert_eq!(indexes, described);
    }
}
