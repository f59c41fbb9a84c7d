//! The region table and handles: keys, ownership, deregistration, range checks.

use super::*;

fn alloc(table: &Arc<RegionTable>, len: usize) -> Region {
    table
        .insert(|key, p| Region::alloc_owned(0, key, len, p))
        .unwrap()
}

#[test]
fn a_peers_lookup_does_not_keep_a_dropped_region_reachable() {
    let table = RegionTable::new(0, 4);
    let r = alloc(&table, 64);
    let key = r.key();
    let held_by_peer = table.lookup(key).unwrap();
    let owner_clone = r.clone();
    drop(r);
    assert!(table.lookup(key).is_ok(), "the owner still holds a clone");
    drop(owner_clone);
    assert!(
        table.lookup(key).is_err(),
        "a peer's copy in progress kept the key alive"
    );
    // The peer's copy may still finish: the memory lives until its handle goes.
    held_by_peer.write(0, &[1, 2, 3]).unwrap();
}

#[test]
fn a_memory_clone_keeps_the_bytes_not_the_key() {
    let table = RegionTable::new(0, 4);
    let r = alloc(&table, 64);
    r.write(0, &[5; 8]).unwrap();
    let key = r.key();
    let bytes = r.clone_memory();
    drop(r);
    assert!(
        table.lookup(key).is_err(),
        "only the owner's handles keep the key"
    );
    let mut out = [0u8; 8];
    bytes.read(0, &mut out).unwrap();
    assert_eq!(out, [5; 8]);
    // Caller memory: an ordinary clone, which keeps it registered.
    let mut mem = vec![0u8; 64];
    let ptr = NonNull::new(mem.as_mut_ptr()).unwrap();
    let ext = table
        .insert(|key, p| Ok(Region::from_raw(0, key, ptr, 64, Backing::External, p)))
        .unwrap();
    let held = ext.clone_memory();
    drop(ext);
    assert!(table.lookup(held.key()).is_ok());
    held.write(0, &[1]).unwrap();
    drop(held);
    assert_eq!(mem[0], 1);
}

#[test]
fn stale_key_is_rejected_after_drop() {
    let table = RegionTable::new(0, 4);
    let r = alloc(&table, 16);
    let key = r.key();
    assert!(table.lookup(key).is_ok());
    drop(r);
    assert_eq!(
        table.lookup(key).unwrap_err(),
        TransportError::BadKey {
            rank: 0,
            key: key.0
        }
    );
    let r2 = alloc(&table, 16);
    assert_eq!(r2.key().index(), key.index());
    assert_ne!(r2.key(), key);
    assert!(table.lookup(key).is_err());
    assert_eq!(table.live(), 1);
}

#[test]
fn dropping_the_last_handle_to_caller_memory_waits_for_copies_inside_it() {
    let table = RegionTable::new(0, 4);
    let mut mem = vec![0u8; 64];
    let ptr = NonNull::new(mem.as_mut_ptr()).unwrap();
    let r = table
        .insert(|key, p| Ok(Region::from_raw(0, key, ptr, 64, Backing::External, p)))
        .unwrap();
    let peer = table.lookup(r.key()).unwrap();
    let (inside, started) = std::sync::mpsc::channel();
    let copier = std::thread::spawn(move || {
        peer.with_range(0, 64, |p| {
            inside.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
            // SAFETY: 64 bytes of `mem`, held alive by the range.
            unsafe { std::ptr::write_bytes(p, 1, 64) };
        })
        .unwrap();
        peer
    });
    started.recv().unwrap();
    drop(r);
    // The copy ended before the drop returned: its bytes are all there.
    assert!(mem.iter().all(|&b| b == 1));
    let peer = copier.join().unwrap();
    assert!(peer.with_range(0, 1, |_| ()).is_err());
    assert!(table.lookup(peer.key()).is_err());
}

#[test]
fn deregistering_caller_memory_waits_for_a_hold_on_it() {
    let table = RegionTable::new(0, 4);
    let mut mem = vec![7u8; 64];
    let ptr = NonNull::new(mem.as_mut_ptr()).unwrap();
    let r = table
        .insert(|key, p| Ok(Region::from_raw(0, key, ptr, 64, Backing::External, p)))
        .unwrap();
    assert!(r.hold(32, 33).is_err(), "the range is checked");
    let held = r.hold(16, 32).unwrap();
    assert_eq!(held.len(), 32);
    let (done_tx, done) = std::sync::mpsc::channel();
    let owner = std::thread::spawn(move || {
        r.deregister();
        done_tx.send(()).unwrap();
        r
    });
    // The hold outlives any scheduling delay of the owner's thread: its deregistration waits.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(done.try_recv().is_err(), "deregistered under a hold");
    // SAFETY: 32 bytes inside `mem`, held alive by the hold.
    let first = unsafe { *held.as_ptr() };
    assert_eq!(first, 7);
    drop(held);
    done.recv().unwrap();
    let r = owner.join().unwrap();
    assert!(r.hold(0, 1).is_err(), "no hold on deregistered memory");
    drop(mem);
}

#[test]
fn dropping_the_owners_last_handle_waits_for_a_hold() {
    let table = RegionTable::new(0, 4);
    let mut mem = vec![3u8; 64];
    let ptr = NonNull::new(mem.as_mut_ptr()).unwrap();
    let r = table
        .insert(|key, p| Ok(Region::from_raw(0, key, ptr, 64, Backing::External, p)))
        .unwrap();
    let key = r.key();
    let held = r.hold(0, 64).unwrap();
    let (done_tx, done) = std::sync::mpsc::channel();
    let owner = std::thread::spawn(move || {
        // The caller may free the memory once this returns (`register_memory`'s contract).
        drop(r);
        done_tx.send(()).unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        done.try_recv().is_err(),
        "the owner's drop returned under a hold"
    );
    drop(held);
    done.recv().unwrap();
    owner.join().unwrap();
    assert!(
        table.lookup(key).is_err(),
        "deregistered by the owner's drop"
    );
    drop(mem);
}

#[test]
fn a_hold_keeps_fabric_memory_until_it_ends() {
    let table = RegionTable::new(0, 4);
    let r = alloc(&table, 16);
    r.write(0, &[9; 16]).unwrap();
    let held = r.hold(8, 8).unwrap();
    drop(r);
    // SAFETY: 8 bytes of the region, whose memory the hold keeps.
    assert_eq!(unsafe { *held.as_ptr() }, 9);
}

#[test]
fn deregister_blocks_peer_access() {
    let table = RegionTable::new(0, 4);
    let r = alloc(&table, 16);
    r.deregister();
    assert!(table.lookup(r.key()).is_err());
    assert!(r.write(0, &[1]).is_err());
}

#[test]
fn ranges_are_checked() {
    let table = RegionTable::new(0, 4);
    let r = alloc(&table, 16);
    r.write(8, &[7; 8]).unwrap();
    assert!(matches!(
        r.write(9, &[7; 8]),
        Err(TransportError::OutOfRange { .. })
    ));
    assert!(r.read(usize::MAX, &mut [0; 2]).is_err());
    let mut out = [0u8; 8];
    r.read(8, &mut out).unwrap();
    assert_eq!(out, [7; 8]);
    assert!(r.atomic_u64(4).is_err());
    r.atomic_u64(8).unwrap().store(5, Ordering::Release);
}

#[test]
fn slot_limit_is_an_error() {
    let table = RegionTable::new(0, 1);
    let _a = alloc(&table, 1);
    assert!(matches!(
        table.insert(|key, p| Region::alloc_owned(0, key, 1, p)),
        Err(TransportError::OutOfResources { .. })
    ));
}
