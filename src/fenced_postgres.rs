//! The storage side of fencing, for data in PostgreSQL (feature
//! `postgres`, on sqlx): a check that joins the caller's own transaction,
//! so that the business write and the fence commit or roll back together.
//!
//! Each scope of data (a table, a row, whatever one lock guards: the
//! caller names it) has a row in the table `redquorum_fences` holding the
//! resource whose tokens write it and the highest token that did. The
//! check is one statement: an upsert that raises the token only where the
//! resource matches and the token is not lower, which locks the row until
//! the transaction ends. So a concurrent writer of the same scope waits
//! for it, then meets the raised token: writes commit in token order. A
//! refusal reads the row once more (it is locked by then) to say why.

use sqlx::{Connection, PgConnection, Row};

use crate::fenced_writes::{Fence, FenceError};

/// The table [`PgFence::check`] keeps its fences in; run once per
/// database (as [`PgFence::create_table`] does, or in a migration of
/// your own). Tokens are `numeric(20,0)`: every `u64` exactly.
pub const FENCE_TABLE: &str = "CREATE TABLE IF NOT EXISTS redquorum_fences (
    scope    text PRIMARY KEY,
    resource text NOT NULL,
    token    numeric(20, 0) NOT NULL
)";

/// Raises the fence of a scope, or leaves it: a row back means the write
/// passes. $1 scope, $2 resource, $3 token (decimal text).
const RAISE: &str = "INSERT INTO redquorum_fences AS f (scope, resource, token)
VALUES ($1, $2, $3::numeric)
ON CONFLICT (scope) DO UPDATE SET token = EXCLUDED.token
WHERE f.resource = EXCLUDED.resource AND f.token <= EXCLUDED.token
RETURNING 1";

/// A scope's fence: its resource and highest token.
const READ: &str = "SELECT resource, token::text FROM redquorum_fences WHERE scope = $1";

/// Fence checks for data in PostgreSQL, inside the caller's transaction.
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use redquorum::{FenceError, PgFence};
///
/// let lock = redlock.lock_fenced("account:7", std::time::Duration::from_secs(10)).await?;
/// let fence = lock.fence().expect("a fenced lock has a token");
/// let mut tx = pool.begin().await?;
/// match PgFence::check(&mut tx, fence, "accounts:7").await {
///     Ok(()) => {
///         sqlx::query("UPDATE accounts SET balance = balance - 30 WHERE id = 7")
///             .execute(&mut *tx)
///             .await?;
///         tx.commit().await?;
///     }
///     // A later holder wrote first: this lock was lost. Dropping the
///     // transaction rolls it back.
///     Err(FenceError::Stale { token, seen, .. }) => eprintln!("token {token} < {seen}"),
///     Err(e) => return Err(e.into()),
/// }
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PgFence;

impl PgFence {
    /// Creates the fences' table ([`FENCE_TABLE`]) unless it exists.
    pub async fn create_table(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        sqlx::query(FENCE_TABLE).execute(conn).await.map(drop)
    }

    /// Lets the writes of the transaction `tx` to `scope` commit only if
    /// `fence` passes: `scope` is fenced with `fence`'s resource (or not
    /// yet at all) and no higher token of it wrote there. Passing raises
    /// the fence to `fence`'s token and locks it until `tx` ends, so
    /// `tx`'s writes and the fence commit, or roll back, together. Equal
    /// tokens pass (a holder writing twice). On a refusal, roll `tx` back
    /// (dropping it does). `tx` must be a transaction begun through sqlx
    /// (`begin()`): outside one, the fence would commit alone, and
    /// nothing is sent.
    pub async fn check(
        tx: &mut PgConnection,
        fence: Fence<'_>,
        scope: &str,
    ) -> Result<(), FenceError> {
        if !tx.is_in_transaction() {
            return Err(FenceError::NotInTransaction {
                scope: scope.to_owned(),
            });
        }
        let raised = sqlx::query(RAISE)
            .bind(scope)
            .bind(fence.resource())
            .bind(fence.token().to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|source| database_error(scope, source))?;
        if raised.is_some() {
            return Ok(());
        }
        match Self::fence_of(tx, scope).await? {
            Some((guarded_by, _)) if guarded_by != fence.resource() => {
                Err(FenceError::OtherResource {
                    key: scope.to_owned(),
                    resource: fence.resource().to_owned(),
                    guarded_by,
                })
            }
            Some((_, seen)) => Err(FenceError::Stale {
                key: scope.to_owned(),
                resource: fence.resource().to_owned(),
                token: fence.token(),
                seen,
            }),
            // The refusal locked the row: only this transaction itself
            // can have deleted it since.
            None => Err(database_error(scope, sqlx::Error::RowNotFound)),
        }
    }

    /// The fence of `scope`: the resource that guards it and the highest
    /// token that wrote it; `None` before its first check.
    pub async fn fence_of(
        conn: &mut PgConnection,
        scope: &str,
    ) -> Result<Option<(String, u64)>, FenceError> {
        let row = sqlx::query(READ)
            .bind(scope)
            .fetch_optional(conn)
            .await
            .map_err(|source| database_error(scope, source))?;
        let Some(row) = row else { return Ok(None) };
        let read = |row: &sqlx::postgres::PgRow| -> Result<(String, u64), sqlx::Error> {
            let resource: String = row.try_get(0)?;
            let token: String = row.try_get(1)?;
            let token = token.parse().map_err(|e| sqlx::Error::ColumnDecode {
                index: "token".to_owned(),
                source: Box::new(e),
            })?;
            Ok((resource, token))
        };
        read(&row)
            .map(Some)
            .map_err(|source| database_error(scope, source))
    }
}

fn database_error(scope: &str, source: sqlx::Error) -> FenceError {
    FenceError::Database {
        key: scope.to_owned(),
        source,
    }
}
