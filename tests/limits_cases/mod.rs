//! Resource limits that must recycle or fail cleanly, never wedge a rank: communicator
//! context ids (dup / drop far past the 32,767 ids).

use rdcoll::{Comm, Error};

pub type Outcome = Result<(), String>;

fn e(err: Error) -> String {
    err.to_string()
}

/// `pairs` dup / drop pairs while one duplicated communicator stays alive throughout, and a
/// few more live at a time that ranks drop in different orders; every 1,000th communicator
/// carries a message round the ring, which must arrive on that communicator only.
pub fn dup_and_drop(world: &Comm, pairs: usize) -> Outcome {
    let (me, n) = (world.rank(), world.size() as u32);
    let keeper = world.dup().map_err(e)?;
    let mut live: Vec<Comm> = Vec::new();
    for i in 0..pairs {
        let c = world.dup().map_err(|err| format!("dup {i}: {err}"))?;
        if i % 1000 == 0 {
            let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
            let mut got = [0u64];
            c.sendrecv(&[i as u64], next, 3, &mut got, prev, 3)
                .map_err(|err| format!("dup {i}: {err}"))?;
            if got[0] != i as u64 {
                return Err(format!("dup {i}: got message {} on it", got[0]));
            }
        }
        live.push(c);
        if live.len() == 4 {
            // Each rank drops its four in its own order.
            let first = (me as usize + i) % 4;
            live.remove(first);
            live.clear();
        }
    }
    // The communicator kept throughout still works, and its id was never handed out again.
    let mut sum = [0u64];
    keeper
        .allreduce(&[1u64], &mut sum, rdcoll::Op::Sum)
        .map_err(e)?;
    if sum[0] != n as u64 {
        return Err(format!("the kept communicator's allreduce gave {}", sum[0]));
    }
    Ok(())
}
