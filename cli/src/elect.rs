//! `redquorum elect`: run a command while this instance leads an election
//! (see `hold.rs` for how it runs and ends), or print each change of
//! leader.

use std::process::ExitCode;
use std::time::Duration;

use redquorum::{Election, Redlock};

use crate::args::ElectArgs;
use crate::exit;
use crate::hold::{self, Ending, Forwarded};

/// Campaigns, then runs the command while leading; or listens.
pub async fn elect(redlock: Redlock, args: ElectArgs) -> ExitCode {
    let election = match redlock.election(&args.name, args.ttl) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("redquorum: {e}");
            return exit::code(exit::CONFIG);
        }
    };
    let mut signals = match Forwarded::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redquorum: cannot install signal handlers: {e}");
            return exit::code(exit::CONFIG);
        }
    };
    if args.listen {
        return listen(&election, &mut signals).await;
    }
    let value = args.value.clone().unwrap_or_else(default_value);
    let attempt = async {
        let leadership = match args.wait {
            Some(wait) => election.campaign_timeout(&value, wait).await,
            None => election.campaign(&value).await,
        };
        leadership.map(|l| l.into_lock())
    };
    let what = format!("leadership of {:?}", args.name);
    let lock = match hold::acquire(&redlock, &mut signals, &what, attempt).await {
        Ok(lock) => lock,
        Err(code) => {
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            return code;
        }
    };
    let term = lock.fencing_token().unwrap_or_default();
    let env = [
        ("REDQUORUM_ELECTION".to_owned(), args.name.clone()),
        ("REDQUORUM_TERM".to_owned(), term.to_string()),
        ("REDQUORUM_VALUE".to_owned(), value),
    ];
    let ending = Ending {
        grace: args.grace,
        grace_past_lock: args.grace_past_lock,
    };
    let run = (args.command.as_slice(), env.as_slice());
    hold::run_under(&redlock, lock, &mut signals, run, &what, ending).await
}

/// Prints the leader, then one line per change, until a signal.
async fn listen(election: &Election, signals: &mut Forwarded) -> ExitCode {
    let mut observer = election.observe();
    loop {
        tokio::select! {
            changed = observer.changed() => match changed {
                Ok(Some(leader)) => println!("term={} value={}", leader.term, leader.value),
                Ok(None) => println!("none"),
                Err(e) => {
                    // Keep listening through an outage, without spinning.
                    eprintln!("redquorum: reading election {:?}: {e}", election.name());
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            },
            sig = signals.recv() => return exit::code(128 + sig as u8),
        }
    }
}

/// This host's name and our process id.
fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}
