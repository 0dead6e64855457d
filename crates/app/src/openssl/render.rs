//! `tlsscope openssl list` as text.

use ossl_build::Listing;

/// The system library's line: name, version number and path, or why there is none usable.
pub fn system(library: &Result<(String, u64, std::path::PathBuf), String>) -> String {
    match library {
        Ok((name, number, path)) => format!(
            "system: {name} (version number 0x{number:08x}, {})\n",
            path.display()
        ),
        Err(e) => format!("system: no usable OpenSSL ({e})\n"),
    }
}

/// The builds as a table, or how to make one if there are none.
pub fn builds(listing: &Listing) -> String {
    match listing {
        Listing::Empty { root } => format!("{}\n", crate::common::wording::empty_cache(root)),
        Listing::Builds { header, rows } => crate::render::table::Table {
            header: header.clone(),
            rows: rows.clone(),
        }
        .aligned(),
    }
}
