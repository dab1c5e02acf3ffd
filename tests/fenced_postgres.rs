//! The storage side of fencing on a real PostgreSQL (feature `postgres`):
//! a fence check inside the caller's transaction, so the business write
//! commits only past it, and with it.
#![cfg(feature = "postgres")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use redquorum::{Fence, FenceError, PgFence};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use support::postgres::Postgres;
use support::Cluster;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A pool on `pg` with the fences' table and an `accounts` table (account
/// 7, balance 100).
async fn pool(pg: &Postgres) -> PgPool {
    pool_of(pg, 16).await
}

/// [`pool`] with at most `connections` connections.
async fn pool_of(pg: &Postgres, connections: u32) -> PgPool {
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect(&pg.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", pg.log()));
    let mut conn = pool.acquire().await.unwrap();
    PgFence::install(&mut conn).await.unwrap();
    PgFence::install(&mut conn).await.expect("again: no harm");
    for sql in [
        "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)",
        "INSERT INTO accounts VALUES (7, 100)",
        "CREATE TABLE journal (seq bigserial PRIMARY KEY, token numeric NOT NULL)",
    ] {
        sqlx::query(sql).execute(&mut *conn).await.unwrap();
    }
    pool
}

async fn balance(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 7")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// In one transaction: the fence check for `accounts:7`, then (if it
/// passed) the balance set to `to`, committed.
async fn fenced_set(pool: &PgPool, fence: Fence<'_>, to: i64) -> Result<(), FenceError> {
    fenced_set_by(pool, false, fence, to).await
}

/// [`fenced_set`], with the check sent with `BEGIN` if `with_begin`.
async fn fenced_set_by(
    pool: &PgPool,
    with_begin: bool,
    fence: Fence<'_>,
    to: i64,
) -> Result<(), FenceError> {
    let mut tx = if with_begin {
        PgFence::begin(pool, fence, "accounts:7").await?
    } else {
        let mut tx = pool.begin().await.unwrap();
        PgFence::check(&mut tx, fence, "accounts:7").await?;
        tx
    };
    sqlx::query("UPDATE accounts SET balance = $1 WHERE id = 7")
        .bind(to)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    Ok(())
}

/// A holder that paused past its lock's validity writes after the next
/// holder did: refused, naming both tokens; the later write stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_write_is_refused_after_a_later_holders() {
    let c = Cluster::start(3);
    let pg = Postgres::start();
    let pool = pool(&pg).await;
    let redlock = c.redlock();
    let first = redlock.lock("account:7", ms(300)).fenced().await.unwrap();
    let stale = first.fence().unwrap();
    // The first holder pauses: its lock expires and another takes it.
    let took_over = redlock
        .lock("account:7", ms(10_000))
        .fenced()
        .wait(ms(5000))
        .await
        .expect("the next holder");
    let fresh = took_over.fence().unwrap();
    assert!(fresh.token() > stale.token());
    fenced_set(&pool, fresh, 70).await.unwrap();
    let refused = fenced_set(&pool, stale, 100).await.unwrap_err();
    match &refused {
        FenceError::Stale { token, seen, .. } => {
            assert_eq!((*token, *seen), (stale.token(), fresh.token()));
        }
        other => panic!("not stale: {other:?}"),
    }
    let text = refused.to_string();
    assert!(
        text.contains(&format!(
            "token {} of \"account:7\" is below {}",
            stale.token(),
            fresh.token()
        )),
        "{text}"
    );
    assert_eq!(balance(&pool).await, 70, "the later holder's write stays");
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        PgFence::fence_of(&mut conn, "accounts:7").await.unwrap(),
        Some(("account:7".to_owned(), fresh.token()))
    );
    took_over.release().await.unwrap();
}

/// A holder writes as often as it likes: equal tokens pass, and so does
/// a higher one after them; tokens compare exactly past 2^63.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_tokens_pass_and_tokens_compare_exactly() {
    let pg = Postgres::start();
    let pool = pool(&pg).await;
    fenced_set(&pool, Fence::new("account:7", 5), 1)
        .await
        .unwrap();
    fenced_set(&pool, Fence::new("account:7", 5), 2)
        .await
        .unwrap();
    assert_eq!(balance(&pool).await, 2);
    let big = u64::MAX - 1;
    fenced_set(&pool, Fence::new("account:7", big), 3)
        .await
        .unwrap();
    let below = fenced_set(&pool, Fence::new("account:7", big - 1), 4).await;
    assert!(
        matches!(below, Err(FenceError::Stale { seen, .. }) if seen == big),
        "{below:?}"
    );
    fenced_set(&pool, Fence::new("account:7", u64::MAX), 5)
        .await
        .unwrap();
    assert_eq!(balance(&pool).await, 5);
}

