//! Where a key sits in a TOML file, for error messages.
//!
//! Layer: application configuration, text only. `toml` reports a byte span
//! but not the dotted key; the engine reports a key but not the line. Both
//! are recovered here from the text with a line-oriented reading that
//! knows table headers (`[a.b]`, and `[[a]]` whose entries are named
//! `a[0]`, `a[1]`, ... in file order) and `key = value` lines, which is
//! all the project's config files use. Never fails: an unknown position
//! yields no line, or the nearest key above it.

/// The 1-based line holding byte `offset` of `text`.
pub fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The dotted key set on `line` (1-based): its table's header joined with
/// the key, or the header itself on a header line. A line inside a
/// multi-line value names the key whose value it continues. Empty when
/// nothing precedes the line.
pub fn key_at(text: &str, line: usize) -> String {
    let mut found = String::new();
    for entry in entries(text).take_while(|e| e.line <= line) {
        match entry.kind {
            Kind::Header(header) => found = header,
            Kind::Key(key) => found = key,
            Kind::Other => {}
        }
    }
    found
}

/// The line where `dotted` is set, if the file sets it (the last time, as
/// a duplicate is a parse error anyway).
pub fn line_of(text: &str, dotted: &str) -> Option<usize> {
    entries(text)
        .filter(|e| matches!(&e.kind, Kind::Key(key) | Kind::Header(key) if key == dotted))
        .map(|e| e.line)
        .last()
}

struct Entry {
    line: usize,
    kind: Kind,
}

enum Kind {
    /// `[a.b]`: the table's dotted name.
    Header(String),
    /// `k = v` under a header: `header.k`.
    Key(String),
    /// Blank, comment or a continuation of a multi-line value.
    Other,
}

fn entries(text: &str) -> impl Iterator<Item = Entry> + '_ {
    let mut table = String::new();
    // How many entries each `[[array]]` has had so far.
    let mut arrays: Vec<(String, usize)> = Vec::new();
    text.lines().enumerate().map(move |(n, raw)| {
        let line = raw.trim();
        let kind = if let Some(rest) = line.strip_prefix("[[") {
            // `[[array]]`: its next entry, `array[i]`.
            let name = normalize(rest.split(']').next().unwrap_or(""));
            let index = match arrays.iter_mut().find(|(a, _)| *a == name) {
                Some((_, count)) => {
                    *count += 1;
                    *count - 1
                }
                None => {
                    arrays.push((name.clone(), 1));
                    0
                }
            };
            table = format!("{name}[{index}]");
            Kind::Header(table.clone())
        } else if let Some(rest) = line.strip_prefix('[') {
            let name = rest.split(']').next().unwrap_or("");
            table = normalize(name);
            Kind::Header(table.clone())
        } else if line.starts_with('#') || !line.contains('=') {
            Kind::Other
        } else {
            let key = normalize(line.split('=').next().unwrap_or(""));
            if key.is_empty() || key.contains(['"', ',', ']']) {
                Kind::Other
            } else if table.is_empty() {
                Kind::Key(key)
            } else {
                Kind::Key(format!("{table}.{key}"))
            }
        };
        Entry { line: n + 1, kind }
    })
}

/// `a . "b"` → `a.b`.
fn normalize(key: &str) -> String {
    key.split('.')
        .map(|part| part.trim().trim_matches(['"', '\'']))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# comment\nseed = 1\n\n[delivery]\ntx_window = 8 # packets\n\n[rue.swift]\nmax_fcwnd = 64.0\n\n[workload]\nsizes = [\n  64,\n  \"x\",\n]\n";

    #[test]
    fn lines_and_keys_agree() {
        assert_eq!(line_at(TEXT, 0), 1);
        let offset = TEXT.find("tx_window").unwrap();
        assert_eq!(line_at(TEXT, offset), 5);
        assert_eq!(key_at(TEXT, 5), "delivery.tx_window");
        assert_eq!(key_at(TEXT, 4), "delivery");
        assert_eq!(key_at(TEXT, 2), "seed");
        assert_eq!(key_at(TEXT, 1), "");
        assert_eq!(key_at(TEXT, 8), "rue.swift.max_fcwnd");
        // Inside a multi-line array: the key it belongs to.
        assert_eq!(key_at(TEXT, 13), "workload.sizes");
        assert_eq!(line_of(TEXT, "delivery.tx_window"), Some(5));
        assert_eq!(line_of(TEXT, "rue.swift.max_fcwnd"), Some(8));
        assert_eq!(line_of(TEXT, "rue.swift"), Some(7));
        assert_eq!(line_of(TEXT, "delivery.initial_fcwnd"), None);
        assert_eq!(line_at(TEXT, usize::MAX), TEXT.lines().count() + 1);
    }

    #[test]
    fn array_table_entries_are_numbered_in_file_order() {
        let text = "[[peers]]\nname = \"a\"\n\n[[connections]]\npeer = \"a\"\n[[peers]]\nname = \"b\"\n[[connections]]\npeer = \"b\"\ncount = 2\n";
        assert_eq!(key_at(text, 2), "peers[0].name");
        assert_eq!(key_at(text, 5), "connections[0].peer");
        assert_eq!(key_at(text, 7), "peers[1].name");
        assert_eq!(line_of(text, "connections[1].count"), Some(10));
        assert_eq!(line_of(text, "connections[1]"), Some(8));
        assert_eq!(line_of(text, "connections[2]"), None);
    }

    #[test]
    fn quoted_and_spaced_keys_normalize() {
        let text = "[ rue . \"swift\" ]\n\"max_fcwnd\" = 1.0\n";
        assert_eq!(key_at(text, 2), "rue.swift.max_fcwnd");
    }
}
