//! What the PostgreSQL tests share: where the database is, a namespace of each test's own, and its
//! removal.

#![allow(dead_code)]

/// `DATABASE_URL`, or `None` after a loud SKIP line; with `BUCKETPROOF_REQUIRE_POSTGRES=1` a missing
/// URL fails the test instead (CI sets it).
pub fn database_url(test: &str) -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) => Some(url),
        Err(_) if std::env::var_os("BUCKETPROOF_REQUIRE_POSTGRES").is_some() => {
            panic!("{test}: DATABASE_URL is not set and BUCKETPROOF_REQUIRE_POSTGRES is")
        }
        Err(_) => {
            // Straight to the process's stderr: the test harness hides `eprintln!` of a passing test.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr().lock(),
                "!!!!! SKIP {test}: DATABASE_URL is not set, nothing checked !!!!!"
            );
            None
        }
    }
}

/// A namespace no other test (or run) uses.
pub fn namespace(test: &str) -> String {
    format!("bp_test_{}_{test}", std::process::id())
}

/// A plain client, for what the tests do behind the limiter's back.
pub async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

/// Drops `namespace` and everything in it.
pub async fn drop_namespace(url: &str, namespace: &str) {
    client(url)
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {namespace} CASCADE"))
        .await
        .expect("drop the test's namespace");
}
