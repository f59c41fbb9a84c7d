//! MPI's progress rule with the offload agent as a thread, on ranks that are threads of this
//! process: a posted receive completes in every wait, and while its rank computes without
//! calling the library (the agent carries it). A file of its own: the mode comes from the
//! environment, which this binary sets before any rank starts.

mod local_ranks;
mod progress_cases;

#[test]
fn a_posted_receive_completes_while_its_rank_computes() {
    std::env::set_var("RDCOLL_OFFLOAD", "thread");
    local_ranks::run(3, |c| {
        progress_cases::library_waits(c)?;
        progress_cases::while_computing(c)
    });
}
