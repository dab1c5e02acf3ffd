//! `redquorum elect`: run a command while this instance leads an election
//! (see `hold.rs` for how it runs and ends), or print each change of
//! leader.

use std::process::ExitCode;
use std::time::Duration;

use redquorum::{Election, Leader, Redlock};

use crate::args::ElectArgs;
use crate::exit;
use crate::hold::{self, Ending, Forwarded};

/// Campaigns, then runs the command while leading; or listens.
pub async fn elect(redlock: Redlock, args: ElectArgs) -> ExitCode {
    if let Err(code) = crate::client::check_ttl(&redlock, args.ttl) {
        return code;
    }
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
    let value = args
        .value
        .clone()
        .unwrap_or_else(crate::client::this_process);
    let attempt = async {
        let leadership = match args.wait {
            Some(wait) => election.campaign(&value).wait(wait).await,
            None => election.campaign(&value).await,
        };
        leadership.map(|l| l.into_lock())
    };
    let what = format!("leadership of {:?}", args.name);
    let lock =
        match hold::acquire(&redlock, &mut signals, (&what, exit::NOT_ACQUIRED), attempt).await {
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

/// Prints the leader, then one line per change, until a signal. An outage
/// (too few nodes answer) is told once on stderr when it starts and once
/// when a quorum answers again; meanwhile the leader is read every half
/// second, and a leader that changed during the outage is printed then.
async fn listen(election: &Election, signals: &mut Forwarded) -> ExitCode {
    let mut observer = election.observe();
    let mut printed: Option<Option<Leader>> = None;
    let mut outage = false;
    loop {
        let next = async {
            if outage {
                election.leader().await
            } else {
                observer.changed().await
            }
        };
        tokio::select! {
            got = next => match got {
                Ok(leader) => {
                    if std::mem::take(&mut outage) {
                        eprintln!(
                            "redquorum: election {:?}: a quorum of nodes answers again",
                            election.name()
                        );
                    }
                    if printed.as_ref() != Some(&leader) {
                        match &leader {
                            Some(l) => println!("term={} value={}", l.term, l.value),
                            None => println!("none"),
                        }
                        printed = Some(leader);
                    }
                }
                Err(e) => {
                    if !std::mem::replace(&mut outage, true) {
                        eprintln!(
                            "redquorum: reading election {:?}: {e}; still listening, reading again every 0.5 s",
                            election.name()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            },
            sig = signals.recv() => return exit::code(128 + sig as u8),
        }
    }
}
