//! The layout rules of docs/src/development/architecture.md, checked by reading the source (no build, no cluster):
//!
//! - no function in `src/`, `webhooks/src` or `certs/src` is longer than [`MAX_FN_LINES`] lines
//!   unless a comment right above it says why (`// Long: <reason>`);
//! - no source file anywhere in the workspace (Rust, shell, Python, Go: [`FILE_RULE_DIRS`]) is
//!   longer than [`MAX_FILE_LINES`] lines unless its first lines say why (`//! Long: <reason>`, or
//!   `# Long: <reason>` in a script);
//! - no import circle between the top-level modules of `src/` (`crate::a` using `crate::b` using
//!   `crate::a`): each of them can be read, and moved, on its own.

mod tree;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longer than this, a function is read in pieces: split it into named steps, or say why not.
const MAX_FN_LINES: usize = 80;
/// Longer than this, a file is not read at once: split it by concern, or say why not at its top.
const MAX_FILE_LINES: usize = 800;
/// The crates whose functions are measured (paths from the workspace root).
const SOURCE_DIRS: [&str; 3] = ["src", "webhooks/src", "certs/src"];
/// Where the file-length rule looks (paths from the workspace root): every folder of source the
/// workspace holds, tests, tools and scripts included.
const FILE_RULE_DIRS: [&str; 8] = [
    "src",
    "webhooks",
    "certs",
    "tests",
    "tools/src",
    "benches",
    "fuzz/fuzz_targets",
    "hack",
];
/// The source files the file-length rule reads, by extension, each with how its first lines say why
/// it stays long.
const FILE_RULE_KINDS: [(&str, &str); 4] = [
    ("rs", "//! Long:"),
    ("sh", "# Long:"),
    ("py", "# Long:"),
    ("go", "// Long:"),
];
/// What a comment above a long function starts with to say why it stays long.
const LONG_MARKER: &str = "// Long:";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    tree::files_with_extension(dir, "rs")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// `text` with comments and string and character literals blanked (newlines kept, so line numbers
/// hold): braces and words inside them are not taken for code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0
                || !ident(chars[i - 1])
                || (chars[i - 1] == 'b' && (i < 2 || !ident(chars[i - 2]))))
        {
            // A raw string r"..." / r#"..."#: it ends at a quote followed by as many hashes.
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            out.push(c);
            for _ in i + 1..=j {
                out.push(' ');
            }
            i = j + 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    out.push(blank(c));
                }
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{1F600}'.
            out.push_str("  ");
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            // Code, or a lifetime's quote.
            out.push(c);
            i += 1;
        }
    }
    out
}

/// A function with a body, as written in one file.
#[derive(Debug)]
struct Function {
    name: String,
    /// 1-based line of its `fn` keyword.
    line: usize,
    /// From the `fn` line to the closing brace, both included.
    lines: usize,
}

