//! Ranks as threads of this process, for tests, examples and users' own unit tests.

use std::panic::AssertUnwindSafe;

use crate::{Comm, Error, Rank, Result};

/// Runs `f` on `n` ranks, each a thread with its own [`Comm`] over the `local` transport, and
/// returns their results by rank. A rank that panics ends the job, as a launcher would: every
/// rank is marked failed, so whatever the others wait for ends with `PeerFailed`, and `run`
/// returns [`Error::RankPanicked`] for the lowest rank that panicked once all have ended.
pub fn run<T, F>(n: usize, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(Comm) -> T + Sync,
{
    let fabrics = rdcoll_transport::local::create(n)?;
    let job = fabrics[0].job();
    run_ranks(fabrics, &|| job.end(), f)
}

/// Runs `f` on every endpoint of an in-process job, each on a thread of its own with a
/// [`Comm`] over it; a rank that panics ends the job (`end`), and the lowest rank that
/// panicked is returned as [`Error::RankPanicked`] once all have ended.
pub(crate) fn run_ranks<Fab, T, F>(
    fabrics: Vec<Fab>,
    end: &(dyn Fn() + Sync),
    f: F,
) -> Result<Vec<T>>
where
    Fab: rdcoll_transport::Fabric + 'static,
    T: Send,
    F: Fn(Comm) -> T + Sync,
{
    let n = fabrics.len();
    std::thread::scope(|s| {
        let handles: Vec<_> = fabrics
            .into_iter()
            .map(|fabric| {
                let f = &f;
                s.spawn(move || {
                    let comm = Comm::from_fabric(Box::new(fabric));
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| f(comm)));
                    result.unwrap_or_else(|panic| {
                        end();
                        std::panic::resume_unwind(panic)
                    })
                })
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        let mut first_panic = None;
        for (rank, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(v) => out.push(v),
                Err(p) => {
                    let message = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    first_panic.get_or_insert(Error::RankPanicked {
                        rank: rank as Rank,
                        message,
                    });
                }
            }
        }
        match first_panic {
            Some(e) => Err(e),
            None => Ok(out),
        }
    })
}

#[cfg(test)]
mod tests {
    use rdcoll_transport::{Event, TransportError};

    #[test]
    fn results_come_back_by_rank() {
        let v = super::run(5, |c| (c.rank(), c.size(), c.backend())).unwrap();
        assert_eq!(v, (0..5).map(|r| (r, 5, "local")).collect::<Vec<_>>());
    }

    /// The others wait for a message from any rank, a probe of any rank, or a barrier: the
    /// panic ends the job, each wait fails, and `run` ends and names the rank.
    #[test]
    fn a_panic_ends_the_run_whatever_the_others_wait_in() {
        for wait in ["recv", "probe", "barrier"] {
            let err = super::run(3, |c| {
                if c.rank() == 2 {
                    panic!("rank 2 gives up");
                }
                let r = match wait {
                    "recv" => c.recv(&mut [0u8; 8], crate::Source::Any, 3).map(drop),
                    "probe" => c.probe(crate::Source::Any, 3).map(drop),
                    _ => c.barrier(),
                };
                assert!(r.is_err(), "{wait} returned {r:?}");
            })
            .unwrap_err();
            assert!(
                matches!(err, crate::Error::RankPanicked { rank: 2, .. }),
                "{wait}: {err}"
            );
        }
    }

    #[test]
    fn a_panicking_rank_is_reported_and_its_peers_see_it_fail() {
        let err = super::run(2, |c| {
            if c.rank() == 1 {
                panic!("boom");
            }
            loop {
                match c.fabric().wait(None) {
                    Ok(Some(Event::PeerFailed { rank: 1 })) => break,
                    Ok(_) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(c.fabric().send(1, b"x"), Err(TransportError::PeerFailed(1)));
        })
        .unwrap_err();
        assert!(
            matches!(err, crate::Error::RankPanicked { rank: 1, ref message } if message == "boom"),
            "{err}"
        );
    }
}
