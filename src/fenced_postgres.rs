//! The storage side of fencing, for data in PostgreSQL (feature
//! `postgres`, on sqlx): a check that joins the caller's own transaction,
//! so that the business write and the fence commit or roll back together.
//!
//! Each scope of data (a table, a row, whatever one lock guards: the
//! caller names it) has a row in the table `redquorum_fences` holding the
//! resource whose tokens write it and the highest token that did. The
//! rule is one SQL function, `redquorum_fence(scope, resource, token)`,
//! which every form calls (the library's two, and a shell's `psql`): an
//! upsert that raises the token only where the resource matches and the
//! token is not lower, and locks the row until the transaction ends, so a
//! concurrent writer of the same scope waits for it, then meets the raised
//! token: writes commit in token order. A refusal raises an error whose
//! code says which (`RQ001` stale, `RQ002` another resource's) and whose
//! detail holds the fence's token or resource.

use sqlx::{Connection, PgConnection, PgPool, Postgres, Row, Transaction};

use crate::fenced_writes::{Fence, FenceError};

/// The fences' table and the function that checks them; run once per
/// database (as [`PgFence::install`] does, or in a migration of your
/// own). Tokens are `numeric(20,0)`: every `u64` exactly.
pub const FENCE_SCHEMA: &str = r#"CREATE TABLE IF NOT EXISTS redquorum_fences (
    scope    text PRIMARY KEY,
    resource text NOT NULL,
    token    numeric(20, 0) NOT NULL
);
CREATE OR REPLACE FUNCTION redquorum_fence(p_scope text, p_resource text, p_token numeric)
RETURNS void LANGUAGE plpgsql AS $fence$
DECLARE
    f redquorum_fences%ROWTYPE;
BEGIN
    IF p_token IS NULL OR p_token = 'NaN' OR p_token < 0
        OR p_token > 18446744073709551615 OR p_token <> trunc(p_token) THEN
        RAISE EXCEPTION 'fence of % refused: % is not a fencing token (a whole number in 0..=18446744073709551615)',
            p_scope, p_token
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO redquorum_fences AS x (scope, resource, token)
    VALUES (p_scope, p_resource, p_token)
    ON CONFLICT (scope) DO UPDATE SET token = EXCLUDED.token
    WHERE x.resource = EXCLUDED.resource AND x.token <= EXCLUDED.token;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO f FROM redquorum_fences WHERE scope = p_scope;
    IF f.resource <> p_resource THEN
        RAISE EXCEPTION 'fence of % refused: it is fenced with tokens of %, not of %',
            p_scope, f.resource, p_resource
            USING ERRCODE = 'RQ002', DETAIL = f.resource;
    END IF;
    RAISE EXCEPTION 'fence of % refused: token % of % is below %, which already wrote it',
        p_scope, p_token, p_resource, f.token
        USING ERRCODE = 'RQ001', DETAIL = f.token::text;
END
$fence$"#;

/// The check, inside a transaction. $1 scope, $2 resource, $3 token
/// (decimal text).
const CHECK: &str = "SELECT redquorum_fence($1, $2, $3::numeric)";

/// [`CHECK`] for [`PgFence::begin`], sent with `BEGIN` as one simple query
/// (no parameters there: the values go in as escaped literals, see
/// [`literal`]). It runs before `BEGIN`, in the query's implicit
/// transaction, which `BEGIN` then makes the caller's: so a refusal rolls
/// back at once and never begins the transaction, and a pass is part of
/// it.
fn begin_check(quoted_scope: &str, quoted_resource: &str, token: u64) -> String {
    format!("SELECT redquorum_fence({quoted_scope}, {quoted_resource}, {token}); BEGIN")
}

/// The SQLSTATE of a refusal: a higher token wrote the scope.
const STALE: &str = "RQ001";

/// The SQLSTATE of a refusal: the scope is fenced with another resource's
/// tokens.
const OTHER: &str = "RQ002";

/// A scope's fence: its resource and highest token.
const READ: &str = "SELECT resource, token::text FROM redquorum_fences WHERE scope = $1";

