//! A listener's door: one thread accepts connections and reads each one's first message (a
//! fixed number of bytes) with `poll(2)` over all of them at once, so that a connection that
//! sends nothing, or sends slowly, holds up nobody else and costs no thread. Used by the
//! secured store (whose first message is the `AUTH` with the job's secret) and by the tcp
//! transport's accept of its peers (whose first message is the hello).

use std::io::{ErrorKind, Read};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How a door reads first messages.
pub(crate) struct Door {
    /// Bytes of the first message.
    pub first_len: usize,
    /// How long a connection may take to send it.
    pub per_connection: Duration,
    /// Connections that may wait at once (the oldest is dropped for a newer one).
    pub max_pending: usize,
}

/// A connection whose first message is not complete yet.
struct Pending {
    stream: TcpStream,
    got: Vec<u8>,
    deadline: Instant,
}

impl Door {
    /// Accepts on `listener` while `open()` holds (checked at least once a second and after
    /// every event) and hands each connection whose first message is complete to
    /// `arrived(stream, first)`, the stream blocking again. A connection is closed as soon as
    /// its first bytes fail `could_be`, when it ends early, or at its deadline.
    pub(crate) fn run(
        &self,
        listener: &TcpListener,
        mut open: impl FnMut() -> bool,
        could_be: impl Fn(&[u8]) -> bool,
        mut arrived: impl FnMut(TcpStream, &[u8]),
    ) -> std::io::Result<()> {
        listener.set_nonblocking(true)?;
        let mut pending: Vec<Pending> = Vec::new();
        while open() {
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
            // SAFETY: `fds` is a live array of `fds.len()` pollfd entries, each an open
            // descriptor owned by `listener` or `pending` for the whole call.
            let ready = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    wait.as_millis().max(1) as libc::c_int,
                )
            };
            if ready < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut keep = Vec::with_capacity(pending.len());
            for (mut p, fd) in pending.drain(..).zip(&fds[1..]) {
                if fd.revents == 0 {
                    if Instant::now() < p.deadline {
                        keep.push(p);
                    }
                    continue;
                }
                match self.read(&mut p, &could_be) {
                    Some(false) => keep.push(p),
                    Some(true) if p.stream.set_nonblocking(false).is_ok() => {
                        arrived(p.stream, &p.got)
                    }
                    Some(true) => {}
                    None => {}
                }
            }
            pending = keep;
            if fds[0].revents != 0 {
                self.accept_all(listener, &mut pending)?;
            }
        }
        Ok(())
    }

    /// Reads what `p` has sent: `Some(true)` once its first message is complete,
    /// `Some(false)` while it may still come, `None` to close it.
    fn read(&self, p: &mut Pending, could_be: &impl Fn(&[u8]) -> bool) -> Option<bool> {
        let mut buf = vec![0u8; self.first_len - p.got.len()];
        match p.stream.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => {
                p.got.extend_from_slice(&buf[..n]);
                could_be(&p.got).then_some(p.got.len() == self.first_len)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                Some(false)
            }
            Err(_) => None,
        }
    }

    /// Accepts what the listener holds. Out of descriptors (EMFILE, ENFILE), the oldest waiting
    /// connection is dropped to make room, and the rest wait for the next poll (a listener
    /// that keeps failing would otherwise be polled ready again at once, for ever); another
    /// error ends the door.
    fn accept_all(
        &self,
        listener: &TcpListener,
        pending: &mut Vec<Pending>,
    ) -> std::io::Result<()> {
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if pending.len() >= self.max_pending {
                        pending.remove(0);
                    }
                    pending.push(Pending {
                        stream,
                        got: Vec::with_capacity(self.first_len),
                        deadline: Instant::now() + self.per_connection,
                    });
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    if pending.is_empty() {
                        // Nothing of ours to free: let whoever holds descriptors finish.
                        std::thread::sleep(Duration::from_millis(10));
                    } else {
                        pending.remove(0);
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A silent connection and a slow one do not hold up a prompt one (served while they still
    /// wait); a wrong first byte closes its connection.
    #[test]
    fn the_prompt_are_not_held_up_by_the_silent() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let door = Door {
            first_len: 4,
            per_connection: Duration::from_secs(30),
            max_pending: 8,
        };
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done2 = done.clone();
        let client = std::thread::spawn(move || {
            let mut silent = TcpStream::connect(addr).unwrap();
            let mut slow = TcpStream::connect(addr).unwrap();
            slow.write_all(b"ab").unwrap();
            let mut wrong = TcpStream::connect(addr).unwrap();
            wrong.write_all(b"x").unwrap();
            let mut prompt = TcpStream::connect(addr).unwrap();
            prompt.write_all(b"abcd").unwrap();
            let mut byte = [0u8; 1];
            wrong
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let closed = matches!(wrong.read(&mut byte), Ok(0) | Err(_));
            prompt.read_exact(&mut byte).unwrap();
            // The silent connection was still waiting when the prompt one was served: nothing
            // waited for it to give up.
            silent.set_nonblocking(true).unwrap();
            let waiting =
                matches!(silent.read(&mut [0u8; 1]), Err(e) if e.kind() == ErrorKind::WouldBlock);
            done2.store(true, std::sync::atomic::Ordering::Release);
            (slow, closed, waiting, byte[0])
        });
        let got = std::cell::RefCell::new(Vec::new());
        door.run(
            &listener,
            || !done.load(std::sync::atomic::Ordering::Acquire),
            |b| b.first() == Some(&b'a'),
            |mut s, first| {
                s.write_all(b"!").unwrap();
                got.borrow_mut().push(first.to_vec());
            },
        )
        .unwrap();
        let (_slow, closed, waiting, reply) = client.join().unwrap();
        assert_eq!(got.into_inner(), vec![b"abcd".to_vec()]);
        assert_eq!(reply, b'!');
        assert!(closed, "a wrong first byte left its connection open");
        assert!(
            waiting,
            "the silent connection was closed before the prompt one was served"
        );
    }
}