/// A scope written under one resource's locks refuses another's tokens,
/// however high: they say nothing of the first resource's holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_another_resource_is_refused() {
    let pg = Postgres::start();
    let pool = pool(&pg).await;
    fenced_set(&pool, Fence::new("account:7", 3), 1)
        .await
        .unwrap();
    let other = fenced_set(&pool, Fence::new("account:8", 900), 2).await;
    match &other {
        Err(FenceError::OtherResource {
            resource,
            guarded_by,
            ..
        }) => assert_eq!(
            (resource.as_str(), guarded_by.as_str()),
            ("account:8", "account:7")
        ),
        other => panic!("not refused as another resource's: {other:?}"),
    }
    assert_eq!(balance(&pool).await, 1);
}

/// The business write made before the check rolls back with the refusal;
/// and a check that passed in a transaction rolled back leaves no trace:
/// the fence is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_and_the_fence_commit_or_roll_back_together() {
    let pg = Postgres::start();
    let pool = pool(&pg).await;
    fenced_set(&pool, Fence::new("account:7", 10), 50)
        .await
        .unwrap();
    {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("UPDATE accounts SET balance = 0 WHERE id = 7")
            .execute(&mut *tx)
            .await
            .unwrap();
        let refused = PgFence::check(&mut tx, Fence::new("account:7", 9), "accounts:7").await;
        assert!(
            matches!(refused, Err(FenceError::Stale { .. })),
            "{refused:?}"
        );
        // Dropped: rolled back.
    }
    assert_eq!(balance(&pool).await, 50, "the write before the check");
    {
        let mut tx = pool.begin().await.unwrap();
        PgFence::check(&mut tx, Fence::new("account:7", 20), "accounts:7")
            .await
            .unwrap();
        tx.rollback().await.unwrap();
    }
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        PgFence::fence_of(&mut conn, "accounts:7").await.unwrap(),
        Some(("account:7".to_owned(), 10)),
        "a rolled-back check raises nothing"
    );
    fenced_set(&pool, Fence::new("account:7", 11), 60)
        .await
        .expect("so 11 still passes");
}

/// Outside a transaction the fence would commit alone: refused in words,
/// before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_outside_a_transaction_is_refused_before_anything_is_sent() {
    let pg = Postgres::start();
    let pool = pool(&pg).await;
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    let refused = PgFence::check(&mut conn, Fence::new("account:7", 1), "accounts:7").await;
    let text = refused.unwrap_err().to_string();
    assert!(text.contains("not in a transaction; begin one"), "{text}");
    assert_eq!(
        PgFence::fence_of(&mut conn, "accounts:7").await.unwrap(),
        None
    );
    drop(pool);
}

/// Concurrent writers, each holding its transaction open a while after
/// its check: what commits does so in token order (each later commit
/// carries a token not lower than every earlier one), and a writer
/// refused wrote nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fenced_writers_commit_in_token_order() {
    let pg = Postgres::start();
    let pool = Arc::new(pool(&pg).await);
    let mut tokens: Vec<u64> = (1..=24).collect();
    // A fixed shuffle: high and low tokens interleave.
    tokens.sort_by_key(|t| (t * 7919) % 24);
    let writers: Vec<_> = tokens
        .into_iter()
        .map(|token| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let fence = Fence::new("account:7", token);
                // Half check in a transaction, half begin with the check.
                let mut tx = if token % 2 == 0 {
                    let mut tx = pool.begin().await.unwrap();
                    if PgFence::check(&mut tx, fence, "accounts:7").await.is_err() {
                        return false;
                    }
                    tx
                } else {
                    match PgFence::begin(&pool, fence, "accounts:7").await {
                        Ok(tx) => tx,
                        Err(_) => return false,
                    }
                };
                tokio::time::sleep(ms(20)).await;
                sqlx::query("INSERT INTO journal (token) VALUES ($1::numeric)")
                    .bind(token.to_string())
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                true
            })
        })
        .collect();
    let mut landed = 0;
    for w in writers {
        landed += usize::from(w.await.unwrap());
    }
    let journal: Vec<String> = sqlx::query_scalar("SELECT token::text FROM journal ORDER BY seq")
        .fetch_all(&*pool)
        .await
        .unwrap();
    let journal: Vec<u64> = journal.iter().map(|t| t.parse().unwrap()).collect();
    assert_eq!(journal.len(), landed);
    assert!((1..24).contains(&landed), "some refused: {journal:?}");
    assert!(
        journal.windows(2).all(|w| w[0] <= w[1]),
        "committed out of token order: {journal:?}"
    );
}

