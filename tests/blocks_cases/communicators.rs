//! Split communicators and nonblocking collectives, checked against the blocking results.

use rdcoll::{Comm, Op, Rank, Source, Tag};

use super::{e, every_collective, same, value};

/// Split communicators: colours and keys, their own ranks and contexts, point-to-point with
/// statuses in their ranks, collectives on them, ranks in two at once with collectives
/// interleaved, nested splits, subsets, communicators of one, and drops in any order.
pub fn splits(world: &Comm) -> Result<(), String> {
    let (me, n) = (world.rank() as usize, world.size() as usize);
    // Colour rank % 3, ranked in reverse.
    let color = (me % 3) as u32;
    let a = world
        .split(Some(color), -(me as i32))
        .map_err(e("split"))?
        .ok_or("split gave no communicator")?;
    let members: Vec<usize> = (0..n).rev().filter(|r| r % 3 == me % 3).collect();
    if a.size() as usize != members.len() || members[a.rank() as usize] != me {
        return Err(format!(
            "split: rank {} of {}, expected {} of {members:?}",
            a.rank(),
            a.size(),
            members.iter().position(|&r| r == me).unwrap_or(99)
        ));
    }
    // Point-to-point on the split: a ring, received from any source, its status in a's ranks.
    let (ar, an) = (a.rank(), a.size() as Rank);
    world
        .send(&[999u32], me as Rank, 5)
        .map_err(e("send to self"))?;
    if an > 1 {
        a.send(&[members[ar as usize] as u32], (ar + 1) % an, 5)
            .map_err(e("split send"))?;
        let mut got = [0u32];
        let st = a
            .recv(&mut got, Source::Any, Tag::Any)
            .map_err(e("split recv"))?;
        let from = (ar + an - 1) % an;
        if st.source != from || got[0] as usize != members[from as usize] || st.tag != 5 {
            return Err(format!("split recv: {st:?} {got:?}, expected from {from}"));
        }
    }
    // The world's message with the same tag stays for the world.
    let mut got = [0u32];
    world
        .recv(&mut got, me as Rank, 5)
        .map_err(e("world recv"))?;
    if got[0] != 999 {
        return Err(format!("world got {got:?}"));
    }
    // Collectives on the split.
    let mut sum = [0u64];
    a.allreduce(&[me as u64], &mut sum, Op::Sum)
        .map_err(e("split allreduce"))?;
    if sum[0] != members.iter().map(|&r| r as u64).sum::<u64>() {
        return Err(format!("split allreduce: {sum:?}"));
    }
    let mut v = if ar == 0 { [me as u32; 3] } else { [0; 3] };
    a.bcast(&mut v, 0).map_err(e("split bcast"))?;
    if v != [members[0] as u32; 3] {
        return Err(format!("split bcast: {v:?}"));
    }
    a.barrier().map_err(e("split barrier"))?;
    // The large paths on the split: a 1 MiB broadcast (shared staging on one host, RDMC
    // elsewhere) and a 64 Ki-element allreduce (reduce-scatter + allgather).
    let mut big = if ar == 0 {
        vec![7u8; 1 << 20]
    } else {
        vec![0u8; 1 << 20]
    };
    a.bcast(&mut big, 0).map_err(e("split large bcast"))?;
    if big.iter().any(|&b| b != 7) {
        return Err("split large bcast: wrong bytes".into());
    }
    let mut total = vec![0u64; 1 << 16];
    a.allreduce(&vec![me as u64; 1 << 16], &mut total, Op::Sum)
        .map_err(e("split large allreduce"))?;
    let want: u64 = members.iter().map(|&r| r as u64).sum();
    if total.iter().any(|&t| t != want) {
        return Err(format!(
            "split large allreduce: {} expected {want}",
            total[0]
        ));
    }
    every_collective(&a, &[0, 5])?;
    // A second split at once: halves. Collectives on both interleave.
    let b = world
        .split(Some((me < n / 2) as u32), me as i32)
        .map_err(e("second split"))?
        .ok_or("second split gave none")?;
    for round in 0..20u64 {
        let mut x = [0u64];
        a.allreduce(&[round + me as u64], &mut x, Op::Max)
            .map_err(e("a"))?;
        let mut y = vec![0u32; b.size() as usize];
        b.allgather(&[me as u32 + round as u32], &mut y)
            .map_err(e("b"))?;
        let half: Vec<u32> = (0..n)
            .filter(|&r| (r < n / 2) == (me < n / 2))
            .map(|r| r as u32 + round as u32)
            .collect();
        let want_x = round + *members.iter().max().unwrap_or(&0) as u64;
        if x[0] != want_x || y != half {
            return Err(format!("interleaved round {round}: {x:?} {y:?}"));
        }
    }
    // Nested: a split of a, and a duplicate of it.
    let inner = a
        .split(Some(ar % 2), 0)
        .map_err(e("nested split"))?
        .ok_or("nested split gave none")?;
    let dup = inner.dup().map_err(e("dup of a split"))?;
    let mut s = [0u32];
    dup.allreduce(&[1u32], &mut s, Op::Sum)
        .map_err(e("dup allreduce"))?;
    let want = (0..an).filter(|r| r % 2 == ar % 2).count() as u32;
    if s[0] != want || inner.size() != want {
        return Err(format!(
            "nested: {s:?}, size {}, expected {want}",
            inner.size()
        ));
    }
    // Ranks that join none, and a communicator of one.
    let none = world
        .split((me == 0).then_some(1), 0)
        .map_err(e("split of one"))?;
    match (me, &none) {
        (0, Some(one)) => {
            if one.size() != 1 || one.rank() != 0 {
                return Err("a communicator of one has another size".into());
            }
            every_collective(one, &[0, 3])?;
            one.barrier().map_err(e("barrier of one"))?;
        }
        (0, None) | (1.., Some(_)) => return Err("split of one: wrong membership".into()),
        _ => {}
    }
    // Subset: the even ranks, highest first.
    let list: Vec<Rank> = (0..n as Rank).rev().filter(|r| r % 2 == 0).collect();
    let sub = world.subset(&list).map_err(e("subset"))?;
    match (&sub, list.iter().position(|&r| r as usize == me)) {
        (Some(s), Some(p)) if s.rank() as usize == p && s.size() as usize == list.len() => {
            let mut g = vec![0u32; s.size() as usize];
            s.allgather(&[me as u32], &mut g)
                .map_err(e("subset allgather"))?;
            if g != list {
                return Err(format!("subset allgather {g:?}, expected {list:?}"));
            }
        }
        (None, None) => {}
        _ => return Err("subset: wrong membership".into()),
    }
    // Drops in an order that differs between ranks, then new splits still agree.
    if me % 2 == 0 {
        drop(dup);
        drop(inner);
        drop(a);
    } else {
        drop(a);
        drop(inner);
        drop(dup);
    }
    drop(b);
    for round in 0..50 {
        let c = world
            .split(Some((me + round) as u32 % 2), 0)
            .map_err(e("repeated split"))?
            .ok_or("repeated split gave none")?;
        let mut t = [0u32];
        c.allreduce(&[1u32], &mut t, Op::Sum)
            .map_err(e("repeated"))?;
        if t[0] as usize != (c.size() as usize) {
            return Err(format!("repeated split {round}: {t:?}"));
        }
    }
    Ok(())
}

