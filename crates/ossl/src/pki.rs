//! Keys and certificates: generated at start for the built-in server, or read from PEM files.

use std::ffi::{c_int, c_long, c_void, CString};
use std::fmt;
use std::path::Path;
use std::ptr;
use std::str::FromStr;

use crate::error::{Error, ErrorQueue};
use crate::ffi;
use crate::library::Library;

/// The kinds of key (and self-signed certificate) tlsscope can generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CertType {
    Rsa2048,
    Rsa3072,
    Rsa4096,
    EcdsaP256,
    EcdsaP384,
    Ed25519,
}

impl CertType {
    /// Every type, in the order the help text lists them.
    pub const ALL: [CertType; 6] = [
        CertType::Rsa2048,
        CertType::Rsa3072,
        CertType::Rsa4096,
        CertType::EcdsaP256,
        CertType::EcdsaP384,
        CertType::Ed25519,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            CertType::Rsa2048 => "rsa2048",
            CertType::Rsa3072 => "rsa3072",
            CertType::Rsa4096 => "rsa4096",
            CertType::EcdsaP256 => "ecdsa-p256",
            CertType::EcdsaP384 => "ecdsa-p384",
            CertType::Ed25519 => "ed25519",
        }
    }
}

impl fmt::Display for CertType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A cert type name that is not one of [`CertType::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown certificate type {0:?}: use one of rsa2048, rsa3072, rsa4096, ecdsa-p256, ecdsa-p384, ed25519")]
pub struct UnknownCertType(pub String);

impl FromStr for CertType {
    type Err = UnknownCertType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CertType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCertType(s.to_string()))
    }
}

/// A private key (`EVP_PKEY`).
pub struct PrivateKey {
    lib: &'static Library,
    ptr: *mut ffi::EVP_PKEY,
}

// SAFETY: an EVP_PKEY is immutable after creation here and OpenSSL allows using one key from
// several threads (it is reference-counted with atomic counters).
unsafe impl Send for PrivateKey {}
// SAFETY: as above.
unsafe impl Sync for PrivateKey {}

impl Drop for PrivateKey {
    fn drop(&mut self) {
        // SAFETY: we own one reference to the key.
        unsafe { (self.lib.api().EVP_PKEY_free)(self.ptr) }
    }
}

/// An X.509 certificate.
pub struct Certificate {
    lib: &'static Library,
    ptr: *mut ffi::X509,
}

// SAFETY: the certificate is not modified after it is built; X509 objects are reference
// counted atomically.
unsafe impl Send for Certificate {}
// SAFETY: as above.
unsafe impl Sync for Certificate {}

impl Drop for Certificate {
    fn drop(&mut self) {
        // SAFETY: we own one reference to the certificate.
        unsafe { (self.lib.api().X509_free)(self.ptr) }
    }
}

/// A key and its certificate.
pub struct Credentials {
    pub key: PrivateKey,
    pub cert: Certificate,
}

impl PrivateKey {
    /// Generates a fresh key of the given type.
    pub fn generate(lib: &'static Library, kind: CertType) -> Result<PrivateKey, Error> {
        let api = lib.api();
        let (pkey_id, ctrl) = match kind {
            CertType::Rsa2048 => (ffi::NID_RSA_ENCRYPTION, Some(rsa_bits(2048))),
            CertType::Rsa3072 => (ffi::NID_RSA_ENCRYPTION, Some(rsa_bits(3072))),
            CertType::Rsa4096 => (ffi::NID_RSA_ENCRYPTION, Some(rsa_bits(4096))),
            CertType::EcdsaP256 => (ffi::NID_EC_PUBLIC_KEY, Some(ec_curve(ffi::NID_PRIME256V1))),
            CertType::EcdsaP384 => (ffi::NID_EC_PUBLIC_KEY, Some(ec_curve(ffi::NID_SECP384R1))),
            CertType::Ed25519 => (lib.nid_ed().0, None),
        };
        let failed = |step: &str| Error::OpenSsl {
            what: format!("generating a {kind} key ({step})"),
            queue: ErrorQueue::take(lib),
        };
        // SAFETY: every pointer passed is either null (allowed: no engine, no out-param yet) or
        // one OpenSSL just returned; the context is freed on every path below.
        unsafe {
            let ctx = (api.EVP_PKEY_CTX_new_id)(pkey_id, ptr::null_mut());
            if ctx.is_null() {
                return Err(failed("EVP_PKEY_CTX_new_id"));
            }
            let mut key: *mut ffi::EVP_PKEY = ptr::null_mut();
            let ok = (api.EVP_PKEY_keygen_init)(ctx) > 0
                && ctrl.is_none_or(|c| keygen_ctrl(lib, ctx, pkey_id, c))
                && (api.EVP_PKEY_keygen)(ctx, &mut key) > 0;
            (api.EVP_PKEY_CTX_free)(ctx);
            if !ok || key.is_null() {
                return Err(failed("EVP_PKEY_keygen"));
            }
            Ok(PrivateKey { lib, ptr: key })
        }
    }

    /// Reads a PEM private key (unencrypted).
    pub fn from_pem(lib: &'static Library, pem: &[u8], path: &Path) -> Result<PrivateKey, Error> {
        let api = lib.api();
        let bio = MemBio::from_bytes(lib, pem)?;
        // SAFETY: the BIO is live; null out-param, callback and password are allowed.
        let ptr = unsafe {
            (api.PEM_read_bio_PrivateKey)(
                bio.ptr,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if ptr.is_null() {
            return Err(Error::Pem {
                what: "private key",
                path: path.to_path_buf(),
                queue: ErrorQueue::take(lib),
            });
        }
        Ok(PrivateKey { lib, ptr })
    }

    /// The key in PEM (PKCS#8, unencrypted).
    pub fn to_pem(&self) -> Result<String, Error> {
        let bio = MemBio::new(self.lib)?;
        // SAFETY: the BIO and key are live; no cipher, password or callback.
        let ok = unsafe {
            (self.lib.api().PEM_write_bio_PrivateKey)(
                bio.ptr,
                self.ptr,
                ptr::null(),
                ptr::null(),
                0,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if ok != 1 {
            return Err(Error::OpenSsl {
                what: "writing the private key as PEM".into(),
                queue: ErrorQueue::take(self.lib),
            });
        }
        Ok(bio.contents())
    }

    /// What kind of key this is, e.g. "RSA-2048", "ECDSA-P256", "Ed25519".
    pub fn describe(&self) -> String {
        describe_pkey(self.lib, self.ptr)
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::EVP_PKEY {
        self.ptr
    }
}

/// Applies a key generation parameter: through `EVP_PKEY_CTX_set_rsa_keygen_bits` or
/// `..._set_ec_paramgen_curve_nid` where they are functions (3.x, AWS-LC, BoringSSL), else
/// through `EVP_PKEY_CTX_ctrl`, which those macros stand for in 1.1.1.
///
/// # Safety
/// `ctx` must be a live key generation context of `lib`, set up for `pkey_id`.
unsafe fn keygen_ctrl(
    lib: &Library,
    ctx: *mut ffi::EVP_PKEY_CTX,
    pkey_id: c_int,
    c: KeygenCtrl,
) -> bool {
    let api = lib.api();
    let function = match c.cmd {
        ffi::EVP_PKEY_CTRL_RSA_KEYGEN_BITS => api.EVP_PKEY_CTX_set_rsa_keygen_bits,
        _ => api.EVP_PKEY_CTX_set_ec_paramgen_curve_nid,
    };
    // SAFETY: the caller vouches for `ctx`; both functions take an int.
    unsafe {
        match (function, api.EVP_PKEY_CTX_ctrl) {
            (Some(set), _) => set(ctx, c.p1) > 0,
            (None, Some(ctrl)) => ctrl(ctx, pkey_id, c.op, c.cmd, c.p1, ptr::null_mut()) > 0,
            (None, None) => false,
        }
    }
}

struct KeygenCtrl {
    op: c_int,
    cmd: c_int,
    p1: c_int,
}

fn rsa_bits(bits: c_int) -> KeygenCtrl {
    KeygenCtrl {
        op: ffi::EVP_PKEY_OP_KEYGEN,
        cmd: ffi::EVP_PKEY_CTRL_RSA_KEYGEN_BITS,
        p1: bits,
    }
}

fn ec_curve(nid: c_int) -> KeygenCtrl {
    KeygenCtrl {
        op: ffi::EVP_PKEY_OP_PARAMGEN | ffi::EVP_PKEY_OP_KEYGEN,
        cmd: ffi::EVP_PKEY_CTRL_EC_PARAMGEN_CURVE_NID,
        p1: nid,
    }
}

impl Certificate {
    /// Makes a self-signed certificate for `key`, valid from now for `days`, naming `cn` as its
    /// subject and `alt_names` (e.g. "DNS:localhost", "IP:127.0.0.1") as subjectAltName.
    pub fn self_signed(
        key: &PrivateKey,
        cn: &str,
        alt_names: &[&str],
        days: u32,
    ) -> Result<Certificate, Error> {
        let lib = key.lib;
        let api = lib.api();
        let failed = |step: &str| Error::OpenSsl {
            what: format!("making a self-signed certificate ({step})"),
            queue: ErrorQueue::take(lib),
        };
        let cn_c = CString::new(cn).map_err(|_| failed("common name has a NUL byte"))?;
        let san = CString::new(alt_names.join(",")).map_err(|_| failed("alt name has a NUL"))?;
        // SAFETY: `x` is a fresh certificate we own (freed by `cert`'s Drop on every path once
        // wrapped); the other pointers are OpenSSL's own objects inside it, or live CStrings.
        unsafe {
            let x = (api.X509_new)();
            if x.is_null() {
                return Err(failed("X509_new"));
            }
            let cert = Certificate { lib, ptr: x };
            let serial = random_serial();
            let name = (api.X509_get_subject_name)(x);
            let ok = (api.X509_set_version)(x, 2) == 1
                && (api.ASN1_INTEGER_set)((api.X509_get_serialNumber)(x), serial) == 1
                && !(api.X509_gmtime_adj)((api.X509_getm_notBefore)(x), -3600).is_null()
                && !(api.X509_gmtime_adj)((api.X509_getm_notAfter)(x), days as c_long * 86_400)
                    .is_null()
                && (api.X509_set_pubkey)(x, key.ptr) == 1
                && lib.x509_name_add_text(name, c"CN", &cn_c)
                && (api.X509_set_issuer_name)(x, name) == 1;
            if !ok {
                return Err(failed("setting fields"));
            }
            if !alt_names.is_empty() {
                let ext = (api.X509V3_EXT_conf_nid)(
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ffi::NID_SUBJECT_ALT_NAME,
                    san.as_ptr(),
                );
                if ext.is_null() {
                    return Err(failed("subjectAltName"));
                }
                let added = (api.X509_add_ext)(x, ext, -1);
                (api.X509_EXTENSION_free)(ext);
                if added != 1 {
                    return Err(failed("X509_add_ext"));
                }
            }
            // Ed25519 signs without a separate digest; everything else uses SHA-256.
            let md = if (api.EVP_PKEY_get_id)(key.ptr) == lib.nid_ed().0 {
                ptr::null()
            } else {
                (api.EVP_sha256)()
            };
            if (api.X509_sign)(x, key.ptr, md) <= 0 {
                return Err(failed("X509_sign"));
            }
            Ok(cert)
        }
    }

    /// Reads the first certificate of a PEM file's contents.
    pub fn from_pem(lib: &'static Library, pem: &[u8], path: &Path) -> Result<Certificate, Error> {
        let bio = MemBio::from_bytes(lib, pem)?;
        // SAFETY: the BIO is live; null out-param and callback are allowed.
        let ptr = unsafe {
            (lib.api().PEM_read_bio_X509)(
                bio.ptr,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if ptr.is_null() {
            return Err(Error::Pem {
                what: "certificate",
                path: path.to_path_buf(),
                queue: ErrorQueue::take(lib),
            });
        }
        Ok(Certificate { lib, ptr })
    }

    /// Reads a certificate in DER, as a TLS peer sends it.
    pub fn from_der(lib: &'static Library, der: &[u8]) -> Result<Certificate, Error> {
        let len = c_long::try_from(der.len()).map_err(|_| Error::OpenSsl {
            what: "d2i_X509".into(),
            queue: ErrorQueue::default(),
        })?;
        let mut cursor = der.as_ptr();
        // SAFETY: `cursor` points at `len` readable bytes that outlive the call; d2i only reads
        // them (and advances the cursor); a null out-param asks for a new object.
        let ptr = unsafe { (lib.api().d2i_X509)(ptr::null_mut(), &mut cursor, len) };
        if ptr.is_null() {
            return Err(Error::OpenSsl {
                what: "d2i_X509".into(),
                queue: ErrorQueue::take(lib),
            });
        }
        Ok(Certificate { lib, ptr })
    }

    /// The certificate in PEM.
    pub fn to_pem(&self) -> Result<String, Error> {
        let bio = MemBio::new(self.lib)?;
        // SAFETY: the BIO and certificate are live.
        if unsafe { (self.lib.api().PEM_write_bio_X509)(bio.ptr, self.ptr) } != 1 {
            return Err(Error::OpenSsl {
                what: "writing the certificate as PEM".into(),
                queue: ErrorQueue::take(self.lib),
            });
        }
        Ok(bio.contents())
    }

    /// The kind of key the certificate carries, e.g. "RSA-2048".
    pub fn key_description(&self) -> String {
        // SAFETY: the certificate is live; get0 returns a borrowed key or null.
        let key = unsafe { (self.lib.api().X509_get0_pubkey)(self.ptr) };
        describe_pkey(self.lib, key)
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::X509 {
        self.ptr
    }
}

impl Credentials {
    /// A fresh key of `kind` and a self-signed certificate for localhost and the loopback
    /// addresses, valid for a year.
    pub fn generate(lib: &'static Library, kind: CertType) -> Result<Credentials, Error> {
        let key = PrivateKey::generate(lib, kind)?;
        let cert = Certificate::self_signed(
            &key,
            "localhost",
            &["DNS:localhost", "IP:127.0.0.1", "IP:::1"],
            365,
        )?;
        Ok(Credentials { key, cert })
    }

    /// Reads a certificate and key from PEM files, checking that they belong together.
    pub fn from_files(
        lib: &'static Library,
        cert_path: &Path,
        key_path: &Path,
    ) -> Result<Credentials, Error> {
        let read = |what, path: &Path| {
            std::fs::read(path).map_err(|source| Error::File {
                what,
                path: path.to_path_buf(),
                source,
            })
        };
        let cert = Certificate::from_pem(lib, &read("certificate", cert_path)?, cert_path)?;
        let key = PrivateKey::from_pem(lib, &read("private key", key_path)?, key_path)?;
        Ok(Credentials { key, cert })
    }
}

/// Names a key the way reports do: algorithm and size.
pub(crate) fn describe_pkey(lib: &Library, key: *const ffi::EVP_PKEY) -> String {
    if key.is_null() {
        return "none".into();
    }
    let api = lib.api();
    // SAFETY: `key` is a live key owned by the caller.
    let (id, bits) = unsafe { ((api.EVP_PKEY_get_id)(key), (api.EVP_PKEY_get_bits)(key)) };
    let (ed25519, ed448) = lib.nid_ed();
    match id {
        ffi::NID_RSA_ENCRYPTION => format!("RSA-{bits}"),
        ffi::NID_RSASSA_PSS => format!("RSA-PSS-{bits}"),
        ffi::NID_EC_PUBLIC_KEY => match bits {
            256 => "ECDSA-P256".into(),
            384 => "ECDSA-P384".into(),
            521 => "ECDSA-P521".into(),
            _ => format!("ECDSA-{bits}"),
        },
        id if id == ed25519 => "Ed25519".into(),
        id if id == ed448 => "Ed448".into(),
        // SAFETY: OBJ_nid2sn returns a static string or null.
        other => unsafe { ffi::string((api.OBJ_nid2sn)(other)) }
            .map(|n| format!("{n}-{bits}"))
            .unwrap_or_else(|| format!("nid{other}-{bits}")),
    }
}

fn random_serial() -> c_long {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(1);
    // Positive and non-zero; uniqueness is all a self-signed test certificate needs.
    ((nanos ^ (std::process::id() as u128) << 32) as c_long & 0x7fff_ffff_ffff) | 1
}

/// A memory BIO that frees itself.
struct MemBio {
    lib: &'static Library,
    ptr: *mut ffi::BIO,
}

impl MemBio {
    fn new(lib: &'static Library) -> Result<MemBio, Error> {
        // SAFETY: BIO_s_mem returns a static method table.
        let ptr = unsafe { (lib.api().BIO_new)((lib.api().BIO_s_mem)()) };
        Self::wrap(lib, ptr)
    }

    fn from_bytes(lib: &'static Library, bytes: &[u8]) -> Result<MemBio, Error> {
        if c_int::try_from(bytes.len()).is_err() {
            return Err(Error::OpenSsl {
                what: "reading PEM (file over 2 GiB)".into(),
                queue: ErrorQueue::default(),
            });
        }
        // SAFETY: the read-only BIO borrows `bytes`, which outlives it (dropped in this scope's
        // callers before `bytes`).
        let ptr = unsafe { lib.bio_new_mem_buf(bytes) };
        Self::wrap(lib, ptr)
    }

    fn wrap(lib: &'static Library, ptr: *mut ffi::BIO) -> Result<MemBio, Error> {
        if ptr.is_null() {
            return Err(Error::OpenSsl {
                what: "BIO_new".into(),
                queue: ErrorQueue::take(lib),
            });
        }
        Ok(MemBio { lib, ptr })
    }

    fn contents(&self) -> String {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: BIO_get_mem_data is BIO_ctrl(BIO_CTRL_INFO) storing a pointer to the BIO's
        // buffer into `data` and returning its length; the buffer lives as long as the BIO.
        unsafe {
            let len = (self.lib.api().BIO_ctrl)(
                self.ptr,
                ffi::BIO_CTRL_INFO,
                0,
                (&mut data as *mut *mut c_void).cast(),
            );
            if data.is_null() || len <= 0 {
                return String::new();
            }
            let bytes = std::slice::from_raw_parts(data as *const u8, len as usize);
            String::from_utf8_lossy(bytes).into_owned()
        }
    }
}

impl Drop for MemBio {
    fn drop(&mut self) {
        // SAFETY: we own the BIO.
        unsafe { (self.lib.api().BIO_free)(self.ptr) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_type_names_round_trip() {
        for t in CertType::ALL {
            assert_eq!(t.name().parse::<CertType>().unwrap(), t);
        }
        let err = "rsa1024".parse::<CertType>().unwrap_err().to_string();
        assert!(
            err.contains("rsa1024") && err.contains("ecdsa-p256"),
            "{err}"
        );
    }
}
