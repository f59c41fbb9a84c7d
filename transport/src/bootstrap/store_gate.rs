//! The secured store's door ([`crate::gate::Door`]): a connection's first request must be the
//! `AUTH` carrying the job's secret. The accept thread reads every newcomer's first request
//! itself, so a connection costs a thread only once it has authenticated; one that sends
//! anything else is closed at its first byte that cannot belong to that `AUTH`, one that sends
//! nothing after [`AUTH_DEADLINE`], and at most [`MAX_PENDING`] wait at a time. Before, every
//! connection had a thread of its own for up to 10 s: 2,000 idle connections, 2,000 threads.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::tcp_store::{same_secret, Secret, OP_AUTH, ST_OK};
use crate::gate::Door;

/// Bytes of the `AUTH` request a member sends: op, an empty key, the 16-byte secret, `arg`
/// and `timeout_ms` (the store's wire format).
pub(super) const AUTH_LEN: usize = 1 + 4 + 4 + 16 + 8 + 8;
/// Connections that may wait at once for their `AUTH` (well below the usual 1,024
/// descriptors a process may hold).
const MAX_PENDING: usize = 256;
/// How long a connection may take to send its `AUTH`.
const AUTH_DEADLINE: Duration = Duration::from_secs(10);

/// Whether `req` is the `AUTH` request carrying `secret`.
pub(super) fn auth_request_ok(req: &[u8], secret: &Secret) -> bool {
    req.len() == AUTH_LEN && could_be_auth(req) && same_secret(&req[9..25], secret)
}

/// Whether `start` (the first bytes of a connection) can still be the start of an `AUTH`
/// request: op `AUTH`, an empty key, a 16-byte value.
fn could_be_auth(start: &[u8]) -> bool {
    let mut want = [0u8; 9];
    want[0] = OP_AUTH;
    want[5] = 16;
    start.iter().zip(want).all(|(&b, w)| b == w)
}

/// The reply to an accepted `AUTH`.
pub(super) const AUTH_REPLY: [u8; 5] = [ST_OK, 0, 0, 0, 0];

/// Accepts connections on `listener` until `stop`, and hands each one that presents `secret`
/// (answered) to `admit`.
pub(super) fn run(
    listener: TcpListener,
    stop: &AtomicBool,
    secret: Secret,
    admit: impl Fn(TcpStream),
) {
    let door = Door {
        first_len: AUTH_LEN,
        per_connection: AUTH_DEADLINE,
        max_pending: MAX_PENDING,
    };
    let _ = door.run(
        &listener,
        || !stop.load(Ordering::Acquire),
        could_be_auth,
        |mut stream, first| {
            if auth_request_ok(first, &secret) && stream.write_all(&AUTH_REPLY).is_ok() {
                admit(stream);
            }
        },
    );
}