/// The schema the docs give shell scripts is the library's.
#[test]
fn the_docs_fence_schema_is_the_librarys() {
    assert!(include_str!("../docs/cli.md").contains(redquorum::FENCE_SCHEMA));
}

/// `PgFence::begin` decides as `check` does, in the round trip that
/// begins the transaction: a stale token and another resource's are
/// refused in words with no transaction left open (every connection of
/// the pool still works), a pass rolls back with its transaction, and a
/// pass commits with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_checks_the_fence_with_the_transactions_start() {
    let pg = Postgres::start();
    // One connection: a refusal that left a transaction open would show.
    let pool = pool_of(&pg, 1).await;
    let set = |token: u64, resource: &'static str, to: i64| {
        let pool = pool.clone();
        async move { fenced_set_by(&pool, true, Fence::new(resource, token), to).await }
    };
    set(5, "account:7", 50).await.unwrap();
    set(5, "account:7", 55).await.expect("equal tokens pass");
    let stale = set(4, "account:7", 40).await.unwrap_err();
    assert!(
        stale
            .to_string()
            .contains("token 4 of \"account:7\" is below 5"),
        "{stale}"
    );
    let other = set(9, "account:8", 90).await;
    assert!(
        matches!(&other, Err(FenceError::OtherResource { guarded_by, .. }) if guarded_by == "account:7"),
        "{other:?}"
    );
    assert_eq!(balance(&pool).await, 55, "refused writes wrote nothing");
    {
        let tx = PgFence::begin(&pool, Fence::new("account:7", 8), "accounts:7")
            .await
            .unwrap();
        tx.rollback().await.unwrap();
    }
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        PgFence::fence_of(&mut conn, "accounts:7").await.unwrap(),
        Some(("account:7".to_owned(), 5)),
        "a rolled-back begin raises nothing"
    );
    drop(conn);
    set(6, "account:7", 60).await.expect("so 6 passes");
    assert_eq!(balance(&pool).await, 60);
}

/// `begin` sends the scope and resource as literals: quotes and
/// backslashes arrive as they are, a NUL is refused before anything is
/// sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_sends_names_exactly() {
    let pg = Postgres::start();
    let pool = pool(&pg).await;
    let (scope, resource) = (
        r"it's a \scope {resource} {token}'; DROP TABLE accounts; --",
        r"re\'s'); DROP TABLE accounts; --",
    );
    let tx = PgFence::begin(&pool, Fence::new(resource, 3), scope)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        PgFence::fence_of(&mut conn, scope).await.unwrap(),
        Some((resource.to_owned(), 3))
    );
    let refused = PgFence::begin(&pool, Fence::new(resource, 2), scope).await;
    assert!(
        matches!(refused, Err(FenceError::Stale { seen: 3, .. })),
        "{refused:?}"
    );
    let nul = PgFence::begin(&pool, Fence::new("a\0b", 3), "nul").await;
    assert!(
        nul.unwrap_err().to_string().contains("NUL character"),
        "refused in words"
    );
    assert_eq!(PgFence::fence_of(&mut conn, "nul").await.unwrap(), None);
    assert_eq!(balance(&pool).await, 100, "accounts is still there");
}

/// The function refuses what is not a fencing token, as a psql script
/// with a broken variable would pass it: a fraction (which the column
/// would round up past the fence), NaN (above every number, so it would
/// block every later token), a negative number, one past `u64::MAX`, and
/// NULL; the fence stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_refuses_what_is_not_a_token() {
    let pg = Postgres::start();
    let pool = pool(&pg).await;
    fenced_set(&pool, Fence::new("account:7", 5), 1)
        .await
        .unwrap();
    for token in ["4.6", "NaN", "-1", "18446744073709551616", "1e25"] {
        let refused = sqlx::query("SELECT redquorum_fence('accounts:7', 'account:7', $1::numeric)")
            .bind(token)
            .execute(&pool)
            .await
            .expect_err(token);
        let said = refused.to_string();
        assert!(said.contains("is not a fencing token"), "{token}: {said}");
    }
    let null = sqlx::query("SELECT redquorum_fence('accounts:7', 'account:7', NULL)")
        .execute(&pool)
        .await;
    assert!(null.is_err(), "NULL");
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        PgFence::fence_of(&mut conn, "accounts:7").await.unwrap(),
        Some(("account:7".to_owned(), 5))
    );
}
