//! The printed table every benchmark ends with.

/// A printed table: a title, a header and rows of cells, columns padded to fit.
#[derive(Debug, Clone)]
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with `title` and the column names `header`.
    pub fn new(title: &str, header: &[&str]) -> Self {
        Self {
            title: title.to_string(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as the header has names, or fewer).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text: the title, then the header, a rule and the rows, indented.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i == widths.len() {
                    widths.push(0);
                }
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c}{}", " ".repeat(widths[i] - c.chars().count())))
                .collect();
            format!("  {}\n", padded.join("  ").trim_end())
        };
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        let mut text = format!("\n{}\n", self.title);
        text.push_str(&line(&self.header));
        text.push_str(&line(&rule));
        for row in &self.rows {
            text.push_str(&line(row));
        }
        text
    }

    /// Prints [`Table::render`] to stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn columns_are_padded_to_their_widest_cell() {
        let mut table = Table::new("Title", &["name", "time"]);
        table.row(vec!["µs row".into(), "1.00 ms".into()]);
        table.row(vec!["x".into(), "2 s".into()]);
        assert_eq!(
            table.render(),
            "\nTitle\n  name    time\n  ------  -------\n  µs row  1.00 ms\n  x       2 s\n"
        );
    }
}
