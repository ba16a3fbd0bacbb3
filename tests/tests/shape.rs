//! The shape of the source: no file over 1,000 lines and no function over 150 in `core/src`,
//! `bins/src`, `tools/src` and `sim/src`, so every file and every function can be read at once
//! (functions are found by their `fn` line and measured to their closing brace, strings,
//! characters and comments skipped); the runtime's modules name each other without a circle;
//! the runtime names no tool, and the tools crate's layers point down.

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
    for dir in ["core/src", "bins/src", "tools/src", "sim/src"] {
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

/// The modules of `tributary-tools` that `cli/` and the tools themselves must not name: the
/// parse tree that names every tool, and the option rewriting that reads it.
const TOOLS_TOP: [&str; 2] = ["crate::command", "crate::jopt"];

/// The names in `text` (a tools source file at `shown`) that point up the crate's layers:
/// `jopt` → `command` → each tool → `cli` → `error`. A tool names only `cli`, `error` and the
/// runtime; `cli` names only itself, `error` and the runtime.
fn upward_names(shown: &str, text: &str, tools: &[String]) -> Vec<String> {
    let in_cli = shown.starts_with("tools/src/cli/");
    let top = [
        "tools/src/main.rs",
        "tools/src/lib.rs",
        "tools/src/command.rs",
        "tools/src/jopt.rs",
    ];
    if top.contains(&shown) {
        return Vec::new();
    }
    let mut found = Vec::new();
    for line in text.lines().map(code_of) {
        for name in TOOLS_TOP {
            if line.contains(name) {
                found.push(format!("{shown}: names {name}"));
            }
        }
        if in_cli {
            for tool in tools {
                if line.contains(&format!("crate::{tool}")) {
                    found.push(format!("{shown}: cli names the tool {tool}"));
                }
            }
        }
    }
    found
}

#[test]
fn the_runtime_names_no_tool_and_the_tools_arrows_point_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut problems = Vec::new();
    let mut runtime = Vec::new();
    rust_files(&root.join("bins/src"), &mut runtime);
    for path in &runtime {
        let text = std::fs::read_to_string(path).expect("a source file");
        if text
            .lines()
            .map(code_of)
            .any(|line| line.contains("tributary_tools"))
        {
            problems.push(format!(
                "{}: the runtime names the tools crate",
                path.display()
            ));
        }
    }
    let tools_dir = root.join("tools/src");
    let tools: Vec<String> = std::fs::read_dir(&tools_dir)
        .expect("tools/src")
        .map(|entry| entry.expect("a directory entry").path())
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_string()))
        .filter(|name| !["main", "lib", "command", "jopt", "cli", "error"].contains(&name.as_str()))
        .collect();
    assert!(
        tools.len() > 15,
        "the tools were not found under {}",
        tools_dir.display()
    );
    let mut files = Vec::new();
    rust_files(&tools_dir, &mut files);
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a source file");
        let shown = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        problems.extend(upward_names(&shown, &text, &tools));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_arrow_check_finds_a_tool_named_from_cli_and_the_parse_tree_named_from_a_tool() {
    let tools = vec!["demote".to_string()];
    let cli = upward_names(
        "tools/src/cli/mod.rs",
        "use crate::demote::DemoteArgs;\n",
        &tools,
    );
    assert_eq!(
        cli,
        vec!["tools/src/cli/mod.rs: cli names the tool demote".to_string()]
    );
    let tool = upward_names(
        "tools/src/demote/mod.rs",
        "use crate::command::Command;\n",
        &tools,
    );
    assert_eq!(
        tool,
        vec!["tools/src/demote/mod.rs: names crate::command".to_string()]
    );
    let fine = upward_names(
        "tools/src/demote/mod.rs",
        "use crate::cli::runtime; // crate::jopt\n",
        &tools,
    );
    assert!(fine.is_empty(), "{fine:?}");
}

/// Which modules each module names.
type Arrows = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

/// The runtime's top-level modules each name, from any of their files (`crate::<module>`).
fn runtime_arrows(root: &Path) -> Arrows {
    let src = root.join("bins/src");
    let mut modules: Vec<(String, Vec<PathBuf>)> = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&src)
        .expect("bins/src")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let Some(name) = path
            .file_stem()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if name == "lib" {
            continue;
        }
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
        modules.push((name, files));
    }
    let names: Vec<String> = modules.iter().map(|(name, _)| name.clone()).collect();
    modules
        .into_iter()
        .map(|(name, files)| {
            let mut named = std::collections::BTreeSet::new();
            for file in files {
                let text = std::fs::read_to_string(&file).expect("a source file");
                for line in text.lines().map(code_of) {
                    for other in names.iter().filter(|other| **other != name) {
                        let word = format!("crate::{other}");
                        let found = line.match_indices(&word).any(|(at, _)| {
                            let after = line[at + word.len()..].chars().next();
                            !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        });
                        if found {
                            named.insert(other.clone());
                        }
                    }
                }
            }
            (name, named)
        })
        .collect()
}

/// A cycle among `arrows`, if there is one (the modules on it, in order).
fn a_cycle(arrows: &Arrows) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        arrows: &Arrows,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            return Some(path[start..].to_vec());
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for next in arrows.get(at).into_iter().flatten() {
            if let Some(cycle) = visit(next, arrows, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    arrows
        .keys()
        .find_map(|start| visit(start, arrows, &mut Vec::new(), &mut done))
}

#[test]
fn the_runtimes_modules_name_each_other_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let arrows = runtime_arrows(&root);
    assert!(arrows.len() > 10, "the runtime's modules were not found");
    if let Some(cycle) = a_cycle(&arrows) {
        panic!(
            "bins/src's modules name each other in a circle: {}",
            cycle.join(" → ")
        );
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let arrows = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .into_iter()
        .fold(
            std::collections::BTreeMap::new(),
            |mut map: Arrows, (from, to)| {
                map.entry(from.to_string())
                    .or_default()
                    .insert(to.to_string());
                map
            },
        );
    assert_eq!(
        a_cycle(&arrows),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
}
