//! The multicast on ranks that are threads of this process (`local` transport): 2-6 clusters
//! of 1-6 ranks, every root, Robber and MOB. Processes over shm and tcp, and a rank that dies,
//! are in `collectives_processes`.

// The case that needs processes (a rank that dies) runs in `collectives_processes`.
#[allow(dead_code)]
mod multicast_cases;

mod local_ranks;
use local_ranks::run;

#[test]
fn every_shape_and_root() {
    for n in [2, 3, 4, 5, 6] {
        run(n, multicast_cases::shapes_and_roots);
    }
}

#[test]
fn larger_clusters() {
    // 12 ranks in four clusters of 3, and 24 in six of 4, from two roots.
    for (sizes, interleave) in [(vec![3, 3, 3, 3], true), (vec![4; 6], false)] {
        let n = sizes.iter().sum();
        run(n, |c| {
            let comm = multicast_cases::clustered(c, &sizes, interleave, 32 << 10)?;
            multicast_cases::every_root(&comm, &[1_000_003], 2)
        });
    }
}
