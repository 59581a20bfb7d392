//! The namespace the crate's objects live in, and its versioned schema.
//!
//! Owns: [`Namespace`] (which names are accepted), [`SCHEMA_VERSION`], [`KEY_PARTS`], the DDL
//! (`schema.sql`; the statements it serves are `acquire.sql`, `settle.sql`, `reconfigure.sql`,
//! `cleanup.sql` and `forget.sql`) and `migrate`, which creates the schema in a namespace that has
//! none and refuses one of another version.
//!
//! Promises: a namespace is created at most once, even by instances starting together (an advisory
//! lock serializes them); a schema of another version is never read or changed, only refused by
//! name; on any error nothing was created.

use deadpool_postgres::Client;

use crate::error::BuildError;

/// The version of the tables this crate reads and writes (and of the functions that serve them).
pub const SCHEMA_VERSION: i32 = 8;

/// The parts a namespace's keys are counted in (by a hash of the key): each part has a counter row,
/// so creations of keys in different parts never wait for each other, and a key bound is enforced
/// per part (`max_keys` rounded up to a multiple of this). Fixed in the schema: every instance on a
/// namespace counts alike.
pub const KEY_PARTS: u32 = 16;

const DDL: &str = include_str!("schema.sql");

/// A PostgreSQL schema name for the crate's tables: 1 to 63 characters of `a-z`, `0-9`
/// and `_`, not starting with a digit (so it never needs quoting and never folds case).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace(String);

impl Namespace {
    /// `name`, if it is one the crate accepts.
    pub fn new(name: &str) -> Result<Namespace, BuildError> {
        let plain = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let starts = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
        if plain && starts && name.len() <= 63 {
            Ok(Namespace(name.to_owned()))
        } else {
            Err(BuildError::Namespace(name.to_owned()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `text` with every `__NS__` replaced by this namespace.
    pub(crate) fn fill(&self, text: &str) -> String {
        text.replace("__NS__", &self.0)
    }
}

/// Creates the schema in `namespace` if it has none; checks its version otherwise.
pub(crate) async fn migrate(client: &mut Client, namespace: &Namespace) -> Result<(), BuildError> {
    let transaction = client.transaction().await?;
    // Instances starting together: one creates, the others wait here and then find it.
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('bucketproof-postgres:' || $1::text))",
            &[&namespace.as_str()],
        )
        .await?;
    transaction
        .batch_execute(&namespace.fill("CREATE SCHEMA IF NOT EXISTS __NS__"))
        .await?;
    let table = format!("{}.bucketproof_schema", namespace.as_str());
    let exists: bool = transaction
        .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&table])
        .await?
        .get(0);
    if exists {
        let found: Option<i32> = transaction
            .query_opt(&format!("SELECT max(version) FROM {table}"), &[])
            .await?
            .and_then(|row| row.get(0));
        if found != Some(SCHEMA_VERSION) {
            return Err(BuildError::SchemaVersion {
                namespace: namespace.as_str().to_owned(),
                found,
                expected: SCHEMA_VERSION,
            });
        }
    } else {
        let ddl = namespace
            .fill(DDL)
            .replace("__KEY_PARTS__", &KEY_PARTS.to_string());
        transaction.batch_execute(&ddl).await?;
    }
    transaction.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_lower_case_names_are_namespaces() {
        for good in ["bucketproof", "_x", "a1_b2", &"a".repeat(63)] {
            assert!(Namespace::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1a",
            "A",
            "a-b",
            "a.b",
            "a;drop",
            "a b",
            "\"a\"",
            &"a".repeat(64),
        ] {
            assert!(Namespace::new(bad).is_err(), "{bad}");
        }
    }
}
