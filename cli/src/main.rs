//! `redquorum`: a distributed `flock(1)`, serial numbers and a node health
//! check, from the shell.
//!
//! Layout, bottom to top: `exit.rs` (the exit-code table and error
//! reports), `log.rs` (the library's log lines as ours), `args.rs` (the command line), `client.rs` (the library client
//! from `--nodes`), `deadline.rs` (a lock's deadline on the clock we share
//! with the guard), `guard.rs` (the process that ends the command if we
//! die, or stop past the lock's deadline), `group.rs` (the wrapped command's process group),
//! `hold.rs` (running that command under a held lock, a permit or a
//! leadership), `keep.rs` (a lock held with no command), `clockrate.rs`
//! (a node clock's rate from three readings, for `status`), `nodecheck.rs`
//! (one node's health, for `status`), `shards.rs` (a member that is a Redis
//! Cluster: its shards' health, for `status`), then one file per
//! subcommand: `lock.rs`, `elect.rs`,
//! `serial.rs`, `status.rs` (with `serve.rs`, its `--wait`), `init.rs`,
//! `inspect.rs`, which never import each other; `main.rs` dispatches.

mod args;
mod client;
mod clockrate;
mod deadline;
mod elect;
mod exit;
mod group;
mod guard;
mod hold;
mod init;
mod inspect;
mod keep;
mod lock;
mod log;
mod nodecheck;
mod serial;
mod serve;
mod shards;
mod status;

use std::process::ExitCode;

use clap::Parser as _;
use tracing_subscriber::EnvFilter;

use crate::args::{Cli, Command, SerialCommand};
use crate::client::build;

fn main() -> ExitCode {
    // The library's warnings (a node that is not a Redis server or refuses
    // our password while a quorum works; an even node count), as our own
    // lines. Not its "lock lost" events nor its quarantine notices: `lock`
    // and `status` say those themselves, with the cause, once; nor what
    // makes each node unsafe for locks (no AOF, a policy that evicts):
    // `status` says that, grouped.
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            use redquorum::targets::{LINT, LOST, QUARANTINE};
            EnvFilter::new(format!("warn,{LOST}=off,{QUARANTINE}=off,{LINT}=off"))
        }))
        .event_format(log::Lines)
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse_from(args::normalized(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors exit with the configuration code, not clap's 2;
            // --help and --version print to stdout and exit 0.
            let _ = e.print();
            if let Some(hint) = args::hint(&e) {
                eprintln!("{hint}");
            }
            return exit::code(if e.use_stderr() { exit::CONFIG } else { 0 });
        }
    };
    if let Command::Lock(lock) = &cli.command {
        if let Some(e) = args::several_names_without_dashes(lock, std::env::args_os()) {
            eprintln!("{e}");
            return exit::code(exit::CONFIG);
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redquorum: cannot start the runtime: {e}");
            return exit::code(exit::CONFIG);
        }
    };
    rt.block_on(run(cli))
}

/// Runs the subcommand.
async fn run(mut cli: Cli) -> ExitCode {
    cli.nodes = args::join_cluster_seeds(std::mem::take(&mut cli.nodes));
    if cli.nodes.is_empty() {
        eprintln!("redquorum: no nodes: pass --nodes or set REDQUORUM_NODES");
        return exit::code(exit::CONFIG);
    }
    let times = (cli.node_timeout, cli.restart_quarantine);
    match cli.command {
        Command::Lock(args) => match build(&cli.nodes, times, &cli.key_prefix) {
            Ok(redlock) => lock::lock_and_run(redlock, args).await,
            Err(code) => code,
        },
        Command::Elect(args) => match build(&cli.nodes, times, &cli.key_prefix) {
            Ok(redlock) => elect::elect(redlock, args).await,
            Err(code) => code,
        },
        Command::Inspect(args) => match build(&cli.nodes, times, &cli.key_prefix) {
            Ok(redlock) => inspect::inspect(redlock, args).await,
            Err(code) => code,
        },
        Command::Serial(SerialCommand::Next(args)) => {
            match build(&cli.nodes, times, &cli.key_prefix) {
                Ok(redlock) => serial::serial_next(redlock, args).await,
                Err(code) => code,
            }
        }
        Command::Status(args) => {
            if args.wait {
                match build(&cli.nodes, times, "") {
                    Ok(redlock) => serve::serve(&redlock).await,
                    Err(code) => return code,
                }
            }
            status::status(&cli.nodes, times).await
        }
        Command::Init => match build(&cli.nodes, times, "") {
            Ok(redlock) => init::init(redlock).await,
            Err(code) => code,
        },
    }
}
