//! The worker of the docker example on PostgreSQL (`make
//! docker-demo-postgres`): the same work as `worker`, with the data in a
//! real database and every write fenced. Each worker, many times over:
//!
//! 1. takes the fenced Redlock `docker-demo:ledger`, notes in the shared
//!    volume that it holds it (the chaos pauses the holder), prepares
//!    (`PREPARE_MS`), then in one transaction begun with the fence check
//!    (`PgFence::begin`) reads the balance, checks the lock's validity,
//!    thinks (`THINK_MS`) and writes it back plus one, recording the
//!    increment beside it; a refused fence (a later
//!    holder wrote first: this one was paused past its lock) is counted in
//!    `refusals`, and nothing of it lands;
//! 2. issues a serial number and inserts it into `serials`, whose primary
//!    key refuses a duplicate (counted in `duplicates`).
//!
//! With `FENCE=off` the transaction begins without the check: a holder
//! paused between its read and its write then writes over a later
//! holder's increment, which `verify` must see as a lost update.
//!
//! `ledger verify` reads the database and prints
//! `numbers=N duplicates=D lost_updates=L stale_writes_refused=R`; it fails
//! on a duplicate, on a lost update, and when nothing was refused (the
//! pause did not happen). With `FENCE=off` it fails unless an update was
//! lost.
//!
//! Run: `REDQUORUM_NODES=... DATABASE_URL=postgres://... DATA_DIR=/tmp/x
//! cargo run -p redquorum-demo --features postgres --bin ledger -- run`.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redquorum::{FenceError, PgFence, Redlock, SerialGenerator};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tracing_subscriber::EnvFilter;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The lock, and the scope of the data it guards.
const LOCK: &str = "docker-demo:ledger";
const SCOPE: &str = "ledger:balance";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS ledger (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO ledger VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS increments (seq bigserial PRIMARY KEY, worker text NOT NULL, token numeric NOT NULL);
CREATE TABLE IF NOT EXISTS refusals (seq bigserial PRIMARY KEY, worker text NOT NULL, token numeric NOT NULL, seen numeric NOT NULL);
CREATE TABLE IF NOT EXISTS serials (number text PRIMARY KEY, worker text NOT NULL);
CREATE TABLE IF NOT EXISTS duplicates (number text NOT NULL, worker text NOT NULL)";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let url = std::env::var("DATABASE_URL")?;
    let pool = connect(&url).await?;
    let fenced = std::env::var("FENCE").map_or(true, |v| v != "off");
    match std::env::args().nth(1).as_deref() {
        Some("setup") => setup(&pool).await,
        Some("run") => run(&pool, fenced).await,
        Some("verify") => verify(&pool, fenced).await,
        _ => Err("usage: ledger setup | run | verify".into()),
    }
}

