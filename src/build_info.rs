//! What this binary is: its version (SemVer, from Cargo.toml) and the git commit it was built from
//! (build.rs: `SLUICE_GIT_COMMIT` at build time, `unknown` otherwise). `sluice --version` prints
//! them and the metric `sluice_build_info` carries them as labels.

/// The version (Cargo.toml's `version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from, or `unknown`.
pub const GIT_COMMIT: &str = env!("SLUICE_GIT_COMMIT");
/// What `sluice --version` prints after the name.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SLUICE_GIT_COMMIT"),
    ")"
);
