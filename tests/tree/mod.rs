//! Walking the repository's files, for the tests that read them (`tests/layout.rs`, and the book's
//! checks through `tests/docs_blocks/`).

use std::path::{Path, PathBuf};

/// Every file under `dir` (recursively) whose extension is `extension`, sorted.
pub fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == extension) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}
