//! What the PostgreSQL tests share: where the database is, a namespace of each test's own, and its
//! removal; for the fault tests, a row lock held behind the limiter's back and the termination of
//! the backend that waits for it.

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

/// `url` with its connections named `application`, so a test can find (and terminate) only their
/// backends.
pub fn with_application_name(url: &str, application: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={application}")
}

/// Holds `key`'s row lock in an open transaction (as a slow decision would) until dropped.
pub async fn hold_row(url: &str, ns: &str, key: &str) -> tokio_postgres::Client {
    let holder = client(url).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            &format!("SELECT 1 FROM {ns}.buckets WHERE key = $1 FOR UPDATE"),
            &[&key],
        )
        .await
        .unwrap();
    holder
}

/// Terminates the backend of `application` (its connections' `application_name`) that waits for a
/// lock, once it waits; its pid.
pub async fn terminate_the_waiter(url: &str, application: &str) -> i32 {
    let admin = client(url).await;
    for _ in 0..500 {
        let waiting = admin
            .query(
                "SELECT pid FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND application_name = $1",
                &[&application],
            )
            .await
            .unwrap();
        if let Some(row) = waiting.first() {
            let pid: i32 = row.get(0);
            admin
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap();
            return pid;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no decision of {application} ever waited for the row lock");
}
