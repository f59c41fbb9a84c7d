//! Reduction cases run on every rank of a job, in-process and across processes, checked
//! against a serial reference that combines in the algorithm's own fixed order (the degree-k
//! tree's for small vectors, ascending ranks for large ones), so floating-point results must
//! match bit for bit. Each case returns `Err` instead of panicking.

use rdcoll::reduce::degree_k::{DegreeK, Role};
use rdcoll::{Comm, Element, Op};

/// The largest vector (bytes) the degree-k tree takes on `comm`.
pub fn small_max(comm: &Comm) -> usize {
    comm.collectives_config().allreduce_small_max
}

/// Unless set, the degree-k tree's limit is 64 KiB where every write is a message (tcp) and
/// 16 KiB elsewhere.
pub fn small_max_follows_the_fabric(comm: &Comm) -> Result<(), String> {
    if std::env::var_os("RDCOLL_ALLREDUCE_SMALL_MAX").is_some() {
        return Ok(());
    }
    let want = match comm.backend() {
        "tcp" => rdcoll::CollConfig::MESSAGE_FABRIC_ALLREDUCE_SMALL_MAX,
        _ => rdcoll::CollConfig::DEFAULT_ALLREDUCE_SMALL_MAX,
    };
    match small_max(comm) {
        got if got == want => Ok(()),
        got => Err(format!(
            "over {} the tree takes up to {got} bytes, not {want}",
            comm.backend()
        )),
    }
}

/// How the library combines `n` contributions of `bytes` bytes.
#[derive(Clone, Copy, Debug)]
pub enum Order {
    /// The degree-k tree.
    Tree(usize),
    /// `v0 op v1 op ... op v(n-1)`.
    Fold,
}

/// The order an allreduce of `bytes` bytes uses on `comm`.
pub fn order_of(comm: &Comm, bytes: usize) -> Result<Order, String> {
    if bytes > small_max(comm) {
        return Ok(Order::Fold);
    }
    comm.allreduce_degree(bytes)
        .map(Order::Tree)
        .map_err(|e| e.to_string())
}

/// Combines `vals` (by rank) in `order`.
pub fn reference<T: Element>(vals: &[Vec<T>], op: Op, order: Order) -> Vec<T> {
    let n = vals.len();
    let mut acc: Vec<Vec<T>> = vals.to_vec();
    match order {
        Order::Fold => {
            for r in 1..n {
                let (head, tail) = acc.split_at_mut(r);
                T::combine(op, &mut head[0], &tail[0]);
            }
        }
        Order::Tree(k) => {
            let t = DegreeK::new(n, k);
            for step in 0..t.steps() {
                for node in 0..n {
                    if let Some(Role::Receive(from)) = t.role(node, step) {
                        for f in from {
                            let (head, tail) = acc.split_at_mut(f);
                            T::combine(op, &mut head[node], &tail[0]);
                        }
                    }
                }
            }
        }
    }
    acc.swap_remove(0)
}

/// A deterministic pseudo-random stream.
pub fn mix(seed: u64) -> u64 {
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Element types the cases can make values of.
pub trait Sample: Element + PartialEq + std::fmt::Debug {
    /// Rank `rank`'s element `i` for `op` (logical operations get mostly 0 and 1).
    fn sample(rank: u32, i: usize, op: Op, salt: u64) -> Self;
    /// Bitwise equality (`NaN`-proof and signed-zero-exact for floats).
    fn same(&self, other: &Self) -> bool;
}

macro_rules! sample_int {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn sample(rank: u32, i: usize, op: Op, salt: u64) -> Self {
                let r = mix(salt ^ ((rank as u64) << 40) ^ i as u64);
                match op {
                    Op::LogicalAnd | Op::LogicalOr | Op::LogicalXor => (r % 3 != 0) as $t * (r % 5) as $t,
                    Op::Prod => (r % 3) as $t,
                    _ => r as $t,
                }
            }
            fn same(&self, other: &Self) -> bool {
                self == other
            }
        }
    )*};
}
sample_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! sample_float {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn sample(rank: u32, i: usize, op: Op, salt: u64) -> Self {
                let r = mix(salt ^ ((rank as u64) << 40) ^ i as u64);
                let unit = (r >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                match op {
                    Op::Prod => (1.0 + unit / 64.0) as $t,
                    _ => (unit * 1000.0) as $t,
                }
            }
            fn same(&self, other: &Self) -> bool {
                self.to_bits() == other.to_bits()
            }
        }
    )*};
}
sample_float!(f32, f64);

