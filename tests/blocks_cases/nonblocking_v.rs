//! The nonblocking `v` forms (igatherv, iscatterv, iallgatherv, ialltoallv, ireduce_scatter):
//! uneven and zero counts, every root, all five in flight at once beside a point-to-point
//! exchange, each checked against a serial reference; and the nonblocking reductions with an
//! operation of the caller's (`iallreduce_with`, `ireduce_with`, `iscan_with`, `iexscan_with`).

use rdcoll::{Comm, Op, Rank};

use super::{e, same, value};

/// Elements rank `r` has in round `round`: zero for some ranks, uneven for the others.
fn count(r: usize, round: usize) -> usize {
    match (r + round) % 4 {
        0 => 0,
        k => k * 3 + round,
    }
}

/// Rank `r`'s element `i` as a `u64`.
fn v(r: usize, i: usize, salt: u64) -> u64 {
    value(r, i, salt) as u64
}

/// Runs the five `v` forms at once for every root, twice with other counts.
pub fn nonblocking_v(world: &Comm) -> Result<(), String> {
    let (me, n) = (world.rank() as usize, world.size() as usize);
    for round in 0..2 {
        let counts: Vec<usize> = (0..n).map(|r| count(r, round)).collect();
        let total: usize = counts.iter().sum();
        let offset = |r: usize| counts[..r].iter().sum::<usize>();
        for root in 0..n {
            let salt = (round * 100 + root) as u64;
            let mine: Vec<u64> = (0..counts[me]).map(|i| v(me, i, salt)).collect();
            // The root scatters blocks of `counts`; rank j's block is v(100 + j, ..).
            let spread: Vec<u64> = (0..n)
                .flat_map(|j| (0..counts[j]).map(move |i| v(100 + j, i, salt)))
                .collect();
            // alltoallv: to rank j, (me + j) % 3 elements of v(me * 64 + j, ..).
            let to = |s: usize, j: usize| (s + j + round) % 3;
            let send_counts: Vec<usize> = (0..n).map(|j| to(me, j)).collect();
            let recv_counts: Vec<usize> = (0..n).map(|s| to(s, me)).collect();
            let outgoing: Vec<u64> = (0..n)
                .flat_map(|j| (0..to(me, j)).map(move |i| v(me * 64 + j, i, salt)))
                .collect();
            // reduce_scatter: element k of every rank's input is v(rank, k).
            let contribution: Vec<u64> = (0..total).map(|k| v(me, k, salt)).collect();
            let (mut gathered, mut scattered) = (vec![0u64; total], vec![0u64; counts[me]]);
            let mut all = vec![0u64; total];
            let mut incoming = vec![0u64; recv_counts.iter().sum()];
            let mut reduced = vec![0u64; counts[me]];
            let (out, mut back) = ([me as u64 + salt], [0u64]);
            let (right, left) = (((me + 1) % n) as Rank, ((me + n - 1) % n) as Rank);
            world.scope(|s| -> Result<(), String> {
                let at_root = me == root;
                let root = root as Rank;
                let recv = s.irecv(&mut back, left, 3).map_err(e("irecv"))?;
                let reqs = [
                    s.igatherv(&mine, &mut gathered, &counts, root)
                        .map_err(e("igatherv"))?,
                    s.iscatterv(
                        if at_root { &spread } else { &[] },
                        &counts,
                        &mut scattered,
                        root,
                    )
                    .map_err(e("iscatterv"))?,
                    s.iallgatherv(&mine, &mut all, &counts)
                        .map_err(e("iallgatherv"))?,
                    s.ialltoallv(&outgoing, &send_counts, &mut incoming, &recv_counts)
                        .map_err(e("ialltoallv"))?,
                    s.ireduce_scatter(&contribution, &mut reduced, &counts, Op::Sum)
                        .map_err(e("ireduce_scatter"))?,
                ];
                s.isend(&out, right, 3)
                    .map_err(e("isend"))?
                    .wait()
                    .map_err(e("isend wait"))?;
                for r in reqs.into_iter().rev() {
                    r.wait().map_err(e("wait"))?;
                }
                recv.wait().map(drop).map_err(e("irecv wait"))
            })?;
            let everyone: Vec<u64> = (0..n)
                .flat_map(|r| (0..counts[r]).map(move |i| v(r, i, salt)))
                .collect();
            if me == root {
                same("igatherv", &gathered, &everyone)?;
            }
            same("iallgatherv", &all, &everyone)?;
            let want: Vec<u64> = (0..counts[me]).map(|i| v(100 + me, i, salt)).collect();
            same("iscatterv", &scattered, &want)?;
            let want: Vec<u64> = (0..n)
                .flat_map(|s| (0..to(s, me)).map(move |i| v(s * 64 + me, i, salt)))
                .collect();
            same("ialltoallv", &incoming, &want)?;
            let want: Vec<u64> = (0..counts[me])
                .map(|i| (0..n).map(|r| v(r, offset(me) + i, salt)).sum())
                .collect();
            same("ireduce_scatter", &reduced, &want)?;
            if back[0] != left as u64 + salt {
                return Err(format!("the exchange beside them got {back:?}"));
            }
        }
    }
    with_operations(world)
}

/// The `_with` forms with two operations: a commutative one (wrapping sum) and one that is
/// associative but not commutative (the lower ranks' value wins: `acc` holds them), which any
/// order but rank order would get wrong.
fn with_operations(world: &Comm) -> Result<(), String> {
    let (me, n) = (world.rank() as usize, world.size() as usize);
    let mine: Vec<u64> = (0..7).map(|i| v(me, i, 7)).collect();
    let first_wins = |_: &mut u64, _: &u64| {};
    let sum = |a: &mut u64, b: &u64| *a = a.wrapping_add(*b);
    for root in 0..n as Rank {
        let (mut all, mut red, mut sc, mut ex) = ([0u64; 7], [0u64; 7], [0u64; 7], [9u64; 7]);
        world.scope(|s| -> Result<(), String> {
            let reqs = [
                s.iallreduce_with(&mine, &mut all, sum)
                    .map_err(e("iallreduce_with"))?,
                s.ireduce_with(&mine, &mut red, first_wins, root)
                    .map_err(e("ireduce_with"))?,
                s.iscan_with(&mine, &mut sc, first_wins)
                    .map_err(e("iscan_with"))?,
                s.iexscan_with(&mine, &mut ex, sum)
                    .map_err(e("iexscan_with"))?,
            ];
            for r in reqs {
                r.wait().map_err(e("wait"))?;
            }
            Ok(())
        })?;
        let total = |ranks: std::ops::Range<usize>| -> Vec<u64> {
            (0..7)
                .map(|i| ranks.clone().fold(0u64, |a, r| a.wrapping_add(v(r, i, 7))))
                .collect()
        };
        let rank0: Vec<u64> = (0..7).map(|i| v(0, i, 7)).collect();
        same("iallreduce_with", &all, &total(0..n))?;
        if me == root as usize {
            same("ireduce_with", &red, &rank0)?;
        }
        same("iscan_with", &sc, &rank0)?;
        if me > 0 {
            same("iexscan_with", &ex, &total(0..me))?;
        } else {
            same("iexscan_with on rank 0", &ex, &[9; 7])?;
        }
    }
    Ok(())
}
