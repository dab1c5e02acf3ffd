//! Exit codes: the one table every command and its `--help` use.

use std::process::ExitCode;

use redquorum::Error;

/// The lock could not be acquired within `--wait`.
pub const NOT_ACQUIRED: u8 = 75;
/// The lock was lost while the command ran; the command was terminated.
pub const LOCK_LOST: u8 = 76;
/// Bad configuration (nodes, durations, time zone...).
pub const CONFIG: u8 = 78;
/// No quorum of nodes reachable (status, serial).
pub const UNAVAILABLE: u8 = 69;
/// The command could not be started.
pub const CANNOT_RUN: u8 = 127;

/// `redquorum lock`'s exit codes, as its `--help` lists them.
pub fn lock_codes() -> String {
    format!(
        "Exit codes: the command's status; {NOT_ACQUIRED} lock not acquired within --wait;\n\
         {LOCK_LOST} lock lost while the command ran (SIGTERM, then SIGKILL after --grace);\n\
         {CANNOT_RUN} command could not be started; {CONFIG} bad configuration; \
         128+N killed by signal N."
    )
}

/// `redquorum status`'s exit codes.
pub fn status_codes() -> String {
    format!("Exit code 0 when a quorum of nodes is reachable, {UNAVAILABLE} otherwise.")
}

/// The exit code for `code`.
pub fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// The shell convention: the exit status, or 128 + signal.
pub fn of_status(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        _ => ExitCode::FAILURE,
    }
}

/// An error with its chain of causes, one line, then one line per failed
/// node.
pub fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    if let Some(err) = e.downcast_ref::<Error>() {
        for f in err.node_failures() {
            out.push_str(&format!("\n  {}", report(f)));
        }
    }
    out
}