macro_rules! sample_complex {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn sample(rank: u32, i: usize, op: Op, salt: u64) -> Self {
                // Two real samples: products stay near 1 in modulus.
                let re = Sample::sample(rank, 2 * i, op, salt);
                let im = Sample::sample(rank, 2 * i + 1, op, salt);
                match op {
                    Op::Prod => Self::new(re, im - 1.0),
                    _ => Self::new(re, im),
                }
            }
            fn same(&self, other: &Self) -> bool {
                self.re.same(&other.re) && self.im.same(&other.im)
            }
        }
    )*};
}
sample_complex!(rdcoll::Complex32, rdcoll::Complex64);

fn first_difference<T: Sample>(got: &[T], want: &[T]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} elements, expected {}", got.len(), want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(a, b)| !a.same(b))
        .map(|i| format!("element {i} is {:?}, expected {:?}", got[i], want[i]))
}

/// Allreduce (and in place) and reduce to `roots` of `count` elements of `T` with `op`.
pub fn check_op<T: Sample>(comm: &Comm, count: usize, op: Op, roots: &[u32]) -> Result<(), String> {
    let n = comm.size() as usize;
    let me = comm.rank();
    let salt = count as u64 * 131 + op as u64;
    let vals: Vec<Vec<T>> = (0..n as u32)
        .map(|r| (0..count).map(|i| T::sample(r, i, op, salt)).collect())
        .collect();
    let what = |v: &str| format!("{v} of {count} {} with {op:?}", std::any::type_name::<T>());
    let order = order_of(comm, count * std::mem::size_of::<T>())?;
    let want = reference(&vals, op, order);
    let mut got = vec![T::zeroed(); count];
    comm.allreduce(&vals[me as usize], &mut got, op)
        .map_err(|e| format!("{}: {e}", what("allreduce")))?;
    if let Some(d) = first_difference(&got, &want) {
        return Err(format!("{} ({order:?}): {d}", what("allreduce")));
    }
    let mut buf = vals[me as usize].clone();
    comm.allreduce_in_place(&mut buf, op)
        .map_err(|e| format!("{}: {e}", what("allreduce in place")))?;
    if let Some(d) = first_difference(&buf, &want) {
        return Err(format!("{}: {d}", what("allreduce in place")));
    }
    // A reduce combines as the allreduce does, whatever its root (rank order, which
    // operations that do not commute need).
    for &root in roots.iter().filter(|&&r| (r as usize) < n) {
        let mut out = vec![T::zeroed(); count];
        comm.reduce(&vals[me as usize], &mut out, op, root)
            .map_err(|e| format!("{} to {root}: {e}", what("reduce")))?;
        if me == root {
            if let Some(d) = first_difference(&out, &want) {
                return Err(format!("{} to {root}: {d}", what("reduce")));
            }
        }
    }
    Ok(())
}

/// Every valid op of `T` at every count in `counts`.
pub fn every_op<T: Sample>(comm: &Comm, counts: &[usize], roots: &[u32]) -> Result<(), String> {
    for &count in counts {
        for op in Op::ALL {
            if rdcoll::reduce::op::check::<T>(op).is_err() {
                // Refused up front, before any rank waits on another.
                let mut out = vec![T::zeroed(); count];
                if comm
                    .allreduce(&vec![T::zeroed(); count], &mut out, op)
                    .is_ok()
                {
                    return Err(format!(
                        "{op:?} on {} was accepted",
                        std::any::type_name::<T>()
                    ));
                }
                continue;
            }
            check_op::<T>(comm, count, op, roots)?;
        }
    }
    Ok(())
}

/// Every type with every op.
pub fn every_type(comm: &Comm, counts: &[usize], roots: &[u32]) -> Result<(), String> {
    small_max_follows_the_fabric(comm)?;
    every_op::<i8>(comm, counts, roots)?;
    every_op::<i16>(comm, counts, roots)?;
    every_op::<i32>(comm, counts, roots)?;
    every_op::<i64>(comm, counts, roots)?;
    every_op::<u8>(comm, counts, roots)?;
    every_op::<u16>(comm, counts, roots)?;
    every_op::<u32>(comm, counts, roots)?;
    every_op::<u64>(comm, counts, roots)?;
    every_op::<f32>(comm, counts, roots)?;
    every_op::<f64>(comm, counts, roots)?;
    every_op::<rdcoll::Complex32>(comm, counts, roots)?;
    every_op::<rdcoll::Complex64>(comm, counts, roots)
}

/// A million elements (the large path): sums of floats and integers, min of bytes.
pub fn million(comm: &Comm) -> Result<(), String> {
    check_op::<f32>(comm, 1_000_000, Op::Sum, &[0])?;
    check_op::<i64>(comm, 1_000_000, Op::Sum, &[])?;
    check_op::<u8>(comm, 1_000_000, Op::Min, &[])?;
    check_op::<f64>(comm, 1_000_000, Op::Max, &[])
}

