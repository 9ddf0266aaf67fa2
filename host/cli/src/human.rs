//! How output for people looks: tables sized to the terminal (or `COLUMNS`) with long cells cut
//! with `…`, relative times ("4 min ago", "in 23 h"), and colour on a terminal only (never with
//! `NO_COLOR` set to anything, or when stdout is not a terminal). `--wide` shows everything in
//! full: whole ids, RFC 3339 times, no cut. JSON output never changes with any of this.

use crate::Cli;
use chrono::{DateTime, SecondsFormat, Utc};
use comfy_table::{Attribute, Cell, Color, ColumnConstraint, ContentArrangement, Row, Table};
use std::io::IsTerminal;

/// What the human output of one command looks like.
#[derive(Debug, Clone)]
pub struct Look {
    /// `--wide`: full ids and times, nothing cut.
    pub wide: bool,
    /// Colour escapes are written.
    pub colour: bool,
    /// The width tables fit in (`None`: no limit).
    pub width: Option<u16>,
    /// The time relative times are counted from.
    pub now: DateTime<Utc>,
}

impl Look {
    /// The look for this invocation: `COLUMNS` (a positive number) or the terminal's width,
    /// colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    pub fn new(cli: &Cli) -> Self {
        let terminal = std::io::stdout().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.trim().parse::<u16>().ok())
            .filter(|c| *c > 0);
        let width = columns.or_else(|| {
            terminal
                .then(|| console::Term::stdout().size_checked())
                .flatten()
                .map(|(_, cols)| cols)
                .filter(|c| *c > 0)
        });
        Self {
            wide: cli.wide,
            colour: terminal && !no_color,
            width: if cli.wide { None } else { width },
            now: Utc::now(),
        }
    }

    /// An empty table with `header`, fitted to the width (rows one line high, cut with `…`).
    pub fn table(&self, header: &[&str]) -> Table {
        let mut table = Table::new();
        let header: Vec<Cell> = header
            .iter()
            .map(|h| {
                let cell = Cell::new(h);
                if self.colour {
                    cell.add_attribute(Attribute::Bold)
                } else {
                    cell
                }
            })
            .collect();
        table.set_header(header);
        if self.colour {
            table.enforce_styling();
        } else {
            table.force_no_tty();
        }
        match self.width {
            Some(width) => {
                table
                    .set_content_arrangement(ContentArrangement::Dynamic)
                    .set_width(width)
                    .set_truncation_indicator("…");
            }
            None => {
                table.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        table
    }

    /// Adds a row, one line high unless `--wide`.
    pub fn add_row(&self, table: &mut Table, cells: Vec<Cell>) {
        let mut row = Row::from(cells);
        if !self.wide {
            row.max_height(1);
        }
        table.add_row(row);
    }

    /// Keeps the columns `whole` (ids) at their content's width: the others give way first.
    pub fn keep_whole(&self, table: &mut Table, whole: &[usize]) {
        for index in whole {
            if let Some(column) = table.column_mut(*index) {
                column.set_constraint(ColumnConstraint::ContentWidth);
            }
        }
    }

    /// A cell coloured by the word it holds (statuses, lifecycles, outcomes).
    pub fn word(&self, text: &str) -> Cell {
        self.cell_like(text.to_string(), text)
    }

    /// A cell holding `content`, coloured as the word `like` would be.
    pub fn cell_like(&self, content: String, like: &str) -> Cell {
        let cell = Cell::new(content);
        match colour_of(like) {
            Some(colour) if self.colour => cell.fg(colour),
            _ => cell,
        }
    }

    /// Text for a line of plain text, coloured as the word `like` would be.
    pub fn paint_like(&self, text: &str, like: &str) -> String {
        match colour_of(like).filter(|_| self.colour) {
            Some(colour) => {
                let code = match colour {
                    Color::Yellow => 33,
                    Color::Green => 32,
                    Color::Red => 31,
                    Color::Cyan => 36,
                    Color::Magenta => 35,
                    _ => 90,
                };
                format!("\x1b[{code}m{text}\x1b[0m")
            }
            None => text.to_string(),
        }
    }

    /// A cell of text that m3 did not write (a server's names, keys, messages), its control
    /// characters shown as escapes (`escaped.rs`).
    pub fn text(&self, text: &str) -> Cell {
        Cell::new(crate::escaped::line(text))
    }

    /// A line of text cut to the width with `…` (whole with `--wide` or no width), its control
    /// characters shown as escapes first (`escaped.rs`): what it holds may come from a server,
    /// and the cut counts characters.
    pub fn fit(&self, line: &str) -> String {
        let line = crate::escaped::line(line);
        match self.width.map(usize::from) {
            Some(width) if line.chars().count() > width => {
                let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
                cut.push('…');
                cut
            }
            _ => line.to_string(),
        }
    }

    /// A time: relative to now ("4 min ago", "in 23 h", "just now"), or RFC 3339 with `--wide`.
    pub fn time(&self, t: DateTime<Utc>) -> String {
        if self.wide {
            return t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
        }
        relative(t, self.now)
    }
}

/// The colour a status, lifecycle or outcome word is shown in.
fn colour_of(text: &str) -> Option<Color> {
    Some(match text {
        "pending" | "waiting_for_input" => Color::Yellow,
        "resolved" | "succeeded" => Color::Green,
        "failed" => Color::Red,
        "response_validated" | "delivery_started" | "delivered" | "running" => Color::Cyan,
        "cancelled" => Color::Magenta,
        "queued" => Color::DarkGrey,
        _ => return None,
    })
}

/// `t` relative to `now`: "just now" within 10 s, then seconds, minutes, hours, days.
pub fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let delta = t.signed_duration_since(now);
    let secs = delta.num_seconds().unsigned_abs();
    if secs < 10 {
        return "just now".into();
    }
    let amount = match secs {
        0..60 => format!("{secs} s"),
        60..3_600 => format!("{} min", secs / 60),
        3_600..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} d", secs / 86_400),
    };
    if delta.num_seconds() > 0 {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

#[cfg(test)]
mod tests {
    use super::relative;
    use chrono::{TimeDelta, Utc};

    #[test]
    fn relative_times_read_like_speech() {
        let now = Utc::now();
        assert_eq!(relative(now, now), "just now");
        assert_eq!(relative(now - TimeDelta::seconds(30), now), "30 s ago");
        assert_eq!(relative(now - TimeDelta::seconds(240), now), "4 min ago");
        assert_eq!(relative(now + TimeDelta::hours(23), now), "in 23 h");
        assert_eq!(relative(now - TimeDelta::days(3), now), "3 d ago");
    }
}
