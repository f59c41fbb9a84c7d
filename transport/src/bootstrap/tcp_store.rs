//! The key-value store over TCP: a server (run by rank 0 or by `rdcoll-run`) and its client.
//!
//! Wire format, little endian: a request is `op:u8, key_len:u32, key, val_len:u32, val, arg:i64,
//! timeout_ms:u64`; a reply is `status:u8, len:u32, payload`. Lengths are checked before anything
//! is allocated.
//!
//! A server started with the job's secret ([`StoreServer::start_secured`]) answers a connection
//! only once its first request has been an `AUTH` carrying that secret; anything else closes
//! it unanswered, so a process that can reach the port but holds no secret learns nothing.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::store::Store;
use super::store_gate;
use crate::error::{Result, TransportError};

const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;
const OP_WAIT: u8 = 4;
pub(super) const OP_AUTH: u8 = 5;
pub(super) const ST_OK: u8 = 0;
const ST_TIMEOUT: u8 = 1;
const ST_BAD: u8 = 2;
const MAX_KEY: usize = 4096;
const MAX_VALUE: usize = 1 << 20;

#[derive(Default)]
struct Table {
    values: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

impl Table {
    fn counter(values: &HashMap<String, Vec<u8>>, key: &str) -> i64 {
        values
            .get(key)
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(i64::from_le_bytes)
            .unwrap_or(0)
    }

    fn handle(
        &self,
        op: u8,
        key: String,
        value: Vec<u8>,
        arg: i64,
        timeout: Duration,
    ) -> (u8, Vec<u8>) {
        let deadline = Instant::now() + timeout;
        let mut values = self.values.lock();
        match op {
            OP_SET => {
                values.insert(key, value);
                self.changed.notify_all();
                (ST_OK, Vec::new())
            }
            OP_ADD => {
                let v = Self::counter(&values, &key).wrapping_add(arg);
                values.insert(key, v.to_le_bytes().to_vec());
                self.changed.notify_all();
                (ST_OK, v.to_le_bytes().to_vec())
            }
            OP_GET | OP_WAIT => loop {
                let ready = if op == OP_GET {
                    values.get(&key).cloned()
                } else {
                    (Self::counter(&values, &key) >= arg).then(Vec::new)
                };
                if let Some(v) = ready {
                    return (ST_OK, v);
                }
                if self.changed.wait_until(&mut values, deadline).timed_out() {
                    return (ST_TIMEOUT, Vec::new());
                }
            },
            _ => (ST_BAD, Vec::new()),
        }
    }
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}
fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}
fn read_bytes(r: &mut impl Read, max: usize) -> std::io::Result<Vec<u8>> {
    let len = read_u32(r)? as usize;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "length over the limit",
        ));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// A request in the wire format (see the module's text).
fn encode_request(op: u8, key: &[u8], val: &[u8], arg: i64, timeout_ms: u64) -> Vec<u8> {
    let mut req = Vec::with_capacity(25 + key.len() + val.len());
    req.push(op);
    req.extend_from_slice(&(key.len() as u32).to_le_bytes());
    req.extend_from_slice(key);
    req.extend_from_slice(&(val.len() as u32).to_le_bytes());
    req.extend_from_slice(val);
    req.extend_from_slice(&arg.to_le_bytes());
    req.extend_from_slice(&timeout_ms.to_le_bytes());
    req
}

/// The job's secret, as the store and the tcp handshake check it.
pub type Secret = [u8; 16];

/// Whether `a` and `b` are equal, in time that does not depend on where they differ.
pub(super) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads the first request of a connection to a secured store: an `AUTH` with `secret`,
/// answered; anything else is not answered at all. (The server reads it without blocking, in
/// `store_gate`; this is the same check on a blocking stream.)
#[cfg(test)]
fn authenticate(stream: &mut (impl Read + Write), secret: &Secret) -> bool {
    let mut req = [0u8; store_gate::AUTH_LEN];
    stream.read_exact(&mut req).is_ok()
        && store_gate::auth_request_ok(&req, secret)
        && stream.write_all(&store_gate::AUTH_REPLY).is_ok()
}

/// Longest a `GET` or `WAIT` request may wait at the server.
const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// Serves a connection (an authenticated one, on a secured store) on a thread of its own.
fn serve_connection(table: Arc<Table>, mut stream: TcpStream) {
    let _ = std::thread::Builder::new()
        .name("rdcoll-store-conn".into())
        .spawn(move || {
            let _ = stream.set_nodelay(true);
            serve_requests(&table, &mut stream, MAX_WAIT);
        });
}

