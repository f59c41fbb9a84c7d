//! Fuzzing what a rank reads from its shared-memory rings, which any process of the job can
//! write: the ring's record framing (lengths, kinds, wrap fillers, sequence words in any
//! state), and every record kind's fixed header as the target's service reads it (keys,
//! offsets, lengths, addresses and tails at their edges). Nothing panics or hangs, no payload
//! is read outside the ring, and no byte outside the bounds of the region a record names is
//! written (canaries around it).

use std::sync::atomic::AtomicU64;

use super::records::*;
use super::ring::{Consumer, Producer};
use super::ShmFabric;
use crate::fuzzing::{inputs, Rng};
use crate::{Fabric, FabricConfig};

const CAP: usize = 4096;

#[repr(align(64))]
struct RingMem([u8; CAP]);

#[test]
fn ring_framing_in_any_state_is_read_safely() {
    let mut rng = Rng::new(0x54e9);
    let mut mem = Box::new(RingMem([0; CAP]));
    let base = mem.0.as_ptr() as usize;
    let head = AtomicU64::new(0);
    let (mut producer, mut consumer) = (Producer::default(), Consumer::default());
    let mut popped = 0u64;
    for _ in 0..inputs() {
        // Some well-formed records, then damage: a header field, a sequence word or a byte.
        for _ in 0..rng.below(4) {
            let body = vec![rng.next_u64() as u8; rng.below(300) as usize];
            let kind = rng.below(12) as u32;
            // SAFETY: `mem` is a live, 64-aligned ring of CAP bytes written only here.
            if !unsafe { producer.try_push(mem.0.as_mut_ptr(), CAP, &head, kind, &[&body]) } {
                // Full: damage stopped the consumer short of the records. A clean ring.
                *mem = RingMem([0; CAP]);
                head.store(0, std::sync::atomic::Ordering::Relaxed);
                (producer, consumer) = (Producer::default(), Consumer::default());
            }
        }
        let line = 64 * rng.below((CAP / 64) as u64) as usize;
        match rng.below(4) {
            0 => {
                let len = rng.edge(&[48, CAP as u64, 4080]) as u32;
                mem.0[line + 8..line + 12].copy_from_slice(&len.to_le_bytes());
            }
            1 => {
                let kind = [u32::MAX, K_MSG, K_DONE, rng.next_u64() as u32][rng.below(4) as usize];
                mem.0[line + 12..line + 16].copy_from_slice(&kind.to_le_bytes());
            }
            2 => {
                // A sequence word that claims the record the consumer expects next.
                let seq = head.load(std::sync::atomic::Ordering::Relaxed) + 1 + rng.below(2) * 64;
                mem.0[line..line + 8].copy_from_slice(&seq.to_le_bytes());
            }
            _ => {
                let at = rng.below(CAP as u64) as usize;
                mem.0[at] = rng.next_u64() as u8;
            }
        }
        for _ in 0..2 * CAP / 64 {
            // SAFETY: as above; this is the ring's only consumer.
            let r = unsafe {
                consumer.try_pop(mem.0.as_mut_ptr(), CAP, &head, |_, p: &[u8]| {
                    let at = p.as_ptr() as usize;
                    assert!(at >= base && at + p.len() <= base + CAP, "payload outside");
                })
            };
            match r {
                Ok(Some(())) => popped += 1,
                Ok(None) => break,
                Err(_) => {
                    // The peer would be marked failed; start a clean ring.
                    *mem = RingMem([0; CAP]);
                    head.store(0, std::sync::atomic::Ordering::Relaxed);
                    (producer, consumer) = (Producer::default(), Consumer::default());
                    break;
                }
            }
        }
    }
    assert!(popped > inputs(), "{popped} records read");
}

/// Bytes of the target's region, and of the canaries around it.
const REGION: usize = 8192;
const CANARY: usize = 4096;
const CANARY_BYTE: u8 = 0xA5;

