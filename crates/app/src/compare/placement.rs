//! Where a variant's threads run (`compare --threads`). One thread keeps the CPUs the user gave
//! (`--server-cpu`, `--client-cpu`). N threads take CPUs in the machine's order (one per
//! physical core first, [`host::topology::spread`]): the engine's N threads one CPU each; the
//! load experiment's server N CPUs and its N client threads N others, so neither side shares a
//! CPU with the other. A machine with too few CPUs for that is said to be, and the experiment
//! is not run, rather than measured on shared CPUs and reported as a scaling figure.

use super::worker::ExperimentKind;

/// The CPUs of one variant's threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Placement {
    /// The engine's threads, one each.
    pub(super) engine: Vec<usize>,
    /// The built-in server's workers, one each.
    pub(super) server: Vec<usize>,
    /// The load experiment's client threads (and the worker process), one each.
    pub(super) client: Vec<usize>,
}

/// The placement of `threads` threads for `experiments`, and the experiments that cannot be
/// placed on `order` (the machine's CPUs), each with why.
pub(super) fn place(
    threads: usize,
    experiments: &[ExperimentKind],
    (server_cpu, client_cpu): (usize, usize),
    order: &[usize],
) -> (Placement, Vec<(ExperimentKind, String)>) {
    if threads <= 1 {
        let p = Placement {
            engine: vec![client_cpu],
            server: vec![server_cpu],
            client: vec![client_cpu],
        };
        return (p, Vec::new());
    }
    let cpus = order.len();
    let mut p = Placement {
        client: vec![client_cpu],
        server: vec![server_cpu],
        ..Placement::default()
    };
    let mut refused = Vec::new();
    for e in experiments {
        match e {
            ExperimentKind::Engine if threads <= cpus => p.engine = order[..threads].to_vec(),
            ExperimentKind::Engine => refused.push((
                *e,
                format!(
                    "threads={threads}: the engine needs {threads} CPUs, one per thread; this machine has {cpus}"
                ),
            )),
            ExperimentKind::Load if 2 * threads <= cpus => {
                p.server = order[..threads].to_vec();
                p.client = order[threads..2 * threads].to_vec();
            }
            ExperimentKind::Load => refused.push((
                *e,
                format!(
                    "threads={threads}: the load experiment needs {} CPUs ({threads} for the server's workers, {threads} for its client threads, none shared); this machine has {cpus}",
                    2 * threads
                ),
            )),
            ExperimentKind::Pretransfer => refused.push((
                *e,
                "pretransfer makes one connection at a time: it runs at threads=1 only".into(),
            )),
        }
    }
    (p, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExperimentKind::{Engine, Load};

    #[test]
    fn one_thread_keeps_the_cpus_given() {
        let (p, refused) = place(1, &[Engine, Load], (3, 5), &[0, 1]);
        assert_eq!((p.engine, p.server, p.client), (vec![5], vec![3], vec![5]));
        assert!(refused.is_empty());
    }

    #[test]
    fn the_engine_takes_one_cpu_per_thread_in_the_machines_order() {
        let (p, refused) = place(2, &[Engine], (0, 1), &[0, 2, 1, 3]);
        assert_eq!(p.engine, vec![0, 2]);
        assert!(refused.is_empty());
    }

    #[test]
    fn the_load_experiment_never_shares_a_cpu_between_server_and_client() {
        let (p, refused) = place(2, &[Engine, Load], (0, 1), &[0, 2, 1, 3]);
        assert_eq!((p.server, p.client), (vec![0, 2], vec![1, 3]));
        assert!(refused.is_empty());
    }

    #[test]
    fn too_few_cpus_is_said_not_measured() {
        let (p, refused) = place(2, &[Engine, Load], (0, 1), &[0, 1]);
        assert_eq!(p.engine, vec![0, 1]);
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0].1.contains("needs 4 CPUs") && refused[0].1.contains("has 2"),
            "{}",
            refused[0].1
        );
        let (_, refused) = place(3, &[Engine], (0, 1), &[0, 1]);
        assert!(refused[0].1.contains("needs 3 CPUs"), "{}", refused[0].1);
    }
}
