//! Bakes the git commit into the binary (`sluice --version`, the `sluice_build_info` metric): the
//! `SLUICE_GIT_COMMIT` environment variable of the build (the Dockerfile's `GIT_COMMIT` argument,
//! hack/release.sh), or `unknown` when a build does not say.
fn main() {
    println!("cargo:rerun-if-env-changed=SLUICE_GIT_COMMIT");
    let commit = std::env::var("SLUICE_GIT_COMMIT")
        .ok()
        .filter(|c| {
            !c.is_empty()
                && c.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SLUICE_GIT_COMMIT={commit}");
}
