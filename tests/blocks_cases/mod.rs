//! Cases for the block collectives (gather, scatter, allgather, alltoall and their `v` forms,
//! reduce_scatter, scan, exscan) and for split communicators, shared by the in-process and
//! the multi-process suites. Every rank computes what every other rank contributes (a function
//! of rank, index and round), so each result is checked byte for byte against a serial
//! reference on every rank.

mod communicators;
mod nonblocking_v;

pub use communicators::{nonblocking, splits};
pub use nonblocking_v::nonblocking_v;

use rdcoll::{Comm, Error, Op, Rank};

/// Rank `r`'s element `i` in round `salt`.
pub fn value(r: usize, i: usize, salt: u64) -> u32 {
    let mut h = (r as u64) << 40 ^ (i as u64) << 8 ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h ^ (h >> 32)) as u32
}

fn data(r: usize, len: usize, salt: u64) -> Vec<u32> {
    (0..len).map(|i| value(r, i, salt)).collect()
}

/// Uneven counts with zeros: rank `r`'s share of about `k` elements.
pub fn uneven(n: usize, k: usize, salt: u64) -> Vec<usize> {
    (0..n)
        .map(|r| match (r as u64 + salt) % 3 {
            0 => 0,
            1 => k,
            _ => k / 2 + r,
        })
        .collect()
}

fn e(what: &str) -> impl Fn(Error) -> String + '_ {
    move |err| format!("{what}: {err}")
}

fn same<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: element {i} is {:?}, expected {:?}",
            got[i], want[i]
        )),
    }
}

/// Every block collective at block lengths `lens` (elements of u32), every root.
pub fn every_collective(c: &Comm, lens: &[usize]) -> Result<(), String> {
    let (me, n) = (c.rank() as usize, c.size() as usize);
    for (round, &k) in lens.iter().enumerate() {
        let salt = round as u64 * 1000 + k as u64;
        let mine = data(me, k, salt);
        let everyone: Vec<u32> = (0..n).flat_map(|r| data(r, k, salt)).collect();
        // allgather and allgatherv
        let mut all = vec![0u32; n * k];
        c.allgather(&mine, &mut all).map_err(e("allgather"))?;
        same(&format!("allgather of {k}"), &all, &everyone)?;
        let counts = uneven(n, k, salt);
        let mine_v = data(me, counts[me], salt);
        let want_v: Vec<u32> = (0..n).flat_map(|r| data(r, counts[r], salt)).collect();
        let mut all_v = vec![0u32; want_v.len()];
        c.allgatherv(&mine_v, &mut all_v, &counts)
            .map_err(e("allgatherv"))?;
        same(&format!("allgatherv of {counts:?}"), &all_v, &want_v)?;
        for root in 0..n {
            let at_root = me == root;
            let rt = root as Rank;
            // gather / gatherv
            let mut got = if at_root { vec![0u32; n * k] } else { vec![] };
            c.gather(&mine, &mut got, rt).map_err(e("gather"))?;
            if at_root {
                same(&format!("gather of {k} at {root}"), &got, &everyone)?;
            }
            let mut got = if at_root {
                vec![0u32; want_v.len()]
            } else {
                vec![]
            };
            c.gatherv(&mine_v, &mut got, &counts, rt)
                .map_err(e("gatherv"))?;
            if at_root {
                same(&format!("gatherv of {counts:?} at {root}"), &got, &want_v)?;
            }
            // scatter / scatterv: the root sends what everyone's data would be.
            let src = if at_root { everyone.clone() } else { vec![] };
            let mut part = vec![0u32; k];
            c.scatter(&src, &mut part, rt).map_err(e("scatter"))?;
            same(&format!("scatter of {k} from {root}"), &part, &mine)?;
            let src = if at_root { want_v.clone() } else { vec![] };
            let mut part = vec![0u32; counts[me]];
            c.scatterv(&src, &counts, &mut part, rt)
                .map_err(e("scatterv"))?;
            same(
                &format!("scatterv of {counts:?} from {root}"),
                &part,
                &mine_v,
            )?;
        }
        // alltoall: block j of rank i is data(i * n + j).
        let send: Vec<u32> = (0..n).flat_map(|j| data(me * n + j, k, salt)).collect();
        let want: Vec<u32> = (0..n).flat_map(|i| data(i * n + me, k, salt)).collect();
        let mut recv = vec![0u32; n * k];
        c.alltoall(&send, &mut recv).map_err(e("alltoall"))?;
        same(&format!("alltoall of {k}"), &recv, &want)?;
        // alltoallv: rank i sends count(i, j) elements to rank j.
        let count = |i: usize, j: usize| (i * 7 + j * 3 + k) % (k + 2);
        let send_counts: Vec<usize> = (0..n).map(|j| count(me, j)).collect();
        let recv_counts: Vec<usize> = (0..n).map(|i| count(i, me)).collect();
        let send: Vec<u32> = (0..n)
            .flat_map(|j| data(me * n + j, count(me, j), salt))
            .collect();
        let want: Vec<u32> = (0..n)
            .flat_map(|i| data(i * n + me, count(i, me), salt))
            .collect();
        let mut recv = vec![0u32; want.len()];
        c.alltoallv(&send, &send_counts, &mut recv, &recv_counts)
            .map_err(e("alltoallv"))?;
        same(&format!("alltoallv of {send_counts:?}"), &recv, &want)?;
        reductions(c, k, salt)?;
    }
    Ok(())
}