/// Answers requests on `stream` until it ends or sends something malformed (which closes it
/// unanswered); a `GET` or `WAIT` waits at most `max_wait`.
fn serve_requests(table: &Table, stream: &mut (impl Read + Write), max_wait: Duration) {
    loop {
        let mut op = [0u8; 1];
        if stream.read_exact(&mut op).is_err() {
            return;
        }
        let req = (|| -> std::io::Result<_> {
            let key = read_bytes(stream, MAX_KEY)?;
            let val = read_bytes(stream, MAX_VALUE)?;
            Ok((key, val, read_u64(stream)? as i64, read_u64(stream)?))
        })();
        let Ok((key, val, arg, timeout_ms)) = req else {
            return;
        };
        let Ok(key) = String::from_utf8(key) else {
            return;
        };
        let timeout = Duration::from_millis(timeout_ms).min(max_wait);
        let (status, payload) = table.handle(op[0], key, val, arg, timeout);
        let mut reply = Vec::with_capacity(5 + payload.len());
        reply.push(status);
        reply.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        reply.extend_from_slice(&payload);
        if stream.write_all(&reply).is_err() {
            return;
        }
    }
}

/// A running store server; stops accepting when dropped (open connections finish on their own).
pub struct StoreServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl StoreServer {
    /// Binds `addr` (port 0 picks one) and serves on background threads.
    pub fn start(addr: impl ToSocketAddrs) -> Result<StoreServer> {
        StoreServer::start_with(addr, None)
    }

    /// Like [`start`](StoreServer::start), answering only clients that first present `secret`
    /// ([`TcpStore::connect_secured`]).
    pub fn start_secured(addr: impl ToSocketAddrs, secret: Secret) -> Result<StoreServer> {
        StoreServer::start_with(addr, Some(secret))
    }

