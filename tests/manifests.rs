//! The checked-in manifests are generated from the Rust types: they must match what
//! `sluice crds` and `sluice manifests webhooks` print. Regenerate with `hack/gen-manifests.sh`.

use std::path::Path;

fn check(path: &str, expected: &str) {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let actual = std::fs::read_to_string(&full)
        .unwrap_or_else(|e| panic!("{}: {e}; run hack/gen-manifests.sh", full.display()));
    assert!(
        actual == expected,
        "{path} is out of date with the Rust types: run hack/gen-manifests.sh and commit the result"
    );
}

#[test]
fn crds_match_the_rust_types() {
    for (name, yaml) in sluice::api::crds_yaml().expect("render CRDs") {
        check(&format!("manifests/crds/{name}.yaml"), &yaml);
    }
}

#[test]
fn webhook_configurations_match_the_rust_code() {
    check(
        "manifests/install/03-webhooks.yaml",
        &sluice::serve::in_cluster_webhook_manifests().expect("render webhooks"),
    );
}
