//! The secured store's door: one thread accepts connections and reads each one's first request,
//! which must be the `AUTH` carrying the job's secret, with `poll(2)` over all of them at once.
//! A connection costs a thread only once it has authenticated; one that sends anything else,
//! or nothing for [`AUTH_DEADLINE`], is closed unanswered, and at most [`MAX_PENDING`] wait at
//! a time (the oldest is dropped for a newer one). Before, every connection had a thread of
//! its own for up to 10 s, so 2,000 idle connections made 2,000 threads.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::tcp_store::{same_secret, Secret, OP_AUTH, ST_OK};

/// Bytes of the `AUTH` request a member sends: op, an empty key, the 16-byte secret, `arg`
/// and `timeout_ms` (the store's wire format).
pub(super) const AUTH_LEN: usize = 1 + 4 + 4 + 16 + 8 + 8;
/// Connections that may wait at once for their `AUTH`.
pub(super) const MAX_PENDING: usize = 1024;
/// How long a connection may take to send its `AUTH`.
pub(super) const AUTH_DEADLINE: Duration = Duration::from_secs(10);

/// Whether `req` is the `AUTH` request carrying `secret`.
pub(super) fn auth_request_ok(req: &[u8; AUTH_LEN], secret: &Secret) -> bool {
    let key_len = u32::from_le_bytes([req[1], req[2], req[3], req[4]]);
    let val_len = u32::from_le_bytes([req[5], req[6], req[7], req[8]]);
    req[0] == OP_AUTH && key_len == 0 && val_len == 16 && same_secret(&req[9..25], secret)
}

/// Whether `start` (the first bytes of a connection) can still be the start of an `AUTH`
/// request: another request is closed as soon as its first bytes show it.
fn could_be_auth(start: &[u8]) -> bool {
    let mut want = [0u8; 9];
    want[0] = OP_AUTH;
    want[5] = 16;
    start.iter().zip(want).all(|(&b, w)| b == w)
}

/// The reply to an accepted `AUTH`.
pub(super) const AUTH_REPLY: [u8; 5] = [ST_OK, 0, 0, 0, 0];

/// A connection waiting for its `AUTH`.
struct Pending {
    stream: TcpStream,
    got: Vec<u8>,
    deadline: Instant,
}

/// What became of a pending connection after it was readable.
enum Step {
    Wait,
    Admit,
    Close,
}

impl Pending {
    fn read(&mut self, secret: &Secret) -> Step {
        let mut buf = [0u8; AUTH_LEN];
        let want = AUTH_LEN - self.got.len();
        match self.stream.read(&mut buf[..want]) {
            Ok(0) => Step::Close,
            Ok(n) => {
                self.got.extend_from_slice(&buf[..n]);
                if !could_be_auth(&self.got) {
                    return Step::Close;
                }
                if self.got.len() < AUTH_LEN {
                    return Step::Wait;
                }
                let req: &[u8; AUTH_LEN] = self.got.as_slice().try_into().expect("AUTH_LEN bytes");
                match auth_request_ok(req, secret) {
                    true => Step::Admit,
                    false => Step::Close,
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                Step::Wait
            }
            Err(_) => Step::Close,
        }
    }
}

/// Accepts connections on `listener` until `stop`, and hands each one that presents `secret`
/// (answered, blocking again) to `admit`.
pub(super) fn run(
    listener: TcpListener,
    stop: &AtomicBool,
    secret: Secret,
    admit: impl Fn(TcpStream),
) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut pending: Vec<Pending> = Vec::new();
    loop {
        let now = Instant::now();
        let wait = pending
            .iter()
            .map(|p| p.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(pending.iter().map(|p| p.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a live array of `fds.len()` pollfd entries, each an open descriptor
        // owned by `listener` or `pending` for the whole call.
        let ready = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis().max(1) as libc::c_int,
            )
        };
        if stop.load(Ordering::Acquire) {
            return;
        }
        if ready < 0 {
            continue; // EINTR
        }
        // Readable pending connections first (their indices are those of this poll).
        let mut keep = Vec::with_capacity(pending.len());
        for (p, fd) in pending.drain(..).zip(&fds[1..]) {
            let mut p = p;
            let step = match fd.revents {
                0 if Instant::now() < p.deadline => Step::Wait,
                0 => Step::Close,
                _ => p.read(&secret),
            };
            match step {
                Step::Wait => keep.push(p),
                Step::Admit => {
                    if p.stream.set_nonblocking(false).is_ok()
                        && p.stream.write_all(&AUTH_REPLY).is_ok()
                    {
                        admit(p.stream);
                    }
                }
                Step::Close => {}
            }
        }
        pending = keep;
        if fds[0].revents != 0 {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if stream.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if pending.len() >= MAX_PENDING {
                            pending.remove(0);
                        }
                        pending.push(Pending {
                            stream,
                            got: Vec::with_capacity(AUTH_LEN),
                            deadline: Instant::now() + AUTH_DEADLINE,
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        }
    }
}
