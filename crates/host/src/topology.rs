//! Which CPUs share a core: the order to hand CPUs out in, so that N busy threads land on N
//! different physical cores before any two share one (SMT siblings share a core's execution
//! units, and would halve each other's rate whatever the library does).

use std::path::Path;

/// An online CPU and the core it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    pub cpu: usize,
    pub package: usize,
    pub core: usize,
}

/// The online CPUs with their package and core (from sysfs; a CPU whose topology cannot be read
/// counts as a core of its own).
pub fn cpus() -> Vec<Cpu> {
    cpus_in(Path::new("/sys/devices/system/cpu"), crate::online_cpus())
}

fn cpus_in(root: &Path, online: usize) -> Vec<Cpu> {
    let read = |cpu: usize, what: &str| -> Option<usize> {
        std::fs::read_to_string(root.join(format!("cpu{cpu}/topology/{what}")))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    (0..online)
        .map(|cpu| Cpu {
            cpu,
            package: read(cpu, "physical_package_id").unwrap_or(0),
            core: read(cpu, "core_id").unwrap_or(usize::MAX - cpu),
        })
        .collect()
}

/// The CPUs in the order to use them: one CPU of each physical core first (cores in package
/// order), then the second CPU of each core, and so on.
pub fn spread(cpus: &[Cpu]) -> Vec<usize> {
    let mut cores: Vec<(usize, usize)> = Vec::new();
    let mut rank = Vec::with_capacity(cpus.len());
    for c in cpus {
        let key = (c.package, c.core);
        let nth = cores.iter().filter(|k| **k == key).count();
        cores.push(key);
        rank.push((nth, c.package, c.cpu));
    }
    rank.sort();
    rank.into_iter().map(|(_, _, cpu)| cpu).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(cpu: usize, package: usize, core: usize) -> Cpu {
        Cpu { cpu, package, core }
    }

    #[test]
    fn siblings_come_after_every_core_has_one_cpu() {
        // 2 cores x 2 threads, numbered as Intel does (siblings are n and n + 2).
        let cpus = [cpu(0, 0, 0), cpu(1, 0, 1), cpu(2, 0, 0), cpu(3, 0, 1)];
        assert_eq!(spread(&cpus), vec![0, 1, 2, 3]);
        // Numbered as some AMD machines do (siblings adjacent).
        let cpus = [cpu(0, 0, 0), cpu(1, 0, 0), cpu(2, 0, 1), cpu(3, 0, 1)];
        assert_eq!(spread(&cpus), vec![0, 2, 1, 3]);
    }

    #[test]
    fn this_machine_lists_every_online_cpu_once() {
        let mut order = spread(&cpus());
        order.sort();
        assert_eq!(order, (0..crate::online_cpus()).collect::<Vec<_>>());
    }
}
