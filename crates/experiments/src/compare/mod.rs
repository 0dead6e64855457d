//! `compare --matrix`: an experiment run across library versions and settings. Each variant
//! runs in a worker process of its own (one process loads one OpenSSL), driven by a typed spec
//! serialized as JSON and answering with one JSON line.

pub mod matrix;
pub mod saved;
pub mod worker;

use serde::{Deserialize, Serialize};

/// What a worker measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExperimentKind {
    /// Sequential new connections to a built-in server: context, connect, handshake, GET /.
    Pretransfer,
    /// Client and server in one thread over memory BIOs: the handshake alone.
    Engine,
}

impl ExperimentKind {
    pub fn name(self) -> &'static str {
        match self {
            ExperimentKind::Pretransfer => "pretransfer",
            ExperimentKind::Engine => "engine",
        }
    }
}

impl std::str::FromStr for ExperimentKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pretransfer" => Ok(ExperimentKind::Pretransfer),
            "engine" => Ok(ExperimentKind::Engine),
            other => Err(format!("{other}: use pretransfer, engine, or both")),
        }
    }
}

/// The one TLS version a variant offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tls {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl Tls {
    pub fn version(self) -> ossl::TlsVersion {
        match self {
            Tls::V1_2 => ossl::TlsVersion::Tls1_2,
            Tls::V1_3 => ossl::TlsVersion::Tls1_3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tls::V1_2 => "1.2",
            Tls::V1_3 => "1.3",
        }
    }
}

/// A certificate type as its name, for the serialized spec.
pub(crate) mod cert_type_name {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &ossl::CertType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ossl::CertType, D::Error> {
        let name = String::deserialize(d)?;
        name.parse()
            .map_err(|e: ossl::UnknownCertType| serde::de::Error::custom(e))
    }
}

pub(crate) use cert_type_name as cert_type_serde;
