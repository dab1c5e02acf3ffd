//! Exit codes: the one table every command and its `--help` use (values
//! from sysexits.h where one fits).

use std::process::ExitCode;

use redquorum::Error;

/// Serial numbers cannot be issued as asked: the period's numbers are
/// exhausted at this width, or this machine's clock is behind the latest
/// issued period (`EX_DATAERR`).
pub const CANNOT_ISSUE: u8 = 65;
/// No quorum of nodes answered (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// The lock is held by another owner and was not acquired within `--wait`
/// (`EX_TEMPFAIL`).
pub const NOT_ACQUIRED: u8 = 75;
/// The lock was lost while the command ran; the command was terminated.
pub const LOCK_LOST: u8 = 76;
/// Bad configuration or usage: nodes, durations, time zone, a missing `--`
/// (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
/// The command was found but could not be executed (the shell's
/// convention).
pub const NOT_EXECUTABLE: u8 = 126;
/// The command could not be started (the shell's convention).
pub const CANNOT_RUN: u8 = 127;

/// The lines every command's `--help` shares.
fn common() -> String {
    format!(
        "{UNAVAILABLE} no quorum of nodes answered; {CONFIG} bad configuration or usage \
         (--help and --version exit 0)"
    )
}

/// `redquorum lock`'s exit codes, as its `--help` lists them.
pub fn lock_codes() -> String {
    format!(
        "Exit codes: the command's status; {NOT_ACQUIRED} lock held by another owner, not \
         acquired within --wait;\n{LOCK_LOST} lock lost while the command ran (SIGTERM to its \
         process group, then SIGKILL after --grace\n   or when the lock's validity ends, \
         whichever is first);\n{NOT_EXECUTABLE} command found but not executable; {CANNOT_RUN} \
         command not found; 128+N killed by signal N;\n{}.",
        common()
    )
}

/// `redquorum elect`'s exit codes.
pub fn elect_codes() -> String {
    format!(
        "Exit codes: the command's status; {NOT_ACQUIRED} not leader within --wait;\n{LOCK_LOST} \
         leadership lost while the command ran (its process group ended as for `lock`);\n\
         {NOT_EXECUTABLE} command found but not executable; {CANNOT_RUN} command not found; \
         128+N killed by signal N\n(--listen: 128+N when interrupted);\n{}.",
        common()
    )
}

/// `redquorum serial next`'s exit codes.
pub fn serial_codes() -> String {
    format!(
        "Exit codes: 0 all numbers printed; {CANNOT_ISSUE} the period's numbers are exhausted, \
         or this clock is behind the latest issued period;\n{NOT_ACQUIRED} too much contention \
         on the counter, try again; {} (numbers printed before a failure stay valid).",
        common()
    )
}

/// `redquorum inspect`'s exit codes.
pub fn inspect_codes() -> String {
    format!(
        "Exit codes: 0 the lock (with -n N: a permit; a read-write lock's writer side; an \
         election: no leader)\ncan be taken now; {NOT_ACQUIRED} it is held, or not yet free on \
         a quorum of nodes; {}.",
        common()
    )
}

/// `redquorum status`: a quorum of nodes is reachable, but too few of them
/// count for a lock yet (quarantine): locks cannot be taken now; the output
/// says when they can (`EX_TEMPFAIL`).
pub const NO_LOCK_VOTES: u8 = 75;

/// `redquorum status`'s exit codes.
pub fn status_codes() -> String {
    format!(
        "Exit codes: 0 a quorum of nodes is reachable and counts for locks; {NO_LOCK_VOTES} a \
         quorum is reachable but too few\nnodes count for locks yet (quarantine: the output says \
         when they will); {UNAVAILABLE} no quorum is reachable;\n{CONFIG} bad configuration or \
         usage."
    )
}

/// The top-level `--help`'s summary of every command's codes.
pub fn all_codes() -> String {
    format!(
        "Exit codes (see each command's --help): {CANNOT_ISSUE} serial numbers cannot be \
         issued; {UNAVAILABLE} no quorum;\n{NOT_ACQUIRED} lock (or leadership) not acquired in time \
         (status: no lock can be taken yet;\ninspect: the lock is not free);\n{LOCK_LOST} \
         lock or leadership lost; {CONFIG} bad configuration or usage; {CANNOT_RUN} command not started."
    )
}

/// The exit code for a library error.
pub fn for_error(e: &Error) -> u8 {
    match e {
        // Someone else's data where we keep ours: rename or delete it.
        // A TTL shorter than the nodes' round trips: choose a longer one.
        Error::InvalidConfig(_)
        | Error::InvalidUrl { .. }
        | Error::WrongType { .. }
        | Error::TtlTooShort { .. }
        | Error::SerialConfigConflict { .. }
        | Error::SemaphoreConflict { .. }
        // Resources no cluster member can lock in one step: rename them
        // (a common {tag}); waiting or retrying never helps.
        | Error::CrossSlot { .. } => CONFIG,
        Error::Exhausted { .. } | Error::ClockBehind { .. } => CANNOT_ISSUE,
        Error::Timeout { last, .. } => for_error(last),
        Error::NoQuorum { .. } | Error::Shutdown => UNAVAILABLE,
        _ => NOT_ACQUIRED,
    }
}

/// The exit code for a command that could not be started: 126 when it
/// exists but cannot be executed, 127 otherwise (as shells do).
pub fn cannot_run(e: &std::io::Error) -> u8 {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => NOT_EXECUTABLE,
        _ => CANNOT_RUN,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_in_several_slots_are_a_usage_error_not_contention() {
        let cross = Error::CrossSlot {
            resources: "a+b".into(),
            node: "127.0.0.1:7000".into(),
        };
        assert_eq!(for_error(&cross), CONFIG);
        let timed_out = Error::Timeout {
            resource: "a+b".into(),
            waited: std::time::Duration::from_secs(1),
            last: Box::new(cross),
        };
        assert_eq!(for_error(&timed_out), CONFIG);
    }

    #[test]
    fn outage_is_not_contention() {
        let contended = Error::Contended {
            resource: "x".into(),
        };
        let outage = Error::NoQuorum {
            resource: "x".into(),
            asked: 5,
            answered: 0,
            needed: 3,
            succeeded: 0,
            failures: Vec::new(),
        };
        assert_eq!(for_error(&contended), NOT_ACQUIRED);
        assert_eq!(for_error(&outage), UNAVAILABLE);
        let timed_out = |last| Error::Timeout {
            resource: "x".into(),
            waited: std::time::Duration::from_secs(1),
            last: Box::new(last),
        };
        assert_eq!(for_error(&timed_out(outage)), UNAVAILABLE);
        assert_eq!(for_error(&timed_out(contended)), NOT_ACQUIRED);
        let exhausted = Error::Exhausted {
            counter: "ORDER".into(),
            period: "20261122".into(),
            requested: 1,
            max: 9,
        };
        assert_eq!(for_error(&exhausted), CANNOT_ISSUE);
    }
}