/// Fence checks for data in PostgreSQL, inside the caller's transaction.
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use redquorum::{FenceError, PgFence};
///
/// let lock = redlock.lock("account:7", std::time::Duration::from_secs(10)).fenced().await?;
/// let fence = lock.fence().expect("a fenced lock has a token");
/// let mut tx = pool.begin().await?;
/// match PgFence::check(&mut tx, fence, "accounts:7").await {
///     Ok(()) => {
///         sqlx::query("UPDATE accounts SET balance = balance - 30 WHERE id = 7")
///             .execute(&mut *tx)
///             .await?;
///         tx.commit().await?;
///     }
///     // A later holder wrote first: this lock was lost. The transaction
///     // failed; dropping it rolls it back.
///     Err(FenceError::Stale { token, seen, .. }) => eprintln!("token {token} < {seen}"),
///     Err(e) => return Err(e.into()),
/// }
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PgFence;

impl PgFence {
    /// Creates the fences' table and their function ([`FENCE_SCHEMA`]):
    /// the table unless it exists, the function anew.
    pub async fn install(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(FENCE_SCHEMA).execute(conn).await.map(drop)
    }

    /// Lets the writes of the transaction `tx` to `scope` commit only if
    /// `fence` passes: `scope` is fenced with `fence`'s resource (or not
    /// yet at all) and no higher token of it wrote there. Passing raises
    /// the fence to `fence`'s token and locks it until `tx` ends, so
    /// `tx`'s writes and the fence commit, or roll back, together. Equal
    /// tokens pass (a holder writing twice). A refusal fails `tx` (roll it
    /// back; dropping it does). `tx` must be a transaction begun through
    /// sqlx (`begin()`): outside one, the fence would commit alone, and
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
        sqlx::query(CHECK)
            .bind(scope)
            .bind(fence.resource())
            .bind(fence.token().to_string())
            .execute(&mut *tx)
            .await
            .map(drop)
            .map_err(|error| refused(error, fence, scope))
    }

    /// Begins a transaction on a connection of `pool` whose writes to
    /// `scope` commit only if `fence` passes, as [`PgFence::check`]
    /// decides, with the check sent together with `BEGIN` (one round trip:
    /// a fenced transaction costs as many as an unfenced one). The check
    /// runs first and `BEGIN` takes it into the transaction, so a refusal
    /// leaves no transaction open. The transaction runs at the session's
    /// default isolation level. Do not drop the returned future before
    /// it completes (a timeout around it): as with sqlx's own `begin`, the
    /// connection can then go back to the pool inside the transaction,
    /// holding the fence's row; bound waits with PostgreSQL's
    /// `.wait(d)` instead.
    pub async fn begin(
        pool: &PgPool,
        fence: Fence<'_>,
        scope: &str,
    ) -> Result<Transaction<'static, Postgres>, FenceError> {
        let (Some(quoted_scope), Some(quoted_resource)) =
            (literal(scope), literal(fence.resource()))
        else {
            let nul = "a scope or resource with a NUL character, which PostgreSQL text cannot hold";
            return Err(database_error(scope, sqlx::Error::Encode(nul.into())));
        };
        // Built in one pass: a name holding "{resource}" stays a name.
        let statement = begin_check(&quoted_scope, &quoted_resource, fence.token());
        pool.begin_with(statement)
            .await
            .map_err(|error| refused(error, fence, scope))
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

/// `text` as an escaped string literal (`E'...'`: backslashes and quotes
/// doubled, whatever `standard_conforming_strings` says); `None` if it
/// holds a NUL, which PostgreSQL text cannot.
fn literal(text: &str) -> Option<String> {
    if text.contains('\0') {
        return None;
    }
    let mut quoted = String::with_capacity(text.len() + 4);
    quoted.push_str("E'");
    for c in text.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("''"),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    Some(quoted)
}

/// What `error`, from a check of `fence` on `scope`, means: a refusal
/// (by its code, with the fence's token or resource in its detail), or a
/// failure of the database.
fn refused(error: sqlx::Error, fence: Fence<'_>, scope: &str) -> FenceError {
    let said = error.as_database_error().and_then(|e| {
        let code = e.code()?.into_owned();
        let pg = e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?;
        Some((code, pg.detail()?.to_owned()))
    });
    match said {
        Some((code, detail)) if code == STALE => match detail.parse() {
            Ok(seen) => FenceError::Stale {
                key: scope.to_owned(),
                resource: fence.resource().to_owned(),
                token: fence.token(),
                seen,
            },
            Err(_) => database_error(scope, error),
        },
        Some((code, guarded_by)) if code == OTHER => FenceError::OtherResource {
            key: scope.to_owned(),
            resource: fence.resource().to_owned(),
            guarded_by,
        },
        _ => database_error(scope, error),
    }
}

fn database_error(scope: &str, source: sqlx::Error) -> FenceError {
    FenceError::Database {
        key: scope.to_owned(),
        source,
    }
}