/// Every function with a body in `code` (see [`code_only`]), nested ones included.
fn functions(code: &str) -> Vec<Function> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = code[at..].find("fn") {
        let start = at + offset;
        at = start + 2;
        let word = (start == 0 || !ident(bytes[start - 1]))
            && bytes
                .get(start + 2)
                .is_some_and(|b| b.is_ascii_whitespace());
        if !word {
            continue;
        }
        let name_start = start + 2 + code[start + 2..].len() - code[start + 2..].trim_start().len();
        let name: String = code[name_start..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body's opening brace, unless a `;` at the signature's top level comes first (a
        // declaration without a body, in a trait or an extern block).
        let mut depth = 0i32;
        let mut open = None;
        for (i, b) in bytes.iter().enumerate().skip(name_start) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut braces = 0i32;
        let mut close = None;
        for (i, b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        let line = line_of(start);
        found.push(Function {
            name,
            line,
            lines: line_of(close) - line + 1,
        });
    }
    found
}

/// Whether the comments and attributes right above line `line` (1-based) hold a `// Long:` reason.
fn justified(source_lines: &[&str], line: usize) -> bool {
    source_lines[..line - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| l.starts_with(LONG_MARKER))
}

#[test]
fn the_scanner_sees_functions_and_not_text() {
    let source = r###"
fn short() { let s = "fn fake() { {"; let c = '{'; }
// fn commented() {
/* fn in_block() { */
fn with_raw() -> &'static str {
    r#"}"#
}
trait T { fn declared(&self); fn default(&self) -> [u8; 2] { [0; 2] } }
fn outer<'a>(x: &'a str) -> char {
    fn inner() {}
    '\''
}
"###;
    let found: Vec<(String, usize, usize)> = functions(&code_only(source))
        .into_iter()
        .map(|f| (f.name, f.line, f.lines))
        .collect();
    let expected = [
        ("short", 2, 1),
        ("with_raw", 5, 3),
        ("default", 8, 1),
        ("outer", 9, 4),
        ("inner", 10, 1),
    ];
    let expected: Vec<(String, usize, usize)> = expected
        .iter()
        .map(|(n, l, c)| (n.to_string(), *l, *c))
        .collect();
    assert_eq!(found, expected);
    let lines = ["// Long: a table", "#[test]", "fn f() {}", "fn g() {}"];
    assert!(justified(&lines, 3));
    assert!(!justified(&lines, 4));
}

