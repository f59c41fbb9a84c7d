//! Finding this process's rank and the job size from the launcher's environment, so programs
//! run unchanged under `rdcoll-run`, `srun`, `mpirun` (Open MPI) or `mpiexec` (MPICH Hydra).

use crate::error::{Result, TransportError};
use crate::types::Rank;

/// Environment variable pairs (rank, size), in the order they are consulted.
pub const RANK_SIZE_VARS: &[(&str, &str)] = &[
    ("RDCOLL_RANK", "RDCOLL_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
];

/// Rank and size from the first launcher whose variables are set; `(0, 1)` when none are.
pub fn rank_and_size() -> Result<(Rank, usize)> {
    rank_and_size_from(|k| std::env::var(k).ok())
}

/// [`rank_and_size`] over any variable lookup (for tests).
pub fn rank_and_size_from(var: impl Fn(&str) -> Option<String>) -> Result<(Rank, usize)> {
    for (rank_var, size_var) in RANK_SIZE_VARS {
        if let (Some(r), Some(s)) = (var(rank_var), var(size_var)) {
            let parse = |name: &str, v: &str| {
                v.trim()
                    .parse::<u32>()
                    .map_err(|_| TransportError::Bootstrap(format!("{name}={v:?} is not a number")))
            };
            let (rank, size) = (parse(rank_var, &r)?, parse(size_var, &s)? as usize);
            if size == 0 || rank as usize >= size {
                return Err(TransportError::Bootstrap(format!(
                    "{rank_var}={rank} does not fit {size_var}={size}"
                )));
            }
            return Ok((rank, size));
        }
    }
    Ok((0, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn launchers_in_priority_order() {
        assert_eq!(rank_and_size_from(env(&[])).unwrap(), (0, 1));
        assert_eq!(
            rank_and_size_from(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")])).unwrap(),
            (2, 4)
        );
        let both = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "3"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "9"),
        ];
        assert_eq!(rank_and_size_from(env(&both)).unwrap(), (1, 3));
        let ours = [
            ("RDCOLL_RANK", "5"),
            ("RDCOLL_SIZE", "6"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "3"),
        ];
        assert_eq!(rank_and_size_from(env(&ours)).unwrap(), (5, 6));
    }

    #[test]
    fn nonsense_is_an_error() {
        assert!(rank_and_size_from(env(&[("RDCOLL_RANK", "4"), ("RDCOLL_SIZE", "4")])).is_err());
        assert!(rank_and_size_from(env(&[("RDCOLL_RANK", "x"), ("RDCOLL_SIZE", "4")])).is_err());
        assert!(rank_and_size_from(env(&[("RDCOLL_RANK", "0"), ("RDCOLL_SIZE", "0")])).is_err());
    }
}
