//! The release artifacts without a cluster: the Helm chart (charts/sluice/), the manifest
//! hack/release.sh writes into dist/, and the version they all carry.
//!
//! One source of truth: the chart. dist/sluice.yaml is the Namespace followed by the chart rendered
//! with its default values, and the chart's CRDs, RBAC and webhook configurations are generated from
//! the Rust code (hack/gen-manifests.sh, then hack/gen-chart.sh), as manifests/ is. Helm is built by
//! `hack/cluster.sh build` (hack/tools/helm, cached in $SLUICE_CACHE/bin); without it these tests
//! skip under plain `cargo test` and fail under hack/test.sh.

#[path = "support/helm.rs"]
mod helm;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Helm of hack/versions.sh, as hack/cluster.sh builds it; None (after saying so) when it is not
/// built and hack/test.sh does not require it.
fn helm() -> Option<PathBuf> {
    let helm = helm::helm_path(&root());
    if helm.exists() {
        return Some(helm);
    }
    let test = std::thread::current().name().unwrap_or("test").to_string();
    if std::env::var("SLUICE_REQUIRE_CLUSTER").is_ok_and(|v| v == "1") {
        panic!(
            "{test}: {} is not built (hack/cluster.sh build builds it)",
            helm.display()
        );
    }
    eprintln!(
        "skipped {test}: {} is not built (hack/cluster.sh build builds it)",
        helm.display()
    );
    None
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// `helm template` of the chart in sluice-system with each of `sets` as a `--set`, and `extra` flags.
fn template_with(helm: &Path, sets: &[&str], extra: &[&str]) -> String {
    let mut cmd = Command::new(helm);
    cmd.current_dir(root()).args([
        "template",
        "sluice",
        "charts/sluice",
        "--namespace",
        "sluice-system",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    run(cmd.args(extra))
}

fn template(helm: &Path, sets: &[&str]) -> String {
    template_with(helm, sets, &[])
}

fn cargo_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The documents of a multi-document YAML stream, parsed.
fn documents(yaml: &str) -> Vec<serde_norway::Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| serde_norway::Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kinds(yaml: &str) -> Vec<(String, String)> {
    documents(yaml)
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_string(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn helm_template_with_default_values_renders_exactly_the_release_manifest() {
    let Some(helm) = helm() else { return };
    let out = tempdir("release");
    run(Command::new(root().join("hack/release.sh")).args([
        cargo_version(),
        "--out",
        out.to_str().expect("path"),
    ]));
    let manifest = std::fs::read_to_string(out.join("sluice.yaml")).expect("dist/sluice.yaml");
    let rendered = template_with(&helm, &[], &["--no-hooks"]);
    // The manifest: a header, the Namespace, then exactly what the chart renders.
    let (head, rest) = manifest
        .split_once("\nkind: Namespace\n")
        .expect("the manifest starts with the Namespace");
    assert!(head.starts_with("# sluice "), "header: {head}");
    let after_namespace = rest
        .split_once("---\n")
        .map(|(_, r)| format!("---\n{r}"))
        .expect("documents after the Namespace");
    assert!(
        after_namespace == rendered,
        "dist/sluice.yaml after its Namespace differs from `helm template` with default values"
    );
    // The image is pinned to the version; no PriorityClass by default; no hook in the manifest.
    assert!(
        manifest.contains(&format!("image: sluice:{}\n", cargo_version())),
        "image pinned to sluice:{}",
        cargo_version()
    );
    let objects = kinds(&manifest);
    assert!(!objects.iter().any(|(k, _)| k == "PriorityClass"));
    assert!(!objects.iter().any(|(k, _)| k == "Job"));
    for (kind, name) in [
        ("Namespace", "sluice-system"),
        ("CustomResourceDefinition", "capacityqueues.sluice.dev"),
        ("CustomResourceDefinition", "dynamicworkloads.sluice.dev"),
        ("Deployment", "sluice"),
        ("Service", "sluice-webhook"),
        ("MutatingWebhookConfiguration", "sluice"),
        ("ValidatingWebhookConfiguration", "sluice"),
        ("ClusterRole", "sluice-view"),
        ("ClusterRole", "sluice-queue-admin"),
    ] {
        assert!(
            objects.contains(&(kind.to_string(), name.to_string())),
            "{kind} {name} in dist/sluice.yaml"
        );
    }
    // Checksums of every file written.
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).expect("SHA256SUMS");
    for file in [
        "sluice.yaml".to_string(),
        format!("sluice-{}.tgz", cargo_version()),
    ] {
        assert!(
            sums.lines().any(|l| l.ends_with(&format!("  {file}"))),
            "{file} in SHA256SUMS: {sums}"
        );
        assert!(out.join(&file).exists(), "{file} written");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn helm_lint_passes_strict() {
    let Some(helm) = helm() else { return };
    run(Command::new(helm)
        .current_dir(root())
        .args(["lint", "--strict", "charts/sluice"]));
}

#[test]
fn the_chart_version_is_cargos() {
    let chart = std::fs::read_to_string(root().join("charts/sluice/Chart.yaml")).expect("Chart");
    let chart: serde_norway::Value = serde_norway::from_str(&chart).expect("Chart.yaml");
    assert_eq!(chart["version"].as_str(), Some(cargo_version()));
    assert_eq!(chart["appVersion"].as_str(), Some(cargo_version()));
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).expect("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("## [{}]", cargo_version())),
        "CHANGELOG.md has a section for {}",
        cargo_version()
    );
    let license = std::fs::read_to_string(root().join("LICENSE")).expect("LICENSE");
    assert!(license.contains("Apache License") && license.contains("Version 2.0"));
}

/// The generated templates are what hack/gen-chart.sh makes of the generated manifests (which
/// tests/manifests.rs checks against the Rust code).
#[test]
fn the_charts_generated_templates_are_up_to_date() {
    let out = tempdir("gen-chart");
    run(Command::new(root().join("hack/gen-chart.sh")).arg(&out));
    for file in ["crds.yaml", "rbac.yaml", "rbac-tasks.yaml", "webhooks.yaml"] {
        let fresh = std::fs::read_to_string(out.join(file)).expect("generated");
        let checked_in = std::fs::read_to_string(root().join("charts/sluice/templates").join(file))
            .expect("checked in");
        assert!(
            fresh == checked_in,
            "charts/sluice/templates/{file} is out of date: run hack/gen-manifests.sh (or hack/gen-chart.sh)"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn priority_classes_are_off_by_default_and_on_when_asked() {
    let Some(helm) = helm() else { return };
    let by_default = kinds(&template(&helm, &[]));
    assert!(!by_default.iter().any(|(k, _)| k == "PriorityClass"));
    let on = template(&helm, &["priorityClasses.enabled=true"]);
    let classes: Vec<serde_norway::Value> = documents(&on)
        .into_iter()
        .filter(|d| d["kind"] == "PriorityClass")
        .collect();
    assert_eq!(classes.len(), 2, "sluice-default and sluice-scavenger");
    let scavenger = classes
        .iter()
        .find(|c| c["metadata"]["name"] == "sluice-scavenger")
        .expect("sluice-scavenger");
    assert_eq!(scavenger["preemptionPolicy"].as_str(), Some("Never"));
    let off_default = template(
        &helm,
        &[
            "priorityClasses.enabled=true",
            "priorityClasses.globalDefault=false",
        ],
    );
    assert!(
        documents(&off_default)
            .iter()
            .filter(|d| d["kind"] == "PriorityClass")
            .all(|c| c["globalDefault"].as_bool() == Some(false)),
        "no globalDefault class when priorityClasses.globalDefault=false"
    );
}

/// Values reach the objects they name: image, replicas, namespace, log level, the client CA, the
/// NetworkPolicy's API-server range, the ServiceMonitor, the node selector of the Deployment and
/// the uninstall hook.
#[test]
fn values_reach_the_objects_they_name() {
    let Some(helm) = helm() else { return };
    let mut cmd = Command::new(&helm);
    cmd.current_dir(root()).args([
        "template",
        "sluice",
        "charts/sluice",
        "--namespace",
        "batch-gate",
        "--set",
        "image.repository=registry.example/sluice,image.tag=9.9.9,replicas=3,logLevel=debug",
        "--set",
        "clientCA.secretName=apiserver-ca,metrics.serviceMonitor.enabled=true",
        "--set",
        "networkPolicy.apiServerCIDRs={10.0.0.0/24},nodeSelector.pool=system",
    ]);
    let docs = documents(&run(&mut cmd));
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} rendered"))
            .clone()
    };
    let deployment = find("Deployment", "sluice");
    assert_eq!(deployment["metadata"]["namespace"], "batch-gate");
    assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(3));
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example/sluice:9.9.9");
    let env = container["env"].as_sequence().expect("env");
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    };
    assert_eq!(value("RUST_LOG").as_deref(), Some("debug"));
    assert_eq!(value("SLUICE_NAMESPACE").as_deref(), Some("batch-gate"));
    assert_eq!(
        value("SLUICE_CLIENT_CA_FILE").as_deref(),
        Some("/etc/sluice/client-ca/ca.crt")
    );
    assert_eq!(pod["nodeSelector"]["pool"], "system");
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    let policy = find("NetworkPolicy", "sluice");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
        "10.0.0.0/24"
    );
    find("ServiceMonitor", "sluice");
    // The webhooks call the Service in the release's namespace and spare that namespace.
    let webhooks = find("MutatingWebhookConfiguration", "sluice");
    assert_eq!(
        webhooks["webhooks"][0]["clientConfig"]["service"]["namespace"],
        "batch-gate"
    );
    let hook = find("Job", "sluice-uninstall");
    assert_eq!(
        hook["metadata"]["annotations"]["helm.sh/hook"],
        "pre-delete"
    );
    assert_eq!(
        hook["spec"]["template"]["spec"]["containers"][0]["args"][0],
        "uninstall"
    );
}

fn tempdir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sluice-{what}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
