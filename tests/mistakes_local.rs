//! The mistakes suite (`mistakes_cases`) on ranks that are threads of this process, 2-8 ranks;
//! `collectives_processes` runs it over shm and tcp.

mod mistakes_cases;

#[test]
fn every_mistake_is_a_mismatch_on_every_rank() {
    for n in 2..=8 {
        let results = rdcoll::local::run(n, |c| mistakes_cases::every_mistake(&c)).unwrap();
        for (rank, r) in results.into_iter().enumerate() {
            if let Err(why) = r {
                panic!("{n} ranks, rank {rank}: {why}");
            }
        }
    }
}
