//! Rendering pieces that several commands' reports share: HTML pages, plots, tables, flame
//! graphs and profile tables (profile, compare --profile), Prometheus exposition, pcap and
//! pprof files, and the words text reports are written in.

pub mod flame;
pub mod histogram;
pub mod html;
pub mod latency;
pub mod metrics;
pub mod pcap;
pub mod placement;
pub mod plot;
pub mod pprof;
pub mod table;
pub mod wire;
pub mod words;
