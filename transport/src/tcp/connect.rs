//! Building the tcp mesh: every rank listens, publishes its address in the store, connects to
//! lower ranks and accepts higher ones. The connecting side proves membership with the per-job
//! secret; a connection without it is closed and the listener keeps waiting for real peers.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::wire::{check_hello, hello, HELLO_LEN, MAGIC};
use crate::bootstrap::{Store, SECRET_KEY};
use crate::error::{Result, TransportError};
use crate::gate::Door;
use crate::types::Rank;
use std::cell::RefCell;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The address this rank listens on: `RDCOLL_TCP_HOST`, else the one that reaches the store.
fn listen_ip(local_ip: Option<IpAddr>) -> Result<IpAddr> {
    match crate::settings::text("RDCOLL_TCP_HOST")? {
        Some(h) => h.parse().map_err(|_| {
            TransportError::InvalidArgument(format!("RDCOLL_TCP_HOST={h:?} is not an IP address"))
        }),
        None => Ok(local_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))),
    }
}

/// The job's secret: from the launcher (`bootstrap::job_secret`), else from the store (a store
/// named by hand, `RDCOLL_STORE`, without `RDCOLL_JOB_SECRET`).
fn read_secret(store: &dyn Store, timeout: Duration) -> Result<[u8; 16]> {
    if let Some(s) = crate::bootstrap::job_secret()? {
        return Ok(s);
    }
    let s = store.get(SECRET_KEY, timeout)?;
    <[u8; 16]>::try_from(s.as_slice())
        .map_err(|_| TransportError::Bootstrap("the job secret in the store is malformed".into()))
}

/// Connects this rank to every other; entry `r` is the stream to rank `r` (`None` for self).
pub(crate) fn connect_mesh(
    rank: Rank,
    size: usize,
    store: &dyn Store,
    timeout: Duration,
    local_ip: Option<IpAddr>,
) -> Result<Vec<Option<TcpStream>>> {
    let secret = read_secret(store, timeout)?;
    let ip = listen_ip(local_ip)?;
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| TransportError::io(format!("listening on {ip}"), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| TransportError::io("listener address", e))?;
    store.set(&format!("tcp/{rank}"), addr.to_string().as_bytes())?;
    let deadline = Instant::now() + timeout;

    let expected_higher = size - 1 - rank as usize;
    let acceptor = std::thread::Builder::new()
        .name("rdcoll-tcp-accept".into())
        .spawn(move || accept_higher(listener, rank, size, expected_higher, &secret, deadline))
        .map_err(|e| TransportError::io("starting the accept thread", e))?;

    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    for peer in 0..rank {
        let addr = store.get(
            &format!("tcp/{peer}"),
            deadline.saturating_duration_since(Instant::now()),
        )?;
        let addr = String::from_utf8_lossy(&addr).to_string();
        streams[peer as usize] = Some(connect_lower(&addr, rank, peer, &secret, deadline)?);
    }
    let accepted = acceptor
        .join()
        .map_err(|_| TransportError::Bootstrap("the accept thread panicked".into()))??;
    for (peer, s) in accepted {
        streams[peer as usize] = Some(s);
    }
    Ok(streams)
}

fn connect_lower(
    addr: &str,
    me: Rank,
    peer: Rank,
    secret: &[u8; 16],
    deadline: Instant,
) -> Result<TcpStream> {
    let sock: SocketAddr = addr.parse().map_err(|_| {
        TransportError::Bootstrap(format!("rank {peer} published a bad address {addr:?}"))
    })?;
    let mut delay = Duration::from_millis(2);
    loop {
        let attempt = (|| -> std::io::Result<TcpStream> {
            let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(2))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
            s.write_all(&hello(me, secret))?;
            let mut ack = [0u8; 4];
            s.read_exact(&mut ack)?;
            if u32::from_le_bytes(ack) != peer {
                return Err(std::io::Error::other("the listener is a different rank"));
            }
            s.set_read_timeout(None)?;
            Ok(s)
        })();
        match attempt {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(TransportError::Bootstrap(format!(
                    "rank {me} could not connect to rank {peer} at {addr}: {e}"
                )))
            }
            Err(_) => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(100));
            }
        }
    }
}