/// reduce_scatter (block and v), scan and exscan against serial folds in rank order: wrapping
/// sums, and a non-commutative operation (composition of affine maps x -> a x + b mod 2^64).
fn reductions(c: &Comm, k: usize, salt: u64) -> Result<(), String> {
    let (me, n) = (c.rank() as usize, c.size() as usize);
    let long: Vec<Vec<u64>> = (0..n)
        .map(|r| {
            data(r, n * k, salt)
                .iter()
                .map(|&x| x as u64 * 3 + 1)
                .collect()
        })
        .collect();
    let mut block = vec![0u64; k];
    c.reduce_scatter_block(&long[me], &mut block, Op::Sum)
        .map_err(e("reduce_scatter_block"))?;
    let want: Vec<u64> = (0..k)
        .map(|i| (0..n).fold(0u64, |s, r| s.wrapping_add(long[r][me * k + i])))
        .collect();
    same(&format!("reduce_scatter_block of {k}"), &block, &want)?;
    let counts = uneven(n, k, salt);
    let total: usize = counts.iter().sum();
    let vec_of: Vec<Vec<u64>> = (0..n)
        .map(|r| data(r, total, salt).iter().map(|&x| x as u64).collect())
        .collect();
    let start: usize = counts[..me].iter().sum();
    let mut mine = vec![0u64; counts[me]];
    c.reduce_scatter(&vec_of[me], &mut mine, &counts, Op::Max)
        .map_err(e("reduce_scatter"))?;
    let want: Vec<u64> = (0..counts[me])
        .map(|i| (0..n).map(|r| vec_of[r][start + i]).max().unwrap_or(0))
        .collect();
    same(&format!("reduce_scatter of {counts:?}"), &mine, &want)?;
    // Scans of affine maps [a, b]: (f then g)(x) = g.a * (f.a x + f.b) + g.b.
    let maps: Vec<Vec<[u64; 2]>> = (0..n)
        .map(|r| {
            data(r, k, salt)
                .iter()
                .map(|&x| [x as u64 | 1, x as u64 >> 3])
                .collect()
        })
        .collect();
    let map = |r: usize| maps[r].clone();
    let compose = |f: &mut [u64; 2], g: &[u64; 2]| {
        *f = [
            g[0].wrapping_mul(f[0]),
            g[0].wrapping_mul(f[1]).wrapping_add(g[1]),
        ];
    };
    let fold = |upto: usize| -> Vec<[u64; 2]> {
        let mut acc = map(0);
        for r in 1..upto {
            for (a, b) in acc.iter_mut().zip(map(r)) {
                compose(a, &b);
            }
        }
        acc
    };
    let mut got = vec![[0u64; 2]; k];
    c.scan_with(&map(me), &mut got, compose)
        .map_err(e("scan_with"))?;
    same(&format!("scan of {k} maps"), &got, &fold(me + 1))?;
    let mut got = vec![[7u64; 2]; k];
    c.exscan_with(&map(me), &mut got, compose)
        .map_err(e("exscan_with"))?;
    let want = if me == 0 {
        vec![[7u64; 2]; k]
    } else {
        fold(me)
    };
    same(&format!("exscan of {k} maps"), &got, &want)?;
    let mut sum = vec![0u64; k];
    let mine: Vec<u64> = data(me, k, salt).iter().map(|&x| x as u64).collect();
    c.scan(&mine, &mut sum, Op::Sum).map_err(e("scan"))?;
    let mut want = vec![0u64; k];
    for r in 0..=me {
        for (w, x) in want.iter_mut().zip(data(r, k, salt)) {
            *w += x as u64;
        }
    }
    same(&format!("scan of {k}"), &sum, &want)
}