/// A pool on `url`, waiting up to 60 s for the database to take
/// connections.
async fn connect(url: &str) -> Result<PgPool, BoxError> {
    let started = std::time::Instant::now();
    loop {
        match PgPoolOptions::new().max_connections(2).connect(url).await {
            Ok(pool) => return Ok(pool),
            Err(e) if started.elapsed() < Duration::from_secs(60) => {
                eprintln!("ledger: waiting for the database: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn setup(pool: &PgPool) -> Result<(), BoxError> {
    let mut conn = pool.acquire().await?;
    PgFence::install(&mut conn).await?;
    sqlx::raw_sql(SCHEMA).execute(&mut *conn).await?;
    println!("ledger: tables and fences ready");
    Ok(())
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

async fn run(pool: &PgPool, fenced: bool) -> Result<(), BoxError> {
    let id = std::env::var("WORKER_ID").unwrap_or_else(|_| "1".into());
    let iterations: u64 = env_or("ITERATIONS", 300);
    let pace = Duration::from_millis(env_or("PACE_MS", 0));
    let prepare = Duration::from_millis(env_or("PREPARE_MS", 300));
    let think = Duration::from_millis(env_or("THINK_MS", 300));
    let data = PathBuf::from(std::env::var("DATA_DIR").unwrap_or_else(|_| "/data".into()));
    std::fs::create_dir_all(&data)?;
    let until = std::env::var_os("RUN_UNTIL").map(PathBuf::from);
    let nodes = std::env::var("REDQUORUM_NODES")?;
    let redlock = Redlock::builder().node_list(&nodes).build()?;
    let serials = SerialGenerator::builder(redlock.clone()).width(6).build()?;
    let (mut increments, mut refused, mut failures) = (0u64, 0u64, 0u64);
    for i in 0.. {
        if i >= iterations && until.as_ref().is_none_or(|f| f.exists()) {
            break;
        }
        if i >= iterations.saturating_mul(10).max(1) {
            return Err(format!("ledger {id}: {i} iterations and RUN_UNTIL never appeared").into());
        }
        match redlock
            .lock(LOCK, Duration::from_secs(2))
            .fenced()
            .wait(Duration::from_secs(30))
            .await
        {
            Ok(lock) => {
                let token = lock.fencing_token().unwrap_or_default();
                note_holder(&data, &id, i)?;
                // Preparing: a holder paused here wakes after a later
                // holder wrote; the fence refuses its write.
                tokio::time::sleep(prepare).await;
                match increment(pool, (&lock, think), fenced, &id).await {
                    Ok(()) => increments += 1,
                    Err(Step::Refused { seen }) => {
                        refused += 1;
                        sqlx::query(
                            "INSERT INTO refusals (worker, token, seen) VALUES ($1, $2::numeric, $3::numeric)",
                        )
                        .bind(&id)
                        .bind(token.to_string())
                        .bind(seen.to_string())
                        .execute(pool)
                        .await?;
                    }
                    Err(Step::Failed(e)) => {
                        failures += 1;
                        eprintln!("ledger {id}: iteration {i}: write: {e}");
                    }
                }
                if let Err(e) = lock.release().await {
                    eprintln!("ledger {id}: release: {e}");
                }
            }
            Err(e) => {
                failures += 1;
                eprintln!("ledger {id}: iteration {i}: lock: {e}");
            }
        }
        match serials.next("ORDER").await {
            Ok(s) => {
                let number = s.to_string();
                let inserted = sqlx::query("INSERT INTO serials (number, worker) VALUES ($1, $2)")
                    .bind(&number)
                    .bind(&id)
                    .execute(pool)
                    .await;
                match inserted {
                    Ok(_) => {}
                    // The primary key refused it: a number issued twice.
                    Err(e)
                        if e.as_database_error()
                            .is_some_and(|d| d.is_unique_violation()) =>
                    {
                        sqlx::query("INSERT INTO duplicates (number, worker) VALUES ($1, $2)")
                            .bind(&number)
                            .bind(&id)
                            .execute(pool)
                            .await?;
                    }
                    Err(e) => {
                        failures += 1;
                        eprintln!("ledger {id}: iteration {i}: keeping {number}: {e}");
                    }
                }
            }
            Err(e) => {
                failures += 1;
                eprintln!("ledger {id}: iteration {i}: serial: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(pace).await;
    }
    redlock.settle().await;
    println!("ledger {id}: done: increments={increments} refused={refused} failures={failures}");
    Ok(())
}

/// Tells the chaos who holds the lock now, and in which iteration.
fn note_holder(data: &Path, id: &str, i: u64) -> Result<(), BoxError> {
    let tmp = data.join(format!("holder.tmp.{id}"));
    std::fs::write(&tmp, format!("{id} {i}\n"))?;
    std::fs::rename(&tmp, data.join("holder"))?;
    Ok(())
}

/// Why an increment did not land.
enum Step {
    /// The fence refused it: a later holder's token (`seen`) wrote first.
    Refused { seen: u64 },
    /// Anything else.
    Failed(BoxError),
}

impl<E: Into<BoxError>> From<E> for Step {
    fn from(e: E) -> Self {
        Step::Failed(e.into())
    }
}

/// The read-modify-write, in one transaction begun with the fence check
/// (without it when `fenced` is false); not written unless the lock still
/// looked valid after the read.
async fn increment(
    pool: &PgPool,
    (lock, think): (&redquorum::Lock, Duration),
    fenced: bool,
    id: &str,
) -> Result<(), Step> {
    let fence = lock.fence().ok_or("a fenced lock has a token")?;
    let mut tx = if fenced {
        match PgFence::begin(pool, fence, SCOPE).await {
            Ok(tx) => tx,
            Err(FenceError::Stale { seen, .. }) => return Err(Step::Refused { seen }),
            Err(e) => return Err(e.into()),
        }
    } else {
        pool.begin().await?
    };
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM ledger WHERE id = 1")
        .fetch_one(&mut *tx)
        .await?;
    // The check that a pause defeats, then some thinking: a pause here
    // lets a later holder read the same balance, unless the fence's row
    // lock (taken at begin) makes it wait for this transaction.
    lock.ensure_valid(Duration::from_millis(500))?;
    tokio::time::sleep(think).await;
    sqlx::query("UPDATE ledger SET balance = $1 WHERE id = 1")
        .bind(balance + 1)
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO increments (worker, token) VALUES ($1, $2::numeric)")
        .bind(id)
        .bind(fence.token().to_string())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

async fn verify(pool: &PgPool, fenced: bool) -> Result<(), BoxError> {
    let (balance, increments, numbers, duplicates, refused): (i64, i64, i64, i64, i64) =
        sqlx::query_as(
            "SELECT (SELECT balance FROM ledger WHERE id = 1),
                    (SELECT count(*) FROM increments), (SELECT count(*) FROM serials),
                    (SELECT count(*) FROM duplicates), (SELECT count(*) FROM refusals)",
        )
        .fetch_one(pool)
        .await?;
    let lost = increments - balance;
    println!(
        "numbers={} duplicates={duplicates} lost_updates={lost} stale_writes_refused={refused} (balance={balance}, increments={increments}, fence {})",
        numbers + duplicates,
        if fenced { "on" } else { "off" }
    );
    if duplicates > 0 || numbers == 0 {
        return Err("verification failed: duplicate or no serial numbers".into());
    }
    if fenced && (lost != 0 || refused == 0) {
        return Err(
            "verification failed: with the fence, no lost update and some stale write refused"
                .into(),
        );
    }
    if !fenced && lost <= 0 {
        return Err(
            "verification failed: with the fence off, the pauses should have lost an update".into(),
        );
    }
    Ok(())
}
