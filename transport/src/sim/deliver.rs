//! What a transfer does to memory when it lands, run by the scheduler while every rank's
//! thread sleeps (so no rank touches the memory meanwhile).

use super::transfer::{Transfer, What};
use super::world::World;
use crate::error::{Result, TransportError};
use crate::types::Event;

/// A get's request has reached the owner of `src`: reads what is there now (or, payload-free,
/// only checks that the range exists).
pub(super) fn read_for_get(world: &World, t: &mut Transfer) -> Result<()> {
    if world.is_dead(t.target) {
        return Err(TransportError::PeerFailed(t.target));
    }
    let payload_free = world.cfg.payload_free_above;
    let What::Get {
        src, len, bytes, ..
    } = &mut t.what
    else {
        return Ok(());
    };
    let region = world.tables[t.target as usize].lookup(src.key)?;
    if payload_free.is_some_and(|limit| *len > limit) {
        return region.check_range(src.offset, *len);
    }
    let mut buf = vec![0u8; *len];
    region.read(src.offset, &mut buf)?;
    *bytes = Some(buf);
    Ok(())
}

/// `t` has arrived: writes its bytes where they go and says what its receiver is told, if
/// anything. A message or put to a rank that has failed meanwhile is lost (`Ok(None)` for a
/// message; `PeerFailed` for a put's initiator).
pub(super) fn land(world: &World, t: &mut Transfer) -> Result<Option<Event>> {
    let (from, to) = t.data_path();
    match &mut t.what {
        // The scheduler tells the target itself (`World::tell_failed`).
        What::Farewell => Ok(None),
        What::Message(data) => Ok((!world.is_dead(to)).then(|| Event::Message {
            src: from,
            data: std::mem::take(data),
        })),
        What::Put {
            bytes,
            len,
            dst,
            imm,
            flag,
            ..
        } => {
            if world.is_dead(to) {
                return Err(TransportError::PeerFailed(to));
            }
            let region = world.tables[to as usize].lookup(dst.key)?;
            let span = len.saturating_add(usize::from(flag.is_some()));
            region.check_range(dst.offset, span)?;
            if let Some(bytes) = bytes {
                region.write(dst.offset, bytes)?;
            }
            if let Some(v) = flag {
                region.store_flag(dst.offset + *len, *v)?;
            }
            Ok(imm.map(|imm| Event::Immediate { src: from, imm }))
        }
        What::Get {
            dst_key,
            dst_offset,
            len,
            bytes,
            ..
        } => {
            let region = world.tables[to as usize].lookup(*dst_key)?;
            region.check_range(*dst_offset, *len)?;
            if let Some(bytes) = bytes {
                region.write(*dst_offset, bytes)?;
            }
            Ok(None)
        }
    }
}
