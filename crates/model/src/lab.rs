//! `tlsscope lab`'s results: per experiment, the load's result untraced and under each
//! tracing backend, with the server's traced calls.

use load::RunResult;

use crate::trace::FunctionStats;

/// One experiment as the lab ran it.
pub struct LabExperiment {
    pub name: String,
    pub note: Option<String>,
    /// None when the experiment failed (`error` says why).
    pub untraced: Option<RunResult>,
    pub traced: Vec<LabTraced>,
    pub error: Option<String>,
}

/// One traced run: who traced, the load's result, the server's calls.
pub struct LabTraced {
    pub backend: String,
    pub result: RunResult,
    pub calls: Vec<FunctionStats>,
}
