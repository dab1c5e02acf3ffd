//! `redquorum lock NAME` with no command: hold the lock for a shell script
//! (as `etcdctl lock NAME` does). Prints what the script needs, keeps the
//! lock renewed, and releases it when signalled or when stdin ends.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use redquorum::{Lock, Redlock};
use tokio::io::AsyncReadExt as _;

use crate::exit;
use crate::hold::Forwarded;

/// Prints `env` (one `NAME=VALUE` line each, quoted for sh) and `held`,
/// then holds `lock` until a signal, the end of stdin (where stdin is a
/// pipe, a socket or a terminal: `/dev/null` or a file would end at once)
/// or its loss (exit 76). `what` names the lock in messages.
pub async fn keep(
    redlock: &Redlock,
    lock: Lock,
    signals: &mut Forwarded,
    env: &[(String, String)],
    what: &str,
) -> ExitCode {
    lock.auto_extend();
    let mut out = std::io::stdout().lock();
    let printed = env
        .iter()
        .try_for_each(|(k, v)| writeln!(out, "{k}={}", quoted(v)))
        .and_then(|()| writeln!(out, "held"))
        .and_then(|()| out.flush());
    drop(out);
    // Nobody reads what we hold: nothing to hold it for.
    let mut code = if printed.is_err() {
        exit::code(exit::CANNOT_RUN)
    } else {
        let lost = lock.lost();
        tokio::select! {
            _ = signals.recv() => ExitCode::SUCCESS,
            () = stdin_ends() => ExitCode::SUCCESS,
            () = lost => {
                let cause = lock
                    .lost_reason()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                eprintln!("redquorum: {what} lost{cause}");
                return finish(redlock, exit::code(exit::LOCK_LOST)).await;
            }
        }
    };
    if let Err(e) = lock.release().await {
        eprintln!("redquorum: release: {e}");
        code = exit::code(exit::UNAVAILABLE);
    }
    finish(redlock, code).await
}

/// Lets releases reach the slower nodes, then returns `code`.
async fn finish(redlock: &Redlock, code: ExitCode) -> ExitCode {
    let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
    code
}

/// Resolves when stdin ends, if stdin is a pipe, a socket or a terminal;
/// never otherwise.
async fn stdin_ends() {
    if !stdin_can_end() {
        return std::future::pending().await;
    }
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 512];
    while let Ok(n) = stdin.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

/// Whether stdin is something whose end means "release": a pipe, a
/// socket or a terminal.
fn stdin_can_end() -> bool {
    // SAFETY: fstat fills a zeroed struct for descriptor 0; isatty reads.
    unsafe {
        if libc::isatty(0) == 1 {
            return true;
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(0, &mut st) != 0 {
            return false;
        }
        matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK)
    }
}

/// `value` as one sh word: as it is when plain, else single-quoted.
fn quoted(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:/@%+,".contains(c));
    if plain {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}
