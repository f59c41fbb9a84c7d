//! The block collectives (gather, scatter, allgather, alltoall, their `v` forms,
//! reduce_scatter, scan, exscan) and split communicators on ranks that are threads of this
//! process: 1-9 ranks, every root, empty, small, uneven and large blocks.

mod blocks_cases;
mod local_ranks;

#[test]
fn every_block_collective_on_1_to_9_ranks() {
    for n in 1..=9 {
        local_ranks::run(n, |c| blocks_cases::every_collective(c, &[0, 1, 3, 100]));
    }
}

#[test]
fn long_blocks_go_by_rendezvous() {
    for n in [2, 3, 5] {
        local_ranks::run(n, |c| blocks_cases::every_collective(c, &[20_000]));
    }
    // Past the chain's eight ranks: the recursive-doubling scan.
    local_ranks::run(9, |c| blocks_cases::every_collective(c, &[5_000]));
    local_ranks::run(4, |c| blocks_cases::large(c, 16 << 20));
}

#[test]
fn wrong_arguments_fail_without_hanging() {
    for n in [2, 3, 5, 8] {
        local_ranks::run(n, blocks_cases::wrong_arguments);
    }
}

#[test]
fn split_communicators() {
    for n in [1, 2, 3, 4, 7, 9] {
        local_ranks::run(n, blocks_cases::splits);
    }
}

#[test]
fn nonblocking_collectives() {
    for n in [1, 2, 3, 5] {
        local_ranks::run(n, blocks_cases::nonblocking);
    }
}
