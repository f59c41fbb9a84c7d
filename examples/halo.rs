//! A 1-D heat equation (Jacobi iteration) split across ranks: each step a rank trades its edge
//! cells with its neighbours by nonblocking send and receive, updates its interior while the
//! halos travel, then its two edge cells; every 100 steps an allreduce finds the largest
//! change. At the end rank 0 gathers the field and checks it against the same iteration run
//! on one process. Run it with `rdcoll-run -n 4 target/release/examples/halo [CELLS] [STEPS]`.

use rdcoll::{Comm, Op};

/// The initial temperature of global cell `i` of `n`.
fn initial(i: usize, n: usize) -> f64 {
    if i < n / 8 {
        1.0
    } else {
        0.0
    }
}

/// One Jacobi step of cell values `old` (with one halo cell each side) into `new`'s interior.
fn relax(old: &[f64], new: &mut [f64], range: std::ops::Range<usize>) {
    for i in range {
        new[i] = 0.5 * old[i] + 0.25 * (old[i - 1] + old[i + 1]);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let comm = rdcoll::init()?;
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let cells = args.next().transpose()?.unwrap_or(1 << 16);
    let steps = args.next().transpose()?.unwrap_or(1000);
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    if cells < 2 * size {
        return Err(format!("{cells} cells are too few for {size} ranks").into());
    }
    // This rank's cells: [start, start + mine), stored at 1..=mine, halos at 0 and mine + 1.
    let start = cells * rank / size;
    let mine = cells * (rank + 1) / size - start;
    let mut field: Vec<f64> = (0..mine + 2)
        .map(|i| match i {
            0 => 0.0,
            i if i == mine + 1 => 0.0,
            i => initial(start + i - 1, cells),
        })
        .collect();
    let mut next = field.clone();
    let left = rank.checked_sub(1).map(|r| r as u32);
    let right = (rank + 1 < size).then_some(rank as u32 + 1);
    let t0 = comm.wtime();
    let mut change = f64::MAX;
    for step in 0..steps {
        step_with_halos(&comm, &mut field, &mut next, left, right)?;
        if step % 100 == 99 {
            let local = (1..=mine)
                .map(|i| (next[i] - field[i]).abs())
                .fold(0.0, f64::max);
            let mut global = [0.0];
            comm.allreduce(&[local], &mut global, Op::Max)?;
            change = global[0];
        }
        std::mem::swap(&mut field, &mut next);
    }
    let elapsed = comm.wtime() - t0;
    // Rank 0 gathers the field and checks it against one process's iteration.
    let counts: Vec<usize> = (0..size)
        .map(|r| cells * (r + 1) / size - cells * r / size)
        .collect();
    let mut whole = vec![0.0; if rank == 0 { cells } else { 0 }];
    comm.gatherv(&field[1..=mine], &mut whole, &counts, 0)?;
    if rank == 0 {
        let serial = serial(cells, steps);
        let error = whole
            .iter()
            .zip(&serial)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        println!(
            "halo: {size} ranks, {cells} cells, {steps} steps in {elapsed:.3} s; last change \
             {change:.3e}; largest difference from one process {error:.1e}"
        );
        if error > 1e-12 {
            return Err("the distributed field differs from the serial one".into());
        }
    }
    Ok(())
}

/// One step: sends this rank's edge cells to its neighbours and receives theirs into the halo
/// cells while it updates the cells that need no halo, then the two edge cells.
fn step_with_halos(
    comm: &Comm,
    field: &mut [f64],
    next: &mut [f64],
    left: Option<u32>,
    right: Option<u32>,
) -> rdcoll::Result<()> {
    let mine = field.len() - 2;
    let (first, last) = ([field[1]], [field[mine]]);
    let (halo_left, rest) = field.split_at_mut(1);
    let (cells, halo_right) = rest.split_at_mut(mine);
    comm.scope(|s| {
        let mut requests = Vec::new();
        if let Some(l) = left {
            requests.push(s.irecv(halo_left, l, 1)?);
            requests.push(s.isend(&first, l, 0)?);
        }
        if let Some(r) = right {
            requests.push(s.irecv(halo_right, r, 0)?);
            requests.push(s.isend(&last, r, 1)?);
        }
        // While the halos travel: cells 2..mine read only this rank's cells (`cells[j]` is
        // `field[j + 1]`).
        for i in 2..mine {
            next[i] = 0.5 * cells[i - 1] + 0.25 * (cells[i - 2] + cells[i]);
        }
        requests.into_iter().try_for_each(|r| r.wait().map(drop))
    })?;
    relax(field, next, 1..2);
    relax(field, next, mine..mine + 1);
    Ok(())
}

/// The same iteration on one process, for the check.
fn serial(cells: usize, steps: usize) -> Vec<f64> {
    let mut field: Vec<f64> = (0..cells + 2)
        .map(|i| match i {
            0 => 0.0,
            i if i == cells + 1 => 0.0,
            i => initial(i - 1, cells),
        })
        .collect();
    let mut next = field.clone();
    for _ in 0..steps {
        relax(&field, &mut next, 1..cells + 1);
        std::mem::swap(&mut field, &mut next);
    }
    field[1..=cells].to_vec()
}
