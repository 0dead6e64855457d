//! `tlsscope merge --html`: the merged run as bench's page shows a run, with the shards' table
//! first.

use model::bench::BenchDocument;

use crate::render::html::escape;

/// The page: the shards' table, then bench's page body for the merged run.
pub fn page(doc: &BenchDocument) -> String {
    let mut table = Vec::new();
    let _ = crate::merge::render::shards_table(&mut table, &doc.shards);
    let shards = format!(
        "<h2>Shards</h2>\n<pre>{}</pre>\n",
        escape(&String::from_utf8_lossy(&table))
    );
    let bench = crate::bench::page::page(doc);
    // bench's page, with the shards' table ahead of its report.
    match bench.find("<pre>") {
        Some(at) => format!("{}{shards}{}", &bench[..at], &bench[at..]),
        None => bench,
    }
}
