//! `redquorum serial next`: issue numbers and print them, one per line.

use std::process::ExitCode;

use redquorum::{Redlock, SerialGenerator};

use crate::args::SerialArgs;
use crate::exit;

/// Issues `--count` numbers, `--batch` per allocation.
pub async fn serial_next(redlock: Redlock, args: SerialArgs) -> ExitCode {
    let mut builder = SerialGenerator::builder(redlock)
        .width(args.width)
        .reset_period(args.period);
    if let Some(tz) = &args.tz {
        match tz.parse::<redquorum::chrono_tz::Tz>() {
            Ok(tz) => builder = builder.time_zone(tz),
            Err(_) => {
                eprintln!(
                    "redquorum: unknown time zone {tz:?} (use an IANA name like Asia/Shanghai)"
                );
                return exit::code(exit::CONFIG);
            }
        }
    }
    let serials = match builder.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redquorum: {e}");
            return exit::code(exit::for_error(&e));
        }
    };
    // More than the width numbers in a period can never be issued: said
    // before anything is sent, with the count asked for.
    let most = serials.max_number();
    if args.count > most {
        eprintln!(
            "redquorum: --count {} is more than --width {} can number in one period ({most}): \
             widen it, or issue fewer",
            args.count, args.width
        );
        return exit::code(exit::CONFIG);
    }
    // One call returns its numbers in memory: at most MAX_BATCH at once.
    let batch = args.batch.unwrap_or(args.count.min(redquorum::MAX_BATCH));
    let mut left = args.count;
    let mut out = String::new();
    while left > 0 {
        let k = batch.min(left);
        match serials.next_batch(&args.prefix, k).await {
            Ok(numbers) => {
                use std::fmt::Write;
                for n in numbers {
                    let _ = writeln!(out, "{n}");
                }
                if out.len() > 64 * 1024 || k == left {
                    print!("{out}");
                    out.clear();
                }
            }
            Err(e) => {
                print!("{out}");
                eprintln!("redquorum: {e}");
                return exit::code(exit::for_error(&e));
            }
        }
        left -= k;
    }
    // Let the last allocation's writes reach slow nodes before exiting.
    serials.redlock().settle().await;
    ExitCode::SUCCESS
}