/// Allgather and alltoall of `bytes` in total per rank (large messages by rendezvous).
pub fn large(c: &Comm, bytes: usize) -> Result<(), String> {
    let (me, n) = (c.rank() as usize, c.size() as usize);
    let k = bytes / 4 / n;
    let mine = data(me, k, 77);
    let mut all = vec![0u32; n * k];
    c.allgather(&mine, &mut all).map_err(e("allgather"))?;
    let want: Vec<u32> = (0..n).flat_map(|r| data(r, k, 77)).collect();
    same("large allgather", &all, &want)?;
    let send: Vec<u32> = (0..n).flat_map(|j| data(me * n + j, k, 78)).collect();
    let want: Vec<u32> = (0..n).flat_map(|i| data(i * n + me, k, 78)).collect();
    let mut recv = vec![0u32; n * k];
    c.alltoall(&send, &mut recv).map_err(e("alltoall"))?;
    same("large alltoall", &recv, &want)
}

/// A rank whose arguments are wrong gets an error, every peer that expected a block from it a
/// `Mismatch`, nobody hangs, and the next collectives are right.
pub fn wrong_arguments(c: &Comm) -> Result<(), String> {
    let (me, n) = (c.rank() as usize, c.size() as usize);
    if n < 2 {
        return Ok(());
    }
    let last = n - 1;
    // The last rank's allgather receive buffer is one block short.
    let mine = data(me, 4, 1);
    let mut all = vec![0u32; if me == last { 4 * (n - 1) } else { 4 * n }];
    let r = c.allgather(&mine, &mut all);
    if me == last && r.is_ok() {
        return Err("an allgather with a short buffer on the last rank succeeded".into());
    }
    // The same with blocks too long for the small allgather's slots (point-to-point: the
    // others get a Mismatch from the last rank's empty blocks).
    let mine = data(me, 40_000, 1);
    let mut all = vec![
        0u32;
        if me == last {
            40_000 * (n - 1)
        } else {
            40_000 * n
        }
    ];
    if c.allgather(&mine, &mut all).is_ok() {
        return Err("a large allgather with a short buffer on the last rank succeeded".into());
    }
    // Gather at 0 where rank 1 sends a longer block than the others.
    let mine = data(me, if me == 1 { 5 } else { 4 }, 2);
    let mut got = if me == 0 { vec![0u32; 4 * n] } else { vec![] };
    let r = c.gather(&mine, &mut got, 0);
    match (me, r) {
        (0, Err(Error::Mismatch(_))) => {}
        (0, other) => return Err(format!("gather with rank 1's long block: {other:?}")),
        // Small blocks travel to every rank (the exchange): the others may see it too.
        (_, Err(Error::Mismatch(_))) => {}
        (_, Err(err)) => return Err(format!("gather, sending: {err}")),
        _ => {}
    }
    // The same with blocks past the small path's slots (point-to-point: only the root sees it).
    let mine = data(me, if me == 1 { 6000 } else { 5000 }, 2);
    let mut got = vec![0u32; if me == 0 { 5000 * n } else { 0 }];
    let checked = c.collectives_config().check_collectives;
    match (me, c.gather(&mine, &mut got, 0)) {
        (0, Err(Error::Mismatch(_))) | (1.., Ok(())) => {}
        // With RDCOLL_CHECK_COLLECTIVES every rank hears of it.
        (1.., Err(Error::Mismatch(_))) if checked => {}
        (_, other) => return Err(format!("large gather with rank 1's long block: {other:?}")),
    }
    // Scatter from 0 with a send buffer one block short: every rank fails.
    let src = if me == 0 {
        vec![1u32; 4 * (n - 1)]
    } else {
        vec![]
    };
    let mut part = [0u32; 4];
    if c.scatter(&src, &mut part, 0).is_ok() {
        return Err("a scatter from a short send buffer succeeded".into());
    }
    // Scan where the last rank's receive buffer is short: it fails; partners too.
    let mut out = vec![0u32; if me == last { 2 } else { 3 }];
    let r = c.scan(&[1u32, 2, 3], &mut out, Op::Sum);
    if me == last && r.is_ok() {
        return Err("a scan into a short buffer succeeded".into());
    }
    // A long scan where rank 1's receive buffer is short: it fails, the ranks after it get a
    // Mismatch, the ranks before it their results.
    let mine = vec![1u64; 10_000];
    let mut out = vec![0u64; if me == 1 { 9_999 } else { 10_000 }];
    match (me, c.scan(&mine, &mut out, Op::Sum)) {
        (0, Ok(())) if out[0] == 1 => {}
        (1.., Err(_)) if n <= 8 => {}
        (_, _) if n > 8 => {}
        (_, other) => return Err(format!("long scan with rank 1's short buffer: {other:?}")),
    }
    alltoallv_disagreements(c)?;
    // Afterwards everything is in step again.
    every_collective(c, &[3])
}

