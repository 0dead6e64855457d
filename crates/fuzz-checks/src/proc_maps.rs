//! `/proc/PID/maps` parsing (`probes::maps::parse_maps`), which reads a kernel-written file
//! whose last field, the path, is whatever name the process gave the file it mapped.
//!
//! Properties: parsing never panics; it yields at most one mapping per line; each path it
//! returns appears in the text; and the mappings written out again as maps lines parse to the
//! same mappings.

use std::path::Path;

use probes::{LibraryKind, Mapping};

/// Checks the maps parser on `data` (text; other bytes are skipped, as reading the file as a
/// string would refuse them); panics on a violation. Accepted: at least one mapping read.
pub fn check(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let mappings = probes::maps::parse_maps(text);
    assert!(
        mappings.len() <= text.lines().count(),
        "more mappings than lines"
    );
    for mapping in &mappings {
        if let Some(path) = &mapping.path {
            let path = path.to_str().expect("a path taken from text is text");
            assert!(text.contains(path), "{path:?} is not in the text");
            let _ = LibraryKind::of(Path::new(path));
        }
    }
    let written: Vec<String> = mappings.iter().map(maps_line).collect();
    // Lines end in '\n' alone, as the kernel writes them; a path may end in '\r'.
    let again = probes::maps::parse_maps(&(written.join("\n") + "\n"));
    assert_eq!(again, mappings, "written out as {written:?}");
    !mappings.is_empty()
}

/// `mapping` as the kernel would write it (device and inode, which are not kept, as zeros).
fn maps_line(mapping: &Mapping) -> String {
    let perms = if mapping.executable { "r-xp" } else { "r--p" };
    let path = mapping
        .path
        .as_deref()
        .map(|p| p.to_str().expect("a path taken from text is text"))
        .unwrap_or("");
    format!(
        "{:x}-{:x} {perms} {:08x} 00:00 0                          {path}",
        mapping.start, mapping.end, mapping.offset
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_maps_pass() {
        let text = std::fs::read("/proc/self/maps").expect("reading /proc/self/maps");
        assert!(check(&text));
    }
}
