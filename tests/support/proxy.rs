//! A TCP proxy in front of a node that can add latency, cut, hold or
//! refuse connections.

use super::*;

/// What a [`Proxy`] does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward as is.
    Pass,
    /// Forward after this many milliseconds.
    Delay(u64),
    /// Accept and read, but forward nothing in either direction.
    Blackhole,
    /// Close every new connection at once, and the others at their next
    /// traffic (as a node that is down).
    Refuse,
    /// Hold the connections accepted from now on: what they send waits
    /// (either way) until the mode changes, then goes on; connections
    /// made before pass as they are.
    HoldNew,
}

/// [`ProxyMode::Refuse`], encoded.
pub(crate) const REFUSE: u64 = u64::MAX;
/// [`ProxyMode::HoldNew`], encoded.
pub(crate) const HOLD_NEW: u64 = u64::MAX - 1;

/// A TCP proxy in front of a node, on its own threads (independent of any
/// test runtime). Closed on drop.
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    /// Encoded mode: 0 pass, 1 blackhole, 2+ms delay, [`HOLD_NEW`],
    /// [`REFUSE`].
    pub(crate) mode: Arc<AtomicU64>,
    /// Set on drop to end the accept loop.
    pub(crate) stop: Arc<AtomicBool>,
    /// Every socket opened, for shutdown on drop.
    pub(crate) sockets: Arc<Mutex<Vec<TcpStream>>>,
    /// Connections accepted so far.
    pub(crate) accepted: Arc<AtomicU64>,
    /// The port new connections are forwarded to.
    pub(crate) target: Arc<AtomicU16>,
}

impl Proxy {
    /// Starts a proxy to `127.0.0.1:target`.
    pub fn start(target: u16) -> Self {
        let listener = listener();
        let port = listener.local_addr().expect("proxy addr").port();
        let mode = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicU64::new(0));
        let target = Arc::new(AtomicU16::new(target));
        let (m, st, socks, count, to) = (
            mode.clone(),
            stop.clone(),
            sockets.clone(),
            accepted.clone(),
            target.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let now = m.load(Ordering::SeqCst);
                let held = now == HOLD_NEW;
                if now == REFUSE {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", to.load(Ordering::SeqCst)))
                else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut s = socks.lock().expect("sockets");
                    s.push(client.try_clone().expect("clone"));
                    s.push(server.try_clone().expect("clone"));
                }
                for (from, to) in [
                    (
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                    ),
                    (server, client),
                ] {
                    let m = m.clone();
                    std::thread::spawn(move || pump(from, to, m, held));
                }
            }
        });
        Proxy {
            port,
            mode,
            stop,
            sockets,
            accepted,
            target,
        }
    }

    /// How many connections the proxy has accepted (a target that is down
    /// sees each closed at once).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// The proxy's `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Breaks every connection made through the proxy so far (as a network
    /// fault would); new ones are still accepted.
    pub fn cut(&self) {
        for s in self.sockets.lock().expect("sockets").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Leads the address elsewhere (a name or a virtual IP moved to
    /// another server): connections made from now on reach
    /// `127.0.0.1:port`, and those made so far are broken.
    pub fn retarget(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
        self.cut();
    }

    /// Changes what the proxy does with traffic from now on.
    pub fn set_mode(&self, mode: ProxyMode) {
        let v = match mode {
            ProxyMode::Pass => 0,
            ProxyMode::Blackhole => 1,
            ProxyMode::Delay(ms) => 2 + ms.min(HOLD_NEW - 3),
            ProxyMode::Refuse => REFUSE,
            ProxyMode::HoldNew => HOLD_NEW,
        };
        self.mode.store(v, Ordering::SeqCst);
    }
}

/// Forwards `from` to `to` as `mode` says; `held`: the connection was
/// accepted under [`ProxyMode::HoldNew`].
pub(crate) fn pump(mut from: TcpStream, mut to: TcpStream, mode: Arc<AtomicU64>, held: bool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match mode.load(Ordering::SeqCst) {
            0 => {}
            HOLD_NEW => {
                while held && mode.load(Ordering::SeqCst) == HOLD_NEW {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            1 => continue,   // blackhole: swallow
            REFUSE => break, // a node that is down keeps no connection
            d => std::thread::sleep(Duration::from_millis(d - 2)),
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Ends the waits of held connections (their sockets are shut below).
        self.mode.store(0, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for s in self.sockets.lock().expect("sockets").iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}
