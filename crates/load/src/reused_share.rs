//! Key shares a lean client makes once per process and offers on every connection
//! ([`crate::rustls_client::Work::Lean`]). The server's side of each handshake is unchanged: it
//! makes a fresh share of its own and completes the exchange with the client's, as it would
//! with any client. What the client saves is its key generation (an X25519 or P-256 base-point
//! multiplication, an ML-KEM key pair), which is a third or more of a client's cryptography.
//!
//! Each group keeps the wire layout of the draft that defines it
//! (draft-ietf-tls-ecdhe-mlkem: X25519MLKEM768 puts the ML-KEM part first, the NIST-curve
//! hybrids put the curve first), so the ClientHello is byte for byte the size a fresh share
//! gives. Keys come from aws-lc-rs (ring cannot reuse a private key); the keys are generated
//! on first use, one set per group.

use std::sync::{Arc, OnceLock};

use aws_lc_rs::{agreement, kem};
use rustls::crypto::{ActiveKeyExchange, SharedSecret, SupportedKxGroup};
use rustls::{Error, NamedGroup, PeerMisbehaved};

/// The classical (elliptic-curve) half of a share.
#[derive(Clone, Copy, Debug)]
enum Curve {
    X25519,
    P256,
    P384,
}

impl Curve {
    fn algorithm(self) -> &'static agreement::Algorithm {
        match self {
            Curve::X25519 => &agreement::X25519,
            Curve::P256 => &agreement::ECDH_P256,
            Curve::P384 => &agreement::ECDH_P384,
        }
    }

    fn group(self) -> NamedGroup {
        match self {
            Curve::X25519 => NamedGroup::X25519,
            Curve::P256 => NamedGroup::secp256r1,
            Curve::P384 => NamedGroup::secp384r1,
        }
    }

    /// The public key's length on the wire (uncompressed points for the NIST curves).
    fn share_len(self) -> usize {
        match self {
            Curve::X25519 => 32,
            Curve::P256 => 65,
            Curve::P384 => 97,
        }
    }
}

/// The post-quantum half of a share.
#[derive(Clone, Copy, Debug)]
enum Kem {
    MlKem768,
    MlKem1024,
}

impl Kem {
    fn algorithm(self) -> &'static kem::Algorithm {
        match self {
            Kem::MlKem768 => &kem::ML_KEM_768,
            Kem::MlKem1024 => &kem::ML_KEM_1024,
        }
    }

    /// The server's ciphertext length.
    fn ciphertext_len(self) -> usize {
        match self {
            Kem::MlKem768 => 1088,
            Kem::MlKem1024 => 1568,
        }
    }
}

/// What a group's share is made of, in wire order.
#[derive(Clone, Copy, Debug)]
enum Parts {
    Curve(Curve),
    Kem(Kem),
    /// A hybrid: `kem_first` says which half leads, in the share and in the secret.
    Hybrid {
        curve: Curve,
        kem: Kem,
        kem_first: bool,
    },
}

/// The keys of one group, made once.
struct Keys {
    curve: Option<agreement::PrivateKey>,
    kem: Option<kem::DecapsulationKey>,
    /// The share as sent: both halves in wire order.
    share: Vec<u8>,
    /// Where the curve's public key sits in `share` (for the hybrid's classical component).
    curve_at: usize,
}

