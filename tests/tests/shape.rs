//! The shape of the source: no file over 1,000 lines and no function over 150 in `core/src`,
//! `bins/src` and `sim/src`, so every file and every function can be read at once. Functions
//! are found by their `fn` line and measured to their closing brace (strings, characters and
//! comments skipped).

use std::path::{Path, PathBuf};

const FILE_LINES_MAX: usize = 1_000;
const FN_LINES_MAX: usize = 150;

/// Every `.rs` file under `dir`, in name order.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|x| x == "rs") {
            found.push(path);
        }
    }
}

/// `line` with string and character literals blanked and its `//` comment cut, so that only
/// the code's own braces count.
fn code_of(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut code = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => break,
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                code.push_str("\"\"");
            }
            '\'' if chars.get(i + 2) == Some(&'\'') && chars.get(i + 1) != Some(&'\\') => i += 2,
            '\'' if chars.get(i + 1) == Some(&'\\') => {
                while i + 1 < chars.len() && chars[i + 1] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            c => code.push(c),
        }
        i += 1;
    }
    code
}

/// Whether `line` starts a function (`fn`, with any qualifiers before it).
fn starts_fn(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while let Some(word) = words.next() {
        match word {
            "pub" | "async" | "const" | "unsafe" | "extern" => continue,
            w if w.starts_with("pub(") => continue,
            "fn" => {
                return words
                    .next()
                    .map(|name| name.split(['(', '<']).next().unwrap_or(""))
            }
            _ => return None,
        }
    }
    None
}

/// The functions of `lines` longer than [`FN_LINES_MAX`]: (name, first line, length).
fn long_functions(lines: &[&str]) -> Vec<(String, usize, usize)> {
    let mut long = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = starts_fn(line) else {
            continue;
        };
        let (mut depth, mut opened) = (0i64, false);
        for (offset, next) in lines[start..].iter().enumerate() {
            let code = code_of(next);
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if !opened && code.trim_end().ends_with(';') {
                break;
            }
            if opened && depth <= 0 {
                if offset + 1 > FN_LINES_MAX {
                    long.push((name.to_string(), start + 1, offset + 1));
                }
                break;
            }
        }
    }
    long
}

#[test]
fn no_file_or_function_is_too_long_to_read_at_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["core/src", "bins/src", "sim/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 100,
        "the sources were not found under {}",
        root.display()
    );
    let mut problems = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a source file");
        let lines: Vec<&str> = text.lines().collect();
        let shown = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        if lines.len() > FILE_LINES_MAX {
            problems.push(format!(
                "{shown}: {} lines (at most {FILE_LINES_MAX})",
                lines.len()
            ));
        }
        for (name, line, length) in long_functions(&lines) {
            problems.push(format!(
                "{shown}:{line}: fn {name} is {length} lines (at most {FN_LINES_MAX})"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_measure_finds_a_long_function_and_skips_braces_in_literals() {
    let mut source = vec![
        "pub(crate) async fn long() {",
        "    let s = \"}}}\";",
        "    let c = '}';",
    ];
    source.extend(std::iter::repeat_n("    work();", FN_LINES_MAX));
    source.push("}");
    source.push("fn short() { done(); }");
    let long = long_functions(&source);
    assert_eq!(long, vec![("long".to_string(), 1, FN_LINES_MAX + 4)]);
}