#[test]
fn no_function_is_longer_than_80_lines_without_a_reason() {
    let mut long = Vec::new();
    for dir in SOURCE_DIRS {
        for path in rust_files(&root().join(dir)) {
            let text = read(&path);
            let source_lines: Vec<&str> = text.lines().collect();
            for f in functions(&code_only(&text)) {
                if f.lines > MAX_FN_LINES && !justified(&source_lines, f.line) {
                    let file = path.strip_prefix(root()).unwrap_or(&path);
                    long.push(format!(
                        "{}:{} fn {} ({} lines)",
                        file.display(),
                        f.line,
                        f.name,
                        f.lines
                    ));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "{} function(s) over {MAX_FN_LINES} lines: split them into named steps, or write \
         `{LONG_MARKER} <why>` on the line above (docs/src/development/architecture.md, Conventions):\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

#[test]
fn no_file_is_longer_than_800_lines_without_a_reason() {
    let mut long = Vec::new();
    for dir in FILE_RULE_DIRS {
        for (extension, marker) in FILE_RULE_KINDS {
            for path in tree::files_with_extension(&root().join(dir), extension) {
                let text = read(&path);
                let lines = text.lines().count();
                let file = path.strip_prefix(root()).unwrap_or(&path);
                let name = file.to_string_lossy().replace('\\', "/");
                let reason = text.lines().take(5).any(|l| l.starts_with(marker));
                if lines > MAX_FILE_LINES && !reason {
                    long.push(format!("{name} ({lines} lines)"));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "{} file(s) over {MAX_FILE_LINES} lines: split them by concern (a folder of files, each \
         named for what it does), or write `//! Long: <why>` (`# Long: <why>` in a script) at \
         the top:\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

/// The module path of a file under `src/`: `src/queue/at_creation.rs` and
/// `src/queue/at_creation/mod.rs` are `queue::at_creation`; `lib.rs` and `main.rs` are the root.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut path: Vec<String> = relative
        .components()
        .filter_map(|c| c.as_os_str().to_str().map(str::to_string))
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// `code` without its unit tests (`#[cfg(test)] mod ... { ... }`): a circle only tests close
/// does not make production code harder to read or move.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(offset) = out[from..].find("#[cfg(test)]") {
        let at = from + offset;
        from = at + 1;
        let rest = out[at + "#[cfg(test)]".len()..].trim_start();
        if !rest.starts_with("mod ") {
            continue;
        }
        let Some(open) = out[at..].find(['{', ';']).map(|i| at + i) else {
            break;
        };
        if out.as_bytes()[open] == b';' {
            continue;
        }
        let mut depth = 0;
        let mut end = out.len();
        for (i, b) in out.bytes().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
    }
    out
}

/// The paths a `crate::`, `super::` or `self::` path in `text` (code only) expands to, each
/// resolved from module `here`: `use crate::{a::{x, y}, b}` gives `a::x`, `a::y` and `b`.
fn paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .into_iter()
            .any(|k| text[at..].starts_with(k));
        if !starts || (at > 0 && ident(bytes[at - 1])) {
            at += 1;
            continue;
        }
        let mut base: Vec<String> = Vec::new();
        let mut rest = &text[at..];
        let mut resolved = false;
        // The leading keywords: crate, self, super, super, ...
        loop {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let after = &rest[head.len()..];
            match head.as_str() {
                "crate" if !resolved => base.clear(),
                "self" if !resolved => base = here.to_vec(),
                "super" => {
                    if !resolved {
                        base = here.to_vec();
                    }
                    base.pop();
                }
                _ => break,
            }
            resolved = true;
            match after.trim_start().strip_prefix("::") {
                Some(next) => rest = next.trim_start(),
                None => {
                    rest = after;
                    break;
                }
            }
        }
        tree(rest, base, &mut found);
        at += 1 + text[at + 1..]
            .find(|c: char| !c.is_alphanumeric() && c != '_' && c != ':')
            .unwrap_or(0);
    }
    found
}

/// Expands the rest of a path (`a::b`, `a::{b, c::d}`, `*`) after `base` into `out`.
fn tree(rest: &str, mut base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut rest = rest.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        tree(&group[item..i], base.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tree(&group[item..i], base.clone(), out);
                        item = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || name == "self" {
            break;
        }
        base.push(name.clone());
        match rest[name.len()..].trim_start().strip_prefix("::") {
            Some(next) => rest = next.trim_start(),
            None => break,
        }
    }
    if !base.is_empty() {
        out.push(base);
    }
}

/// Circles in `edges`, each as the modules along it (the first repeated at the end), reported once
/// from its smallest module.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    let mut circle = path.clone();
                    circle.push(start.clone());
                    found.push(circle);
                } else if next > start && seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found
}

#[test]
fn the_import_scanner_resolves_paths_and_finds_circles() {
    let here = ["queue".to_string(), "at_creation".to_string()];
    let found = paths(
        "use crate::{api::{A, B}, queue::snapshot};\nlet x = super::controller::run; $crate::no; \
         use self::inner::Y; use super::super::tasks::*;",
        &here,
    );
    let show: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        show,
        [
            "api::A",
            "api::B",
            "queue::snapshot",
            "queue::controller::run",
            "queue::at_creation::inner::Y",
            "tasks"
        ]
    );
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(circles(&edges), vec![vec!["a", "b", "c", "a"]]);
    let code = "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::x;\n}\n";
    assert!(!without_test_modules(code).contains("crate::x"));
}

/// No module uses a sibling that uses it back, directly or around a longer circle: at the top of
/// `src/` (`queue` and `tasks`) and inside every folder (`queue::controller` and
/// `queue::snapshot`). Unit tests are left out.
#[test]
fn no_import_circle_between_sibling_modules() {
    let src = root().join("src");
    let files = rust_files(&src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(&src, f)).collect();
    // Under each parent module, which of its children uses which.
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let here = module_path(&src, file);
        let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if name == "tests" || name.ends_with("_tests") {
            continue;
        }
        let code = without_test_modules(&code_only(&read(file)));
        for target in paths(&code, &here) {
            let common = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= here.len() || common >= target.len() {
                continue; // itself, one of its own submodules, or an ancestor's item
            }
            let parent = here[..common].to_vec();
            let mut sibling = parent.clone();
            sibling.push(target[common].clone());
            if !modules.contains(&sibling) {
                continue; // an item of the parent module, not a module
            }
            edges
                .entry(parent)
                .or_default()
                .entry(here[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    let mut found = Vec::new();
    for (parent, siblings) in &edges {
        for circle in circles(siblings) {
            let prefix = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            found.push(format!("{prefix}: {}", circle.join(" -> ")));
        }
    }
    assert!(
        found.is_empty(),
        "import circles (move what both sides need into a module of its own that uses neither):\n  {}",
        found.join("\n  ")
    );
}

/// The blocks of a Markdown page (paragraphs, list items, table rows), each with the line it starts on.
fn markdown_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        let item = line.trim_start();
        let starts = item.starts_with("- ")
            || item.starts_with('|')
            || item.starts_with('#')
            || item
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if item.is_empty() {
            open = false;
            continue;
        }
        if starts || !open {
            blocks.push((i + 1, String::new()));
        }
        open = !item.starts_with('|') && !item.starts_with('#');
        if let Some((_, block)) = blocks.last_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    blocks
}

/// What a page names in backticks: paths of the repository (`src/serve/mod.rs`, `src/queue/`) and
/// functions (`serve()`, `Controller::pass()`).
fn backticked(block: &str) -> (Vec<String>, Vec<String>) {
    let (mut paths, mut functions) = (Vec::new(), Vec::new());
    for (i, token) in block.split('`').enumerate() {
        let token = token.trim();
        if i % 2 == 0 || token.is_empty() || token.contains([' ', '<', '*', '\n']) {
            continue;
        }
        if let Some(call) = token.strip_suffix("()") {
            let name = call.rsplit("::").next().unwrap_or(call);
            if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                functions.push(name.to_string());
            }
        } else if token.contains('/')
            && (token.ends_with(".rs") || token.ends_with('/'))
            && !token.contains("://")
        {
            paths.push(token.to_string());
        }
    }
    (paths, functions)
}

/// Whether one of `paths` (files or folders under the workspace root) defines `fn name`.
fn defines(paths: &[PathBuf], name: &str) -> bool {
    paths
        .iter()
        .flat_map(|p| {
            if p.is_dir() {
                rust_files(p)
            } else {
                vec![p.clone()]
            }
        })
        .any(|file| {
            let code = code_only(&read(&file));
            code.match_indices(&format!("fn {name}"))
                .any(|(at, found)| {
                    let before = code[..at].chars().next_back();
                    let after = code[at + found.len()..].chars().next();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && matches!(after, Some('(' | '<'))
                })
        })
}

/// docs/src/development/architecture.md names a file and a function at every step: each file exists, and each
/// function is defined in a file or folder named in the same paragraph or list item (or, when it
/// names none, anywhere in the workspace's sources).
#[test]
fn the_architecture_page_names_files_and_functions_that_exist() {
    let page = root().join("docs/src/development/architecture.md");
    let text = read(&page);
    let everywhere: Vec<PathBuf> = ["src", "webhooks/src", "certs/src", "tools/src"]
        .iter()
        .map(|d| root().join(d))
        .collect();
    let mut wrong = Vec::new();
    for (line, block) in markdown_blocks(&text) {
        let (paths, functions) = backticked(&block);
        let mut named = Vec::new();
        for path in &paths {
            let full = root().join(path);
            if full.exists() {
                named.push(full);
            } else {
                wrong.push(format!("line {line}: `{path}` does not exist"));
            }
        }
        let search = if named.is_empty() {
            &everywhere
        } else {
            &named
        };
        for function in functions {
            if !defines(search, &function) {
                wrong.push(format!(
                    "line {line}: `{function}()` is not defined in {}",
                    if named.is_empty() {
                        "the workspace's sources".to_string()
                    } else {
                        paths.join(", ")
                    }
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/src/development/architecture.md does not match the code:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_page_checker_reads_blocks_paths_and_functions() {
    let page =
        "# T\n\n1. `a()` in\n   `src/x.rs`, then\n2. `B::c()` (`src/`)\n\n| `d/` | `e()` |\n";
    let blocks = markdown_blocks(page);
    let starts: Vec<usize> = blocks.iter().map(|(line, _)| *line).collect();
    assert_eq!(starts, [1, 3, 5, 7]);
    assert_eq!(
        backticked(&blocks[1].1),
        (vec!["src/x.rs".to_string()], vec!["a".to_string()])
    );
    assert_eq!(
        backticked(&blocks[2].1),
        (vec!["src/".to_string()], vec!["c".to_string()])
    );
}
