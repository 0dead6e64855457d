//! A text table: aligned columns for the terminal, or Markdown.

/// One table: a header row and data rows, rendered as aligned text or Markdown.
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns padded to their widest cell, two spaces apart.
    pub fn aligned(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.header[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            padded.join("  ").trim_end().to_string() + "\n"
        };
        let mut out = line(&self.header);
        for r in &self.rows {
            out += &line(r);
        }
        out
    }

    /// A Markdown table.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = line(&self.header);
        out += &format!("|{}\n", "---|".repeat(self.header.len()));
        for r in &self.rows {
            out += &line(r);
        }
        out
    }
}
