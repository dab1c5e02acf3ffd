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
//! - the floor: what `begin` sends, sent by hand (sqlx's `begin_with`),
//!   then the same `UPDATE` and `COMMIT`: PostgreSQL's own cost of the
//!   fence (one more row written per transaction).
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

/// What `PgFence::begin` sends, sent by hand: the floor.
const BEGIN_BY_HAND: &str = "SELECT redquorum_fence('accounts:7', 'account:7', 1); BEGIN";

#[derive(Clone, Copy)]
enum Write {
    Plain,
    Begin,
    Fenced,
    Floor,
}

async fn write(pool: &PgPool, how: Write) -> bool {
    let update = "UPDATE accounts SET balance = balance + 1 WHERE id = 7";
    let fence = Fence::new("account:7", 1);
    let tx = match how {
        Write::Begin => PgFence::begin(pool, fence, "accounts:7").await.ok(),
        Write::Floor => pool.begin_with(BEGIN_BY_HAND).await.ok(),
        _ => pool.begin().await.ok(),
    };
    let Some(mut tx) = tx else {
        return false;
    };
    let passed = match how {
        Write::Fenced => PgFence::check(&mut tx, fence, "accounts:7").await.is_ok(),
        _ => true,
    };
    let updated = sqlx::query(update).execute(&mut *tx).await.is_ok();
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
            "floor: begin's query by hand, UPDATE, COMMIT",
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