impl Keys {
    fn make(parts: Parts) -> Result<Keys, String> {
        let curve = |c: Curve| {
            let key = agreement::PrivateKey::generate(c.algorithm())
                .map_err(|_| format!("cannot make a {:?} key", c.group()))?;
            let public = key
                .compute_public_key()
                .map_err(|_| format!("cannot encode a {:?} public key", c.group()))?;
            Ok::<_, String>((key, public.as_ref().to_vec()))
        };
        let kem = |k: Kem| {
            let key = kem::DecapsulationKey::generate(k.algorithm())
                .map_err(|_| format!("cannot make a {k:?} key"))?;
            let public = key
                .encapsulation_key()
                .and_then(|e| e.key_bytes())
                .map_err(|_| format!("cannot encode a {k:?} encapsulation key"))?;
            Ok::<_, String>((key, public.as_ref().to_vec()))
        };
        Ok(match parts {
            Parts::Curve(c) => {
                let (key, share) = curve(c)?;
                Keys {
                    curve: Some(key),
                    kem: None,
                    share,
                    curve_at: 0,
                }
            }
            Parts::Kem(k) => {
                let (key, share) = kem(k)?;
                Keys {
                    curve: None,
                    kem: Some(key),
                    share,
                    curve_at: 0,
                }
            }
            Parts::Hybrid {
                curve: c,
                kem: k,
                kem_first,
            } => {
                let (ckey, cshare) = curve(c)?;
                let (kkey, kshare) = kem(k)?;
                let (share, curve_at) = if kem_first {
                    let at = kshare.len();
                    ([kshare, cshare].concat(), at)
                } else {
                    ([cshare, kshare].concat(), 0)
                };
                Keys {
                    curve: Some(ckey),
                    kem: Some(kkey),
                    share,
                    curve_at,
                }
            }
        })
    }

    fn agree(&self, peer: &[u8]) -> Result<Vec<u8>, Error> {
        let key = self.curve.as_ref().ok_or(INVALID_SHARE)?;
        let peer = agreement::UnparsedPublicKey::new(key.algorithm(), peer);
        agreement::agree(key, peer, INVALID_SHARE, |s| Ok(s.to_vec()))
    }

    fn decapsulate(&self, ciphertext: &[u8]) -> Result<Vec<u8>, Error> {
        let key = self.kem.as_ref().ok_or(INVALID_SHARE)?;
        key.decapsulate(ciphertext.into())
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| INVALID_SHARE)
    }
}

const INVALID_SHARE: Error = Error::PeerMisbehaved(PeerMisbehaved::InvalidKeyShare);

/// A group whose client share is made once and reused.
#[derive(Debug)]
pub(crate) struct Reused {
    name: NamedGroup,
    parts: Parts,
    keys: OnceLock<Result<Arc<Keys>, String>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} byte share)", self.share.len())
    }
}

impl Reused {
    const fn new(name: NamedGroup, parts: Parts) -> Reused {
        Reused {
            name,
            parts,
            keys: OnceLock::new(),
        }
    }

    fn keys(&self) -> Result<Arc<Keys>, Error> {
        self.keys
            .get_or_init(|| Keys::make(self.parts).map(Arc::new))
            .clone()
            .map_err(Error::General)
    }
}

impl SupportedKxGroup for Reused {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        Ok(Box::new(Offer {
            name: self.name,
            parts: self.parts,
            keys: self.keys()?,
        }))
    }

    fn name(&self) -> NamedGroup {
        self.name
    }
}

/// One connection's offer of a reused share.
struct Offer {
    name: NamedGroup,
    parts: Parts,
    keys: Arc<Keys>,
}

impl ActiveKeyExchange for Offer {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, Error> {
        let secret = match self.parts {
            Parts::Curve(c) => {
                if peer.len() != c.share_len() {
                    return Err(INVALID_SHARE);
                }
                self.keys.agree(peer)?
            }
            Parts::Kem(k) => {
                if peer.len() != k.ciphertext_len() {
                    return Err(INVALID_SHARE);
                }
                self.keys.decapsulate(peer)?
            }
            Parts::Hybrid {
                curve,
                kem,
                kem_first,
            } => {
                if peer.len() != curve.share_len() + kem.ciphertext_len() {
                    return Err(INVALID_SHARE);
                }
                if kem_first {
                    let (ct, point) = peer.split_at(kem.ciphertext_len());
                    [self.keys.decapsulate(ct)?, self.keys.agree(point)?].concat()
                } else {
                    let (point, ct) = peer.split_at(curve.share_len());
                    [self.keys.agree(point)?, self.keys.decapsulate(ct)?].concat()
                }
            }
        };
        Ok(SharedSecret::from(secret))
    }

    fn hybrid_component(&self) -> Option<(NamedGroup, &[u8])> {
        match self.parts {
            Parts::Hybrid { curve, .. } => {
                let at = self.keys.curve_at;
                Some((curve.group(), &self.keys.share[at..at + curve.share_len()]))
            }
            _ => None,
        }
    }