#[test]
fn every_record_kind_with_edge_values_is_served_safely() {
    let job = ShmFabric::job_in_process(2, &FabricConfig::default()).expect("shm job");
    let (initiator, target) = (&job[0], &job[1]);
    let mut memory = vec![CANARY_BYTE; CANARY + REGION + CANARY];
    // SAFETY: the middle of `memory`, alive and otherwise untouched until it is deregistered
    // below; the canaries around it are only read.
    let region = unsafe { target.register_memory(memory.as_mut_ptr().add(CANARY), REGION) }
        .expect("register");
    let source = vec![0x3Cu8; 2 * REGION];
    let own = initiator.alloc_region(REGION).expect("initiator region");
    let (key, addr) = (region.key().0, source.as_ptr() as u64);
    let near = [
        key,
        own.key().0,
        REGION as u64,
        addr,
        source.len() as u64,
        64,
        4096,
    ];
    let kinds = [
        K_MSG,
        K_IMM,
        K_PUT_PULL,
        K_PUT_CHUNK,
        K_GET_REQ,
        K_GET_CHUNK,
        K_DONE,
        K_PUT_SPLIT,
        K_PUSHED,
        0,
        99,
    ];
    let mut rng = Rng::new(0x02ec_0bd5);
    for i in 0..inputs() {
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let record = if rng.below(2) == 0 {
            // A plausible record of its kind, then mutated.
            let plausible = plausible(&mut rng, kind, key, addr);
            let other = plausible.clone();
            rng.mutate(&plausible, &other, &near)
        } else {
            let mut words = Vec::new();
            for _ in 0..1 + rng.below(9) {
                words.extend_from_slice(&rng.edge(&near).to_le_bytes());
            }
            words.extend((0..rng.below(200)).map(|_| rng.next_u64() as u8));
            words
        };
        target_record(initiator, kind, &record);
        // Both ranks take what arrived (replies go back to the initiator).
        let _ = target.poll();
        let _ = initiator.poll();
        if i % 64 == 0 {
            while matches!(target.poll(), Ok(Some(_))) || matches!(initiator.poll(), Ok(Some(_))) {}
        }
    }
    while matches!(target.poll(), Ok(Some(_))) || matches!(initiator.poll(), Ok(Some(_))) {}
    region.deregister();
    let outside = memory[..CANARY]
        .iter()
        .chain(&memory[CANARY + REGION..])
        .position(|&b| b != CANARY_BYTE);
    assert_eq!(outside, None, "a byte outside the region was written");
    assert!(source.iter().all(|&b| b == 0x3C), "a pull wrote its source");
    let landed = memory[CANARY..CANARY + REGION]
        .iter()
        .filter(|&&b| b != CANARY_BYTE);
    assert!(
        landed.count() > REGION / 2,
        "few puts landed: the fuzz missed the region"
    );
    assert!(
        !target.is_failed(0),
        "the initiator's records were taken as corrupt"
    );
}

/// A well-formed record of `kind` aimed at the target's region `key`, pulling from `addr`.
fn plausible(rng: &mut Rng, kind: u32, key: u64, addr: u64) -> Vec<u8> {
    let op = rng.below(8);
    let len = rng.below(REGION as u64 / 2);
    let off = rng.below(REGION as u64 / 2);
    let tail = [[0, 0], [1, rng.next_u64()], [2, rng.below(256)]][rng.below(3) as usize];
    let data: Vec<u8> = (0..rng.below(256)).map(|_| rng.next_u64() as u8).collect();
    let n = data.len() as u64;
    let mut record = match kind {
        K_IMM => header([rng.next_u64()]),
        K_PUT_PULL => header([op, key, off, len, addr, tail[0], tail[1]]),
        K_PUT_CHUNK => header([op, key, off, n + rng.below(2) * 64, 0, tail[0], tail[1]]),
        K_GET_REQ => header([op, key, off, len]),
        K_GET_CHUNK => header([op, 0]),
        K_DONE => header([op, rng.below(4), REGION as u64]),
        K_PUT_SPLIT => header([op, key, off, len, addr, tail[0], tail[1], len / 2]),
        K_PUSHED => header([op, rng.below(2)]),
        _ => Vec::new(),
    };
    if matches!(kind, K_MSG | K_PUT_CHUNK | K_GET_CHUNK) {
        record.extend_from_slice(&data);
    }
    record
}

/// Sends a record of `kind` from `from` to rank 1, as a misbehaving process of the job could.
fn target_record(from: &ShmFabric, kind: u32, record: &[u8]) {
    from.inner
        .send_record(1, kind, &[record])
        .expect("the ring takes the record");
}