/// alltoallv where rank 1's count for rank 0 is not rank 0's count from rank 1, on each side
/// of the pair exchange's slot size (4 KiB): a block the sender writes into the slot and the
/// receiver expects by message, the reverse, and two of each way that differ in length. Rank
/// 0 gets a `Mismatch`, every other rank its data; then a rank whose send buffer is too short
/// refuses, and every other rank gets a `Mismatch`. Nothing is left behind for the next
/// collective (the caller runs them all afterwards).
fn alltoallv_disagreements(c: &Comm) -> Result<(), String> {
    let (me, n) = (c.rank() as usize, c.size() as usize);
    for (sent, expected) in [
        (6000, 100),
        (100, 6000),
        (100, 101),
        (6000, 7000),
        (7000, 6000),
    ] {
        let send_counts: Vec<usize> = (0..n)
            .map(|j| if me == 1 && j == 0 { sent } else { 4 })
            .collect();
        let recv_counts: Vec<usize> = (0..n)
            .map(|i| if me == 0 && i == 1 { expected } else { 4 })
            .collect();
        let send = vec![me as u8; send_counts.iter().sum()];
        let mut recv = vec![0xEEu8; recv_counts.iter().sum()];
        let what =
            format!("alltoallv where rank 1 sends {sent} bytes and rank 0 expects {expected}");
        match (
            me,
            c.alltoallv(&send, &send_counts, &mut recv, &recv_counts),
        ) {
            (0, Err(Error::Mismatch(_))) => {}
            (1.., Ok(())) => {
                let want: Vec<u8> = (0..n).flat_map(|i| [i as u8; 4]).collect();
                same(&what, &recv, &want)?;
            }
            (_, other) => return Err(format!("{what}: {other:?}")),
        }
    }
    let last = n - 1;
    let counts = vec![8usize; n];
    let send = vec![1u8; if me == last { 8 * n - 1 } else { 8 * n }];
    let mut recv = vec![0u8; 8 * n];
    match (me, c.alltoallv(&send, &counts, &mut recv, &counts)) {
        (r, Err(Error::InvalidArgument(_))) if r == last => {}
        (r, Err(Error::Mismatch(_))) if r != last => {}
        (_, other) => return Err(format!("alltoallv with a short send buffer: {other:?}")),
    }
    Ok(())
}
