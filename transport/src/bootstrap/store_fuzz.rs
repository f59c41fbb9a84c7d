//! Fuzzing the store protocol: a server fed mutated request streams never panics or hangs and
//! answers only well-formed replies; a secured server answers nothing at all to a stream that
//! does not open with its secret, so a process without the secret learns nothing.

use std::io::{Cursor, Read, Write};
use std::time::Duration;

use super::*;
use crate::fuzzing::{inputs, Rng};

/// A connection played from bytes: what the client sent, and what the server answered.
struct Played {
    input: Cursor<Vec<u8>>,
    output: Vec<u8>,
}

impl Read for Played {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Played {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const SECRET: Secret = *b"0123456789abcdef";

fn seeds() -> Vec<Vec<u8>> {
    vec![
        encode_request(OP_SET, b"rank/0", b"addr", 0, 0),
        encode_request(OP_GET, b"rank/0", b"", 0, 5),
        encode_request(OP_ADD, b"count", b"", 3, 0),
        encode_request(OP_WAIT, b"count", b"", 2, 5),
        encode_request(OP_AUTH, b"", &SECRET, 0, 0),
        encode_request(OP_AUTH, b"", b"0123456789abcdeX", 0, 0),
    ]
}

/// Checks that `out` is a sequence of whole replies; their number.
fn replies(mut out: &[u8]) -> usize {
    let mut n = 0;
    while !out.is_empty() {
        assert!(out.len() >= 5, "a cut reply");
        assert!(out[0] <= ST_BAD, "status {}", out[0]);
        let len = u32::from_le_bytes([out[1], out[2], out[3], out[4]]) as usize;
        assert!(
            len <= MAX_VALUE && 5 + len <= out.len(),
            "reply of {len} bytes"
        );
        out = &out[5 + len..];
        n += 1;
    }
    n
}

#[test]
fn mutated_request_streams_are_served_safely() {
    let seeds = seeds();
    let near = [0u64, 6, 16, MAX_KEY as u64, MAX_VALUE as u64];
    let mut rng = Rng::new(0x5704e);
    let mut table = Table::default();
    let (mut answered, mut secured_answers) = (0u64, 0u64);
    for i in 0..inputs() {
        if i % 1000 == 0 {
            table = Table::default();
        }
        // A stream of one to three requests, each mutated or not.
        let mut input = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let a = &seeds[rng.below(seeds.len() as u64) as usize];
            let b = &seeds[rng.below(seeds.len() as u64) as usize];
            match rng.below(4) {
                0 => input.extend_from_slice(a),
                _ => input.extend(rng.mutate(a, b, &near)),
            }
        }
        let mut conn = Played {
            input: Cursor::new(input.clone()),
            output: Vec::new(),
        };
        // No wait at the server: a request that would wait times out at once.
        serve_requests(&table, &mut conn, Duration::ZERO);
        answered += replies(&conn.output) as u64;

        let mut conn = Played {
            input: Cursor::new(input.clone()),
            output: Vec::new(),
        };
        let opened = authenticate(&mut conn, &SECRET);
        let holder = input.starts_with(&seeds[4]);
        assert!(opened || !holder, "the secret's holder was refused");
        if opened {
            serve_requests(&table, &mut conn, Duration::ZERO);
            secured_answers += 1;
        } else {
            assert!(conn.output.is_empty(), "a stranger was answered: {input:?}");
        }
        replies(&conn.output);
    }
    assert!(answered * 2 > inputs() && secured_answers * 100 > inputs());
}
