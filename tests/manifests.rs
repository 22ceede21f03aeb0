//! The checked-in manifests are generated from the Rust types: they must match what
//! `sluice crds` and `sluice manifests webhooks|rbac|rbac-tasks` print. Regenerate with
//! `hack/gen-manifests.sh`. The book's table of integrations
//! (docs/src/concepts/gangs-and-elastic-pods.md) is `sluice integrations`.

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

#[test]
fn rbac_matches_the_rust_code_and_the_integrations() {
    check(
        "manifests/install/01-rbac.yaml",
        &sluice::install::rbac_yaml().expect("render RBAC"),
    );
    check(
        "manifests/install/01-rbac-tasks.yaml",
        &sluice::install::rbac_tasks_yaml().expect("render Task RBAC"),
    );
}

#[test]
fn the_books_table_of_integrations_is_the_registrys() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/concepts/gangs-and-elastic-pods.md"),
    )
    .expect("docs/src/concepts/gangs-and-elastic-pods.md");
    let table = sluice::integrations::docs_table();
    assert!(
        page.contains(&table),
        "docs/src/concepts/gangs-and-elastic-pods.md's table of integrations is out of date: run hack/gen-manifests.sh:\n{table}"
    );
}

/// The YAML documents of a checked-in manifest, as JSON.
fn documents(path: &str) -> Vec<serde_json::Value> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}")))
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect()
}

fn of_kind(docs: &[serde_json::Value], kind: &str) -> serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .cloned()
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The NetworkPolicy selects sluice's pods and admits exactly their webhook and metrics ports,
/// the metrics port only from labelled monitoring pods: a port renamed or moved in the
/// Deployment without the policy would be cut off (or left open).
#[test]
fn network_policy_admits_only_the_webhook_and_metrics_ports_of_sluice() {
    let deployment = of_kind(
        &documents("manifests/install/02-deployment.yaml"),
        "Deployment",
    );
    let policy = of_kind(
        &documents("manifests/install/04-networkpolicy.yaml"),
        "NetworkPolicy",
    );
    assert_eq!(
        policy["metadata"]["namespace"],
        deployment["metadata"]["namespace"]
    );
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let selector = policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .expect("podSelector.matchLabels");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(&pod_labels[k], v, "the policy selects sluice's pods by {k}");
    }
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress"])
    );

    let container_port = |name: &str| {
        deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .and_then(|ports| ports.iter().find(|p| p["name"] == name))
            .map(|p| p["containerPort"].clone())
            .unwrap_or_else(|| panic!("the Deployment has no port {name}"))
    };
    let rules = policy["spec"]["ingress"].as_array().expect("ingress rules");
    let rule_for = |port: &serde_json::Value| {
        rules
            .iter()
            .find(|r| {
                r["ports"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| &p["port"] == port))
            })
            .unwrap_or_else(|| panic!("no ingress rule for port {port}"))
    };
    assert_eq!(rules.len(), 2, "two rules: webhook and metrics");
    let webhook = rule_for(&container_port("webhook"));
    assert!(
        webhook["from"]
            .as_array()
            .is_some_and(|peers| peers.iter().all(|p| p.get("ipBlock").is_some())),
        "the webhook port admits addresses (the API server), never pods by selector"
    );
    let metrics = rule_for(&container_port("metrics"));
    let peers = metrics["from"].as_array().expect("metrics peers");
    assert_eq!(peers.len(), 1);
    for selector in ["namespaceSelector", "podSelector"] {
        assert_eq!(
            peers[0][selector]["matchLabels"],
            serde_json::json!({"sluice.dev/metrics-reader": "true"}),
            "metrics only from labelled monitoring pods ({selector})"
        );
    }
}