/// Connections that may wait at once for their hello (the oldest is dropped for a newer one;
/// well below the usual 1,024 descriptors a process may hold).
const MAX_PENDING_HELLOS: usize = 256;

/// Accepts the connections of the `expected` ranks above `me`, each identified by its hello
/// (checked against the job's `secret`). Hellos are read from every connection at once
/// (`gate::Door`): a connection that sends nothing, or something else, holds up no peer;
/// before, they were read one after another, each for up to `HANDSHAKE_TIMEOUT`.
fn accept_higher(
    listener: TcpListener,
    me: Rank,
    size: usize,
    expected: usize,
    secret: &[u8; 16],
    deadline: Instant,
) -> Result<Vec<(Rank, TcpStream)>> {
    let got: RefCell<Vec<(Rank, TcpStream)>> = RefCell::new(Vec::with_capacity(expected));
    let door = Door {
        first_len: HELLO_LEN,
        per_connection: HANDSHAKE_TIMEOUT,
        max_pending: MAX_PENDING_HELLOS,
    };
    door.run(
        &listener,
        || got.borrow().len() < expected && Instant::now() < deadline,
        |start| start.iter().zip(MAGIC).all(|(&b, m)| b == m),
        |mut s, first| {
            let from = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            let checked = (|| -> std::result::Result<Rank, String> {
                let h: &[u8; HELLO_LEN] = first.try_into().map_err(|_| "a short hello")?;
                let peer = check_hello(h, secret)?;
                let seen = got.borrow().iter().any(|(r, _)| *r == peer);
                if peer <= me || peer as usize >= size || seen {
                    return Err(format!("unexpected rank {peer}"));
                }
                s.write_all(&me.to_le_bytes()).map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                Ok(peer)
            })();
            match checked {
                Ok(peer) => got.borrow_mut().push((peer, s)),
                Err(why) => tracing::warn!("rank {me}: refused a connection from {from}: {why}"),
            }
        },
    )
    .map_err(|e| TransportError::io("listener", e))?;
    let got = got.into_inner();
    if got.len() < expected {
        let have: Vec<Rank> = got.iter().map(|(r, _)| *r).collect();
        return Err(TransportError::Timeout {
            what: format!("rank {me}: connections from higher ranks (have {have:?})"),
            after: HANDSHAKE_TIMEOUT,
        });
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_without_the_secret_is_closed_and_real_peers_still_join() {
        let secret = [9u8; 16];
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        let acceptor =
            std::thread::spawn(move || accept_higher(listener, 0, 3, 2, &secret, deadline));
        // An intruder with the wrong secret: refused, nothing written back.
        let mut intruder = TcpStream::connect(&addr).unwrap();
        intruder.write_all(&hello(1, &[1u8; 16])).unwrap();
        intruder
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 4];
        assert!(
            matches!(intruder.read(&mut buf), Ok(0) | Err(_)),
            "the intruder got an answer"
        );
        // Garbage that is not even a hello.
        let mut garbage = TcpStream::connect(&addr).unwrap();
        garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        drop(garbage);
        // Connections that stay silent, or stop halfway through a hello, hold up no peer:
        // hellos are read from every connection at once, not one after another for up to the
        // handshake timeout each.
        let silent: Vec<TcpStream> = (0..20)
            .map(|_| TcpStream::connect(&addr).unwrap())
            .collect();
        let mut half = TcpStream::connect(&addr).unwrap();
        half.write_all(&hello(1, &secret)[..10]).unwrap();
        let a = connect_lower(&addr, 1, 0, &secret, deadline).unwrap();
        let b = connect_lower(&addr, 2, 0, &secret, deadline).unwrap();
        let got = acceptor.join().unwrap().unwrap();
        let ranks: Vec<Rank> = got.iter().map(|(r, _)| *r).collect();
        // (Read one after another, the 21 would have taken the acceptor past its deadline.)
        assert_eq!(ranks, vec![1, 2]);
        drop((a, b, silent, half));
    }
}
