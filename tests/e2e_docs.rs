//! The book's blocks marked `run` (```` ```sh,run ````), run as a reader would run them, on the
//! local cluster `hack/test.sh` brings up (sluice on the host, KubeRay, the Spark operator): each
//! page's blocks in order, each command line with `bash` from the repository root and the built
//! `sluice` first on `PATH`. A command that fails is tried again for up to 90 s (an object a
//! controller records, a webhook that is starting); one that never succeeds fails the test.
//! Only the exit status is checked, not the output: docs/src/development/docs.md says so.
//! Run alone with `hack/test.sh --test e2e_docs`.

mod docs_blocks;
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use docs_blocks::{blocks, markdown_files, relative, repo_root};

/// How long one command may keep failing before the test fails.
const PATIENCE: Duration = Duration::from_secs(90);

/// Runs one command line; its exit status and what it printed.
fn run(line: &str) -> (bool, String) {
    let sluice_dir = std::path::Path::new(env!("CARGO_BIN_EXE_sluice"))
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let path = format!("{sluice_dir}:{}", std::env::var("PATH").unwrap_or_default());
    match Command::new("bash")
        .args(["-euo", "pipefail", "-c", line])
        .current_dir(repo_root())
        .env("PATH", path)
        .output()
    {
        Ok(out) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (false, format!("could not start bash: {e}")),
    }
}

#[test]
fn the_blocks_marked_run_succeed_on_the_local_cluster() {
    if !support::cluster_or_skip() {
        return;
    }
    let mut ran = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("a page");
        for block in blocks(&relative(&file), &text)
            .into_iter()
            .filter(|b| b.tagged("run"))
        {
            for line in &block.commands {
                let started = Instant::now();
                let (ok, output) = loop {
                    let (ok, output) = run(line);
                    if ok || started.elapsed() > PATIENCE {
                        break (ok, output);
                    }
                    std::thread::sleep(Duration::from_secs(2));
                };
                eprintln!(
                    "{}:{}: $ {line}  ({:.1} s)\n{output}",
                    block.file,
                    block.line,
                    started.elapsed().as_secs_f64()
                );
                assert!(
                    ok,
                    "{}:{}: `{line}` failed for {} s:\n{output}",
                    block.file,
                    block.line,
                    PATIENCE.as_secs()
                );
                ran += 1;
            }
        }
    }
    assert!(ran > 0, "no block of the book is marked run");
}