/// Ranks whose lengths differ get an error, not corruption (the tree's slots carry lengths).
pub fn length_mismatch(comm: &Comm) -> Result<(), String> {
    if comm.size() < 2 {
        return Ok(());
    }
    let len = if comm.rank() == 1 { 5 } else { 4 };
    let mine = vec![1u32; len];
    let mut out = vec![0u32; len];
    match comm.allreduce(&mine, &mut out, Op::Sum) {
        Err(rdcoll::Error::Mismatch(_)) | Err(rdcoll::Error::CommunicatorBroken(_)) => Ok(()),
        other => Err(format!("lengths 4 and 5 gave {other:?}")),
    }
}

/// `runs` f32 sums of 8 ranks' random values with a random delay before each contribution:
/// the result must be the same bits in every run (returns this rank's results).
pub fn reproducible(comm: &Comm, runs: usize, count: usize) -> Result<Vec<Vec<u32>>, String> {
    let mine: Vec<f32> = (0..count)
        .map(|i| f32::sample(comm.rank(), i, Op::Sum, 77))
        .collect();
    let mut out = Vec::new();
    for run in 0..runs {
        let delay = mix(run as u64 * 31 + comm.rank() as u64) % 300;
        std::thread::sleep(std::time::Duration::from_micros(delay));
        let mut sum = vec![0f32; count];
        comm.allreduce(&mine, &mut sum, Op::Sum)
            .map_err(|e| e.to_string())?;
        out.push(sum.iter().map(|x| x.to_bits()).collect());
    }
    Ok(out)
}

/// Reductions with operations of the caller's that are associative but do not commute: "the
/// lower ranks' value wins" and "the higher ranks' value wins" give rank 0's and the last
/// rank's values only when contributions are combined in rank order (MPI's rule for such
/// operations), at every root, for small vectors (the degree-k tree) and large ones.
pub fn not_commutative(comm: &Comm) -> Result<(), String> {
    let (me, n) = (comm.rank() as usize, comm.size() as usize);
    let first_wins = |_: &mut u64, _: &u64| {};
    let last_wins = |a: &mut u64, b: &u64| *a = *b;
    // The largest vector the tree takes, and the smallest the pipeline does.
    for count in [1, 100, small_max(comm) / 8, small_max(comm) / 8 + 1] {
        let val = |r: usize, i: usize| (r as u64) << 32 | i as u64;
        let mine: Vec<u64> = (0..count).map(|i| val(me, i)).collect();
        let of = |r: usize| -> Vec<u64> { (0..count).map(|i| val(r, i)).collect() };
        let what = |w: &str| format!("{w} of {count} elements");
        let mut got = vec![0u64; count];
        comm.allreduce_with(&mine, &mut got, first_wins)
            .map_err(|e| format!("{}: {e}", what("allreduce_with")))?;
        if got != of(0) {
            return Err(format!("{}: not rank 0's values", what("allreduce_with")));
        }
        comm.allreduce_with(&mine, &mut got, last_wins)
            .map_err(|e| format!("{}: {e}", what("allreduce_with")))?;
        if got != of(n - 1) {
            return Err(format!("{}: not the last rank's", what("allreduce_with")));
        }
        for root in 0..n as u32 {
            for (f, want, name) in [
                (&first_wins as &(dyn Fn(&mut u64, &u64) + Sync), 0, "first"),
                (&last_wins, n - 1, "last"),
            ] {
                let mut out = vec![0u64; count];
                comm.reduce_with(&mine, &mut out, f, root)
                    .map_err(|e| format!("{} to {root}: {e}", what("reduce_with")))?;
                if me == root as usize && out != of(want) {
                    return Err(format!(
                        "{} to {root}, {name} wins: element 0 is rank {}'s",
                        what("reduce_with"),
                        out[0] >> 32
                    ));
                }
            }
        }
        comm.scan_with(&mine, &mut got, first_wins)
            .map_err(|e| format!("{}: {e}", what("scan_with")))?;
        if got != of(0) {
            return Err(format!("{}: not rank 0's values", what("scan_with")));
        }
        if me > 0 {
            comm.exscan_with(&mine, &mut got, last_wins)
                .map_err(|e| format!("{}: {e}", what("exscan_with")))?;
            if got != of(me - 1) {
                return Err(format!(
                    "{}: not rank {}'s values",
                    what("exscan_with"),
                    me - 1
                ));
            }
        } else {
            comm.exscan_with(&mine, &mut got, last_wins)
                .map_err(|e| format!("{}: {e}", what("exscan_with")))?;
        }
    }
    Ok(())
}
