//! Clocks that misbehave, for real processes: `clockshift.c`, compiled
//! once per test binary with the C compiler Rust links with, preloaded into
//! a process, shifts and scales its wall clock and shifts its boot-time
//! clock as a [`ClockFile`] says (see the C file for the format).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many times a clock scenario runs: `REDQUORUM_CLOCK_RUNS` (1 unless
/// set; the docs' figures are from 20).
pub fn runs() -> usize {
    std::env::var("REDQUORUM_CLOCK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// The compiled preload library (built on first use).
pub fn preload() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/clockshift.c");
            let src = if std::path::Path::new(src).exists() {
                PathBuf::from(src)
            } else {
                // The CLI's tests run from cli/.
                PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../tests/support/clockshift.c"
                ))
            };
            // One build per version of the source, shared by every test
            // process (nextest runs each test in its own): named by the
            // source's hash, built under a name of this process's and
            // renamed into place, which is atomic, so a process never
            // loads a half-written library, and none is left behind.
            let text = std::fs::read(&src).expect("reading clockshift.c");
            let mut hasher = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&text, &mut hasher);
            let hash = std::hash::Hasher::finish(&hasher);
            let out = std::env::temp_dir().join(format!("redquorum-clockshift-{hash:016x}.so"));
            if out.exists() {
                return out;
            }
            let part = out.with_extension(format!("{}.part", std::process::id()));
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(&part)
                .arg(&src)
                .status()
                .expect("cc, the C compiler Rust links with");
            assert!(status.success(), "compiling {}", src.display());
            std::fs::rename(&part, &out).expect("moving the built library into place");
            out
        })
        .clone()
}

/// The file a preloaded process reads its clocks' faults from.
pub struct ClockFile {
    /// Where it is.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ClockFile {
    /// A file that changes nothing yet.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = Self {
            path: dir.path().join("clock"),
            _dir: dir,
        };
        file.write(0, 1.0, 0);
        file
    }

    /// The environment that preloads the library reading this file.
    pub fn env(&self) -> [(&'static str, std::ffi::OsString); 2] {
        [
            ("LD_PRELOAD", preload().into_os_string()),
            ("REDQUORUM_TEST_CLOCK", self.path.clone().into_os_string()),
        ]
    }

    /// The boot-time clock jumps `by` ahead of the monotonic one, as after
    /// a suspend of that long.
    pub fn suspend(&self, by: Duration) {
        self.write(0, 1.0, by.as_nanos() as i64);
    }

    /// The wall clock: `offset_ns` ahead, running at `rate` from now on.
    pub fn wall(&self, offset_ns: i64, rate: f64) {
        self.write(offset_ns, rate, 0);
    }

    fn write(&self, offset_ns: i64, rate: f64, boot_ns: i64) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let tmp = self.path.with_extension("new");
        std::fs::write(&tmp, format!("{offset_ns} {rate} {now} {boot_ns}\n")).unwrap();
        std::fs::rename(&tmp, &self.path).unwrap();
    }
}

/// For a process preloaded with the file at `path` (the variable
/// `REDQUORUM_TEST_CLOCK` names): its own clocks (monotonic, boot-time and
/// wall) run at `rate` from the real monotonic instant `from_ns` on (a
/// clock that stalls while the process runs).
pub fn own_clocks(path: &std::path::Path, rate: f64, from_ns: i128) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("0 {rate} {now} 0 {rate} {from_ns}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The real monotonic clock, in ns, read past any preload (the system
/// call itself, which the preload does not change).
pub fn real_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the system call writes one timespec through the pointer,
    // which points to a live, writable one.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    assert_eq!(r, 0, "clock_gettime");
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// This test binary run again as `test` alone (`--exact`), in the role
/// the variable `role` names (given `value`), its clocks preloaded from
/// `clock` and its monotonic clock running at `rate`: stdin and stdout
/// piped, stderr inherited.
pub fn run_preloaded(
    test: &str,
    (role, value): (&str, &str),
    clock: &ClockFile,
    rate: f64,
) -> std::process::Child {
    use std::process::Stdio;
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(role, value)
        .env("LD_PRELOAD", preload())
        .env("REDQUORUM_TEST_CLOCK", &clock.path)
        .env("REDQUORUM_TEST_MONOTONIC_RATE", rate.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}
