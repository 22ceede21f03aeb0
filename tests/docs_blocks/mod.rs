//! The shell blocks of the book and the README, and the commands in them: shared by `tests/docs.rs`
//! (every command exists) and `tests/e2e_docs.rs` (the blocks marked `run` run on the local
//! cluster). The convention is docs/src/development/docs.md's:
//!
//! - a fence ```` ```sh ```` (or `bash`) holds commands, one a line (`\` continues a line, `#` starts
//!   a comment); ```` ```console ```` holds a transcript, whose commands are the lines starting `$ `;
//! - `nocheck` among the fence's words (```` ```sh,nocheck ````) marks a script's body, not commands;
//! - `run` (```` ```sh,run ````) marks a block `tests/e2e_docs.rs` runs against the local cluster.

#![allow(dead_code)]

#[path = "../tree/mod.rs"]
mod tree;

use std::path::{Path, PathBuf};

/// One fenced block of commands.
#[derive(Debug, Clone)]
pub struct Block {
    /// The Markdown file, relative to the repository root.
    pub file: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The words of the fence's info string (`sh`, `run`).
    pub tags: Vec<String>,
    /// The command lines (continuations joined, comments and `$ ` prompts removed).
    pub commands: Vec<String>,
}

impl Block {
    pub fn tagged(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files the checks read: README.md, BENCHMARKS.md and every page under docs/src.
pub fn markdown_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    files.extend(tree::files_with_extension(&root.join("docs/src"), "md"));
    files.sort();
    files
}

pub fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The command blocks of one Markdown text.
pub fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((at, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let tags: Vec<String> = info
            .split([',', ' '])
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        let mut body = Vec::new();
        for (_, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            body.push(line);
        }
        let language = tags.first().map(String::as_str).unwrap_or("");
        let commands = match language {
            "sh" | "bash" => shell_lines(&body, false),
            "console" => shell_lines(&body, true),
            _ => continue,
        };
        found.push(Block {
            file: file.to_string(),
            line: at + 1,
            tags,
            commands,
        });
    }
    found
}

/// Command lines: `\` continuations joined; in a transcript only the `$ ` lines (and their
/// continuations), elsewhere every line but blank ones and whole-line comments.
fn shell_lines(body: &[&str], transcript: bool) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current: Option<String> = None;
    for line in body {
        if let Some(mut open) = current.take() {
            let part = line.trim();
            open.push(' ');
            open.push_str(part.trim_end_matches('\\'));
            if part.ends_with('\\') {
                current = Some(open);
            } else {
                commands.push(open);
            }
            continue;
        }
        let line = if transcript {
            match line.strip_prefix("$ ") {
                Some(command) => command,
                None => continue,
            }
        } else {
            line
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(open) = trimmed.strip_suffix('\\') {
            current = Some(open.trim_end().to_string());
        } else {
            commands.push(trimmed.to_string());
        }
    }
    commands.extend(current);
    commands
}

/// The simple commands of a command line, as words: split at `&&`, `||`, `|` and `;` outside
/// quotes, a `#` comment dropped, redirections dropped, quotes removed, and the commands inside
/// `$(...)` added as commands of their own.
pub fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = line.chars().collect();
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut i = 0;
    let end_word = |word: &mut String, words: &mut Vec<String>, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '$' && chars.get(i + 1) == Some(&'(') {
                        let (inner, next) = substitution(&chars, i + 2);
                        commands.extend(simple_commands(&inner));
                        word.push_str("$(...)");
                        i = next;
                        continue;
                    }
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let (inner, next) = substitution(&chars, i + 2);
                commands.extend(simple_commands(&inner));
                in_word = true;
                word.push_str("$(...)");
                i = next;
                continue;
            }
            '&' if i > 0 && chars[i - 1] == '>' => word.push(c),
            '#' if !in_word => break,
            ' ' | '\t' => end_word(&mut word, &mut words, &mut in_word),
            '&' | '|' | ';' => {
                end_word(&mut word, &mut words, &mut in_word);
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
                while matches!(chars.get(i + 1), Some('&' | '|')) {
                    i += 1;
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
        i += 1;
    }
    end_word(&mut word, &mut words, &mut in_word);
    if !words.is_empty() {
        commands.push(words);
    }
    commands
        .into_iter()
        .map(without_redirections)
        .filter(|c| !c.is_empty())
        .collect()
}

/// The text of a `$(...)` whose body starts at `from`, and the index after its `)`.
fn substitution(chars: &[char], from: usize) -> (String, usize) {
    let mut depth = 1;
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return (chars[from..i].iter().collect(), i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    (chars[from..].iter().collect(), chars.len())
}

/// Words without redirections (`>file`, `2>&1`, `> file`, `<file`).
fn without_redirections(words: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for word in words {
        if skip_next {
            skip_next = false;
            continue;
        }
        let bare = word.trim_start_matches(|c: char| c.is_ascii_digit());
        if bare.starts_with('>') || bare.starts_with('<') {
            skip_next = bare.len() == 1 || bare == ">>";
            continue;
        }
        out.push(word);
    }
    out
}

#[test]
fn blocks_and_commands_are_read_as_the_convention_says() {
    let text = "x\n```sh,run\nhack/a.sh up \\\n  --b   # c\n# whole comment\n```\n```console\n$ sluice queue -A\nPOSITION\n```\n```yaml\nkind: X\n```\n";
    let found = blocks("f.md", text);
    assert_eq!(found.len(), 2);
    assert!(found[0].tagged("run"));
    assert_eq!(found[0].line, 2);
    assert_eq!(found[0].commands, vec!["hack/a.sh up --b   # c"]);
    assert_eq!(found[1].commands, vec!["sluice queue -A"]);
    let words = |line: &str| simple_commands(line);
    assert_eq!(
        words("hack/a.sh up --b   # c"),
        vec![vec!["hack/a.sh", "up", "--b"]]
    );
    assert_eq!(
        words("eval \"$(hack/cluster.sh env)\" && kubectl get pods -o 'json' 2>&1 | grep x > out"),
        vec![
            vec!["hack/cluster.sh", "env"],
            vec!["eval", "$(...)"],
            vec!["kubectl", "get", "pods", "-o", "json"],
            vec!["grep", "x"],
        ]
    );
}