    fn start_with(addr: impl ToSocketAddrs, secret: Option<Secret>) -> Result<StoreServer> {
        let listener =
            TcpListener::bind(addr).map_err(|e| TransportError::io("binding the store", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TransportError::io("store address", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let table = Arc::new(Table::default());
        let stop2 = stop.clone();
        std::thread::Builder::new()
            .name("rdcoll-store".into())
            .spawn(move || match secret {
                // Members present the secret first; nobody else gets a thread.
                Some(secret) => store_gate::run(listener, &stop2, secret, |stream| {
                    serve_connection(table.clone(), stream)
                }),
                None => {
                    for conn in listener.incoming() {
                        if stop2.load(Ordering::Acquire) {
                            return;
                        }
                        if let Ok(stream) = conn {
                            serve_connection(table.clone(), stream);
                        }
                    }
                }
            })
            .map_err(|e| TransportError::io("starting the store thread", e))?;
        Ok(StoreServer { addr, stop })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// A client of a [`StoreServer`].
pub struct TcpStore {
    addr: String,
    conn: Mutex<TcpStream>,
}

impl TcpStore {
    /// Connects to `addr`, retrying until `timeout` (the server may not be up yet).
    pub fn connect(addr: &str, timeout: Duration) -> Result<TcpStore> {
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(5);
        loop {
            let last_err = match addr.to_socket_addrs() {
                Ok(addrs) => {
                    let mut err = None;
                    for a in addrs {
                        match TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
                            Ok(s) => {
                                let _ = s.set_nodelay(true);
                                return Ok(TcpStore {
                                    addr: addr.to_string(),
                                    conn: Mutex::new(s),
                                });
                            }
                            Err(e) => err = Some(e.to_string()),
                        }
                    }
                    err.unwrap_or_else(|| "no address".into())
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(TransportError::Bootstrap(format!(
                    "could not reach the store at {addr} within {timeout:?}: {last_err}"
                )));
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    /// Connects as [`connect`](TcpStore::connect) does and presents the job's `secret` to a
    /// secured server ([`StoreServer::start_secured`]).
    pub fn connect_secured(addr: &str, timeout: Duration, secret: &Secret) -> Result<TcpStore> {
        let store = TcpStore::connect(addr, timeout)?;
        store
            .call(OP_AUTH, "", secret, 0, Duration::from_secs(10))
            .map_err(|e| {
                TransportError::Bootstrap(format!(
                    "the store at {addr} did not accept this job's secret ({e})"
                ))
            })?;
        Ok(store)
    }

    /// The local address of the connection: the interface that reaches the store, which is the
    /// one peers can reach this host on.
    pub fn local_ip(&self) -> Option<std::net::IpAddr> {
        self.conn.lock().local_addr().ok().map(|a| a.ip())
    }

    fn call(&self, op: u8, key: &str, val: &[u8], arg: i64, timeout: Duration) -> Result<Vec<u8>> {
        if key.len() > MAX_KEY || val.len() > MAX_VALUE {
            return Err(TransportError::InvalidArgument(format!(
                "store key or value too long ({} / {} bytes)",
                key.len(),
                val.len()
            )));
        }
        let req = encode_request(op, key.as_bytes(), val, arg, timeout.as_millis() as u64);
        let mut conn = self.conn.lock();
        let io = |e| TransportError::io(format!("store at {}", self.addr), e);
        conn.set_read_timeout(Some(timeout + Duration::from_secs(10)))
            .map_err(io)?;
        conn.write_all(&req).map_err(io)?;
        let mut status = [0u8; 1];
        conn.read_exact(&mut status).map_err(io)?;
        let payload = read_bytes(&mut *conn, MAX_VALUE).map_err(io)?;
        match status[0] {
            ST_OK => Ok(payload),
            ST_TIMEOUT => Err(TransportError::Timeout {
                what: format!("store key {key:?} at {}", self.addr),
                after: timeout,
            }),
            _ => Err(TransportError::Bootstrap(format!(
                "store refused a request for {key:?}"
            ))),
        }
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call(OP_SET, key, value, 0, Duration::from_secs(10))
            .map(drop)
    }
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.call(OP_GET, key, &[], 0, timeout)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let v = self.call(OP_ADD, key, &[], delta, Duration::from_secs(10))?;
        let b = <[u8; 8]>::try_from(v.as_slice())
            .map_err(|_| TransportError::Bootstrap("malformed counter reply".into()))?;
        Ok(i64::from_le_bytes(b))
    }
    fn wait_at_least(&self, key: &str, target: i64, timeout: Duration) -> Result<()> {
        self.call(OP_WAIT, key, &[], target, timeout).map(drop)
    }
}

#[cfg(test)]
#[path = "store_fuzz.rs"]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_add_wait_and_timeouts() {
        let server = StoreServer::start("127.0.0.1:0").unwrap();
        let addr = server.addr().to_string();
        let a = TcpStore::connect(&addr, Duration::from_secs(5)).unwrap();
        let b = TcpStore::connect(&addr, Duration::from_secs(5)).unwrap();
        let waiter = std::thread::spawn(move || b.get("late", Duration::from_secs(5)).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        a.set("late", b"value").unwrap();
        assert_eq!(waiter.join().unwrap(), b"value");
        assert_eq!(a.add("n", 2).unwrap(), 2);
        assert_eq!(a.add("n", 3).unwrap(), 5);
        a.wait_at_least("n", 5, Duration::from_millis(10)).unwrap();
        let err = a.get("never", Duration::from_millis(50)).unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("never"));
    }

    #[test]
    fn garbage_does_not_kill_the_server() {
        let server = StoreServer::start("127.0.0.1:0").unwrap();
        let mut raw = TcpStream::connect(server.addr()).unwrap();
        raw.write_all(&[OP_SET, 0xff, 0xff, 0xff, 0xff]).unwrap();
        drop(raw);
        let a = TcpStore::connect(&server.addr().to_string(), Duration::from_secs(5)).unwrap();
        a.set("k", b"v").unwrap();
        assert_eq!(a.get("k", Duration::from_secs(1)).unwrap(), b"v");
    }

    #[test]
    fn a_secured_store_answers_only_holders_of_the_secret() {
        let secret: Secret = [7; 16];
        let server = StoreServer::start_secured("127.0.0.1:0", secret).unwrap();
        let addr = server.addr().to_string();
        let member = TcpStore::connect_secured(&addr, Duration::from_secs(5), &secret).unwrap();
        member.set("job/x", b"private").unwrap();
        // No secret: the first request is not AUTH, the connection closes unanswered.
        let stranger = TcpStore::connect(&addr, Duration::from_secs(5)).unwrap();
        assert!(stranger.get("job/x", Duration::from_millis(100)).is_err());
        // A wrong secret is refused.
        assert!(TcpStore::connect_secured(&addr, Duration::from_secs(5), &[8; 16]).is_err());
        assert_eq!(
            member.get("job/x", Duration::from_secs(1)).unwrap(),
            b"private"
        );
    }

    /// Threads of this process whose name starts with `prefix` (as /proc shows it).
    fn threads_named(prefix: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|name| name.starts_with(prefix))
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Connections that do not present the secret (idle, or part of an `AUTH` and then
    /// nothing) cost the secured store no thread, and a member still gets in among them.
    #[test]
    fn idle_strangers_cost_no_threads_and_do_not_keep_members_out() {
        let secret: Secret = [3; 16];
        let server = StoreServer::start_secured("127.0.0.1:0", secret).unwrap();
        let addr = server.addr().to_string();
        let strangers: Vec<TcpStream> = (0..200)
            .map(|_| TcpStream::connect(server.addr()).unwrap())
            .collect();
        for s in strangers.iter().step_by(2) {
            (&*s).write_all(&[OP_AUTH, 0, 0]).unwrap();
        }
        let member = TcpStore::connect_secured(&addr, Duration::from_secs(5), &secret).unwrap();
        member.set("k", b"v").unwrap();
        assert_eq!(member.get("k", Duration::from_secs(1)).unwrap(), b"v");
        // One thread per member (other tests' stores may have a few of their own).
        let serving = threads_named("rdcoll-store-co");
        assert!(
            serving < 50,
            "{serving} store threads for 200 strangers and one member"
        );
        // A stranger that sends a whole wrong AUTH is closed unanswered.
        let mut wrong = TcpStream::connect(server.addr()).unwrap();
        wrong
            .write_all(&encode_request(OP_AUTH, b"", &[4; 16], 0, 0))
            .unwrap();
        wrong
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
            wrong.read(&mut byte).unwrap_or(0),
            0,
            "a wrong secret was answered"
        );
        drop(strangers);
    }

    #[test]
    fn unreachable_store_names_the_address() {
        let err = TcpStore::connect("127.0.0.1:1", Duration::from_millis(100))
            .err()
            .unwrap();
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }
}