    fn complete_hybrid_component(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, Error> {
        match self.parts {
            Parts::Hybrid { curve, .. } if peer.len() == curve.share_len() => {
                Ok(SharedSecret::from(self.keys.agree(peer)?))
            }
            _ => Err(INVALID_SHARE),
        }
    }

    fn pub_key(&self) -> &[u8] {
        &self.keys.share
    }

    fn group(&self) -> NamedGroup {
        self.name
    }
}

static X25519: Reused = Reused::new(NamedGroup::X25519, Parts::Curve(Curve::X25519));
static SECP256R1: Reused = Reused::new(NamedGroup::secp256r1, Parts::Curve(Curve::P256));
static SECP384R1: Reused = Reused::new(NamedGroup::secp384r1, Parts::Curve(Curve::P384));
static MLKEM768: Reused = Reused::new(NamedGroup::MLKEM768, Parts::Kem(Kem::MlKem768));
static MLKEM1024: Reused = Reused::new(NamedGroup::MLKEM1024, Parts::Kem(Kem::MlKem1024));
static X25519MLKEM768: Reused = Reused::new(
    NamedGroup::X25519MLKEM768,
    Parts::Hybrid {
        curve: Curve::X25519,
        kem: Kem::MlKem768,
        kem_first: true,
    },
);
static SECP256R1MLKEM768: Reused = Reused::new(
    NamedGroup::secp256r1MLKEM768,
    Parts::Hybrid {
        curve: Curve::P256,
        kem: Kem::MlKem768,
        kem_first: false,
    },
);

static GROUPS: [&Reused; 7] = [
    &X25519,
    &SECP256R1,
    &SECP384R1,
    &MLKEM768,
    &MLKEM1024,
    &X25519MLKEM768,
    &SECP256R1MLKEM768,
];

/// The reused form of `group`, when there is one (ffdhe and the other groups keep fresh
/// shares).
pub(crate) fn reused(group: NamedGroup) -> Option<&'static dyn SupportedKxGroup> {
    let found: Option<&'static Reused> = GROUPS.iter().copied().find(|g| g.name == group);
    found.map(|g| g as &'static dyn SupportedKxGroup)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each reused group agrees with rustls's own aws-lc-rs group acting as the server: the
    /// same secret on both sides, the same share from one connection to the next.
    #[test]
    fn a_reused_share_agrees_with_a_fresh_server_share_and_does_not_change() {
        for g in GROUPS {
            let server = rustls::crypto::aws_lc_rs::ALL_KX_GROUPS
                .iter()
                .find(|k| k.name() == g.name)
                .unwrap_or_else(|| panic!("aws-lc-rs has no {:?}", g.name));
            let ours = reused(g.name).expect("listed");
            let first = ours.start().expect("start");
            let second = ours.start().expect("start");
            assert_eq!(first.pub_key(), second.pub_key(), "{:?}", g.name);
            let done = server.start_and_complete(first.pub_key()).expect("server");
            let secret = first.complete(&done.pub_key).expect("client");
            assert_eq!(
                secret.secret_bytes(),
                done.secret.secret_bytes(),
                "{:?}",
                g.name
            );
        }
    }

    #[test]
    fn a_share_of_the_wrong_length_is_refused() {
        let ours = reused(NamedGroup::X25519MLKEM768).expect("listed");
        let kx = ours.start().expect("start");
        assert!(kx.complete(&[0u8; 40]).is_err());
    }

    #[test]
    fn the_hybrid_component_is_the_curve_half_of_the_share() {
        let ours = reused(NamedGroup::X25519MLKEM768).expect("listed");
        let kx = ours.start().expect("start");
        let (group, half) = kx.hybrid_component().expect("hybrid");
        assert_eq!(group, NamedGroup::X25519);
        assert_eq!(half, &kx.pub_key()[1184..]);
        let server = rustls::crypto::aws_lc_rs::kx_group::X25519;
        let done = server.start_and_complete(half).expect("server");
        let secret = kx.complete_hybrid_component(&done.pub_key).expect("client");
        assert_eq!(secret.secret_bytes(), done.secret.secret_bytes());
    }
}
