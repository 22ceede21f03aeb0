//! Where the pinned Helm is: `$SLUICE_CACHE/bin/helm-<HELM_VERSION of hack/versions.sh>`, as
//! `hack/cluster.sh build` builds it. Included by path by the tests that run Helm (`install.rs`,
//! which needs no cluster, and `e2e_user_roles.rs`).

use std::path::{Path, PathBuf};

/// The pinned Helm's path under the cache (it may not be built yet).
pub fn helm_path(repo_root: &Path) -> PathBuf {
    let versions =
        std::fs::read_to_string(repo_root.join("hack/versions.sh")).expect("hack/versions.sh");
    let version = versions
        .lines()
        .find_map(|l| l.strip_prefix("HELM_VERSION="))
        .and_then(|v| v.split_whitespace().next())
        .expect("HELM_VERSION in hack/versions.sh");
    let cache = std::env::var_os("SLUICE_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/sluice")
        });
    cache.join(format!("bin/helm-{version}"))
}
