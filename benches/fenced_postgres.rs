//! Fenced writes to data in PostgreSQL against the same writes unfenced, in
//! one run, on one local PostgreSQL (started by the test harness on a free
//! loopback port; `fsync` off there, which makes the fence's share of each
//! transaction larger, not smaller), through one connection: one task,
//! sequential transactions, the two taking turns in short slices.
//!
//! - unfenced: `BEGIN; UPDATE accounts ... WHERE id = 7; COMMIT` (three
//!   round trips);
//! - `PgFence::begin`: the check sent with `BEGIN` (three round trips);
//! - `PgFence::check` after `BEGIN` (four);
//! - the floor of `check`: its upsert sent by hand after `BEGIN`.
//!
//! Prints p50 and p99 of each and the ratio to unfenced.
//!
//! Run: `cargo bench --features postgres --bench fenced_postgres`;
//! `BENCH_SECS` sets the time per cell (default 3 s), split into slices.
//! Every loop is bounded in time.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use common::{run_tasks, Stats};
use redquorum::{Fence, PgFence};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use support::postgres::Postgres;

/// Alternating slices per cell.
const REPS: u32 = 6;

/// The fence's statement, as `PgFence::check` sends it: the floor.
const RAISE: &str = "INSERT INTO redquorum_fences AS f (scope, resource, token)
VALUES ($1, $2, $3::numeric)
ON CONFLICT (scope) DO UPDATE SET token = EXCLUDED.token
WHERE f.resource = EXCLUDED.resource AND f.token <= EXCLUDED.token
RETURNING 1";

#[derive(Clone, Copy)]
enum Write {
    Plain,
    Begin,
    Fenced,
    Floor,
}

async fn write(pool: &PgPool, how: Write) -> bool {
    let fence = Fence::new("account:7", 1);
    let tx = match how {
        Write::Begin => PgFence::begin(pool, fence, "accounts:7").await.ok(),
        _ => pool.begin().await.ok(),
    };
    let Some(mut tx) = tx else {
        return false;
    };
    let passed = match how {
        Write::Plain | Write::Begin => true,
        Write::Fenced => PgFence::check(&mut tx, fence, "accounts:7").await.is_ok(),
        Write::Floor => sqlx::query(RAISE)
            .bind("accounts:7")
            .bind("account:7")
            .bind("1")
            .fetch_optional(&mut *tx)
            .await
            .is_ok_and(|row| row.is_some()),
    };
    let updated = sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = 7")
        .execute(&mut *tx)
        .await
        .is_ok();
    passed && updated && tx.commit().await.is_ok()
}

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let pg = Postgres::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let pool = rt.block_on(async {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&pg.url())
            .await
            .expect("connect");
        let mut conn = pool.acquire().await.expect("a connection");
        PgFence::install(&mut conn).await.expect("fences");
        for sql in [
            "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)",
            "INSERT INTO accounts VALUES (7, 0)",
        ] {
            sqlx::query(sql).execute(&mut *conn).await.expect("setup");
        }
        pool
    });
    let slice = limit / REPS;
    let cell = |how: Write| -> Stats {
        let pool = pool.clone();
        rt.block_on(run_tasks(1, slice, usize::MAX, move |_, _| {
            let pool = pool.clone();
            async move { write(&pool, how).await }
        }))
    };
    let order = [Write::Plain, Write::Begin, Write::Fenced, Write::Floor];
    // Statements prepared, connection warm.
    for how in order {
        cell(how);
    }
    let mut cells: [Stats; 4] = Default::default();
    for _ in 0..REPS {
        for (j, how) in order.into_iter().enumerate() {
            cells[j].add(cell(how));
        }
    }
    let [mut plain, mut begin, mut fenced, mut floor] = cells;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p50 = plain.pct(0.50);
    let (b50, f50, l50) = (begin.pct(0.50), fenced.pct(0.50), floor.pct(0.50));
    println!("| transaction | p50 ms | p99 ms | p50 vs unfenced | transactions |");
    println!("|---|---:|---:|---:|---:|");
    for (name, s, p) in [
        ("unfenced: BEGIN, UPDATE, COMMIT", &mut plain, p50),
        (
            "PgFence::begin (BEGIN with the check), UPDATE, COMMIT",
            &mut begin,
            b50,
        ),
        ("BEGIN, PgFence::check, UPDATE, COMMIT", &mut fenced, f50),
        (
            "BEGIN, the check's upsert by hand, UPDATE, COMMIT",
            &mut floor,
            l50,
        ),
    ] {
        println!(
            "| {name} | {:.3} | {:.3} | {:.2} | {} |",
            ms(p),
            ms(s.pct(0.99)),
            p.as_secs_f64() / p50.as_secs_f64(),
            s.ok
        );
    }
}
