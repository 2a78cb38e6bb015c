//! Readable tables: columns padded to their widest cell, every cell escaped.

use std::io::Write;

use crate::error::CliError;
use crate::escape::escape;

/// A table to print: a header row, then rows of cells.
#[derive(Debug)]
pub(crate) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; its cells are escaped here, so callers may pass text from
    /// the log as it is.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(
            cells.len(),
            self.headers.len(),
            "a row has one cell per column"
        );
        self.rows
            .push(cells.iter().map(|cell| escape(cell).into_owned()).collect());
    }

    /// Writes the table, each line indented by `indent` spaces. The last
    /// column is not padded, so long explanations do not push others apart.
    pub(crate) fn write(&self, out: &mut dyn Write, indent: usize) -> Result<(), CliError> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let headers: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = " ".repeat(indent);
            for (index, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if index + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(width - cell.chars().count() + 2));
                }
            }
            writeln!(out, "{}", line.trim_end()).map_err(CliError::output)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against columns that do not line up, and unescaped cells.
    #[test]
    fn columns_are_padded_and_cells_escaped() {
        let mut table = Table::new(&["seq", "key", "what"]);
        table.row(vec!["1".into(), "req\u{1b}".into(), "claimed".into()]);
        table.row(vec!["10".into(), "k".into(), "refused".into()]);
        let mut out = Vec::new();
        table.write(&mut out, 2).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  seq  key        what\n  1    req\\u{1b}  claimed\n  10   k          refused\n"
        );
    }
}