/// Nonblocking collectives: several in flight at once, interleaved with point-to-point
/// messages and with blocking collectives, waited for in another order than started, and on
/// a split communicator.
pub fn nonblocking(world: &Comm) -> Result<(), String> {
    let (me, n) = (world.rank() as usize, world.size() as usize);
    let right = ((me + 1) % n) as Rank;
    let left = ((me + n - 1) % n) as Rank;
    for round in 0..20u64 {
        let k = [1usize, 100, 30_000][round as usize % 3];
        let mine: Vec<u64> = (0..k)
            .map(|i| (me as u64 + 1) * (i as u64 + round))
            .collect();
        let mut sum = vec![0u64; k];
        let mut bytes = if me == 0 {
            vec![round as u8; k]
        } else {
            vec![0u8; k]
        };
        let gathered_in = [me as u32 * 3 + round as u32];
        let mut gathered = vec![0u32; n];
        let spread: Vec<u32> = (0..n).map(|j| (me * 100 + j) as u32).collect();
        let mut swapped = vec![0u32; n];
        let mut ring = [0u64];
        let out = [me as u64 + round];
        world.scope(|s| -> Result<(), String> {
            let a = s
                .iallreduce(&mine, &mut sum, Op::Sum)
                .map_err(e("iallreduce"))?;
            let recv = s.irecv(&mut ring, left, 9).map_err(e("irecv"))?;
            let b = s.ibcast(&mut bytes, 0).map_err(e("ibcast"))?;
            s.isend(&out, right, 9)
                .map_err(e("isend"))?
                .wait()
                .map_err(e("isend wait"))?;
            let g = s
                .iallgather(&gathered_in, &mut gathered)
                .map_err(e("iallgather"))?;
            let t = s.ialltoall(&spread, &mut swapped).map_err(e("ialltoall"))?;
            let bar = s.ibarrier().map_err(e("ibarrier"))?;
            // Waited for in another order than started.
            bar.wait().map_err(e("ibarrier wait"))?;
            t.wait().map_err(e("ialltoall wait"))?;
            recv.wait().map_err(e("irecv wait"))?;
            g.wait().map_err(e("iallgather wait"))?;
            let mut b = b;
            while !b.test().map_err(e("ibcast test"))? {
                std::thread::yield_now();
            }
            a.wait().map_err(e("iallreduce wait"))
        })?;
        let total = (n * (n + 1) / 2) as u64;
        let want: Vec<u64> = (0..k).map(|i| total * (i as u64 + round)).collect();
        same(&format!("iallreduce of {k}, round {round}"), &sum, &want)?;
        same("ibcast", &bytes, &vec![round as u8; k])?;
        let want: Vec<u32> = (0..n).map(|r| r as u32 * 3 + round as u32).collect();
        same("iallgather", &gathered, &want)?;
        let want: Vec<u32> = (0..n).map(|i| (i * 100 + me) as u32).collect();
        same("ialltoall", &swapped, &want)?;
        if ring[0] != left as u64 + round {
            return Err(format!("ring got {ring:?}"));
        }
    }
    // The other nonblocking collectives, all in flight at once, checked against the blocking
    // ones' results.
    for root in 0..n as Rank {
        let k = 5;
        let mine: Vec<u64> = (0..n * k)
            .map(|i| value(me, i, root as u64) as u64)
            .collect();
        let (mut red, mut gat, mut sca) = (vec![0u64; n * k], vec![0u64; n * n * k], vec![0u64; k]);
        let (mut rsb, mut sc, mut ex) = (vec![0u64; k], vec![0u64; n * k], vec![0u64; n * k]);
        world.scope(|s| -> Result<(), String> {
            let reqs = [
                s.ireduce(&mine, &mut red, Op::Sum, root)
                    .map_err(e("ireduce"))?,
                s.igather(&mine, &mut gat, root).map_err(e("igather"))?,
                s.iscatter(&mine, &mut sca, root).map_err(e("iscatter"))?,
                s.ireduce_scatter_block(&mine, &mut rsb, Op::Max)
                    .map_err(e("ireduce_scatter_block"))?,
                s.iscan(&mine, &mut sc, Op::Sum).map_err(e("iscan"))?,
                s.iexscan(&mine, &mut ex, Op::Sum).map_err(e("iexscan"))?,
            ];
            for r in reqs.into_iter().rev() {
                r.wait().map_err(e("wait"))?;
            }
            Ok(())
        })?;
        let mut want = vec![0u64; n * k];
        if me == root as usize {
            world
                .reduce(&mine, &mut want, Op::Sum, root)
                .map_err(e("reduce"))?;
            same("ireduce", &red, &want)?;
        } else {
            world
                .reduce(&mine, &mut [], Op::Sum, root)
                .map_err(e("reduce"))?;
        }
        let mut want = vec![0u64; n * n * k];
        world.gather(&mine, &mut want, root).map_err(e("gather"))?;
        if me == root as usize {
            same("igather", &gat, &want)?;
        }
        let mut want = vec![0u64; k];
        world
            .scatter(&mine, &mut want, root)
            .map_err(e("scatter"))?;
        same("iscatter", &sca, &want)?;
        world
            .reduce_scatter_block(&mine, &mut want, Op::Max)
            .map_err(e("rsb"))?;
        same("ireduce_scatter_block", &rsb, &want)?;
        let mut want = vec![0u64; n * k];
        world.scan(&mine, &mut want, Op::Sum).map_err(e("scan"))?;
        same("iscan", &sc, &want)?;
        world
            .exscan(&mine, &mut want, Op::Sum)
            .map_err(e("exscan"))?;
        if me > 0 {
            same("iexscan", &ex, &want)?;
        }
    }
    // A blocking collective called while a nonblocking one is still in flight runs after it.
    let mut first = [0u32];
    let mut second = [0u32];
    world.scope(|s| -> Result<(), String> {
        let r = s
            .iallreduce(&[1u32], &mut first, Op::Sum)
            .map_err(e("iallreduce"))?;
        world
            .allreduce(&[2u32], &mut second, Op::Sum)
            .map_err(e("blocking allreduce"))?;
        r.wait().map_err(e("iallreduce wait"))
    })?;
    if first[0] as usize != n || second[0] as usize != 2 * n {
        return Err(format!("ordered collectives: {first:?} {second:?}"));
    }
    // On a split communicator, and left for the scope's end to wait for.
    let half = world
        .split(Some((me % 2) as u32), 0)
        .map_err(e("split"))?
        .ok_or("split gave none")?;
    let (mut x, mine) = ([0u32], [me as u32]);
    half.scope(|s| {
        let _ = s.iallreduce(&mine, &mut x, Op::Max);
    });
    let want = (0..n).filter(|r| r % 2 == me % 2).max().unwrap_or(0) as u32;
    if x[0] != want {
        return Err(format!("split iallreduce {x:?}, expected {want}"));
    }
    super::nonblocking_v(world)?;
    super::nonblocking_v(&half)
}
