use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSelectorTerm};
use serde_json::json;

use super::*;

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    (pairs.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_pod_selector_asks_required_by_default() {
    let a = annotations(&[("sluice.dev/data-pods", " app=cache,tier in (hot, warm) ")]);
    let ask = DataAsk::of(Some(&a)).expect("valid").expect("an ask");
    assert_eq!(
        ask,
        DataAsk {
            source: DataSource::Pods("app=cache,tier in (hot, warm)".into()),
            required: true,
        }
    );
    assert_eq!(ask.source.to_string(), "pods app=cache,tier in (hot, warm)");
}

#[test]
fn a_claim_preferred() {
    let a = annotations(&[
        ("sluice.dev/data-claim", "cache-data"),
        ("sluice.dev/data-locality", "preferred"),
    ]);
    let ask = DataAsk::of(Some(&a)).expect("valid").expect("an ask");
    assert_eq!(ask.source, DataSource::Claim("cache-data".into()));
    assert!(!ask.required);
}

#[test]
fn no_ask_without_the_annotations() {
    assert_eq!(DataAsk::of(None), Ok(None));
    assert_eq!(DataAsk::of(Some(&annotations(&[("other", "x")]))), Ok(None));
}

#[test]
fn malformed_asks_are_refused_saying_what_to_set() {
    for (pairs, says) in [
        (vec![("sluice.dev/data-pods", "")], "e.g. app=cache"),
        (
            vec![("sluice.dev/data-pods", "app=cache,")],
            "e.g. app=cache",
        ),
        (vec![("sluice.dev/data-pods", "app in (a,b")], "parentheses"),
        (vec![("sluice.dev/data-pods", "app in a,b")], "parentheses"),
        (vec![("sluice.dev/data-pods", "app=ca che")], "label value"),
        (
            vec![("sluice.dev/data-pods", "ns/../app=x")],
            "e.g. app=cache",
        ),
        (
            vec![("sluice.dev/data-claim", "Cache_Data")],
            "claim in this namespace",
        ),
        (
            vec![("sluice.dev/data-claim", "../other")],
            "claim in this namespace",
        ),
        (
            vec![
                ("sluice.dev/data-pods", "a=b"),
                ("sluice.dev/data-claim", "c"),
            ],
            "set one of them",
        ),
        (
            vec![("sluice.dev/data-locality", "required")],
            "set one of them",
        ),
        (
            vec![
                ("sluice.dev/data-pods", "a=b"),
                ("sluice.dev/data-locality", "always"),
            ],
            "required (wait",
        ),
    ] {
        let a = annotations(&pairs);
        let err = DataAsk::of(Some(&a)).expect_err(&format!("{pairs:?} is refused"));
        assert!(err.contains(says), "{pairs:?}: {err}");
    }
}

#[test]
fn selectors_of_every_kind_pass() {
    for selector in [
        "app=cache",
        "app==cache",
        "app!=cache",
        "app",
        "!app",
        "example.com/tier in (hot,warm)",
        "tier notin (cold)",
        "app=cache, tier=hot",
        "app=",
    ] {
        assert_eq!(check_selector(selector), Ok(()), "{selector}");
    }
}

fn node(name: &str, labels: serde_json::Value) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
            .expect("node"),
    )
}

fn term(v: serde_json::Value) -> NodeSelectorTerm {
    serde_json::from_value(v).expect("term")
}

#[test]
fn a_volume_s_node_affinity_names_its_nodes() {
    let nodes = [
        node("n1", json!({"kubernetes.io/hostname": "n1", "disk": "ssd"})),
        node("n2", json!({"kubernetes.io/hostname": "n2", "disk": "ssd"})),
        node("n3", json!({"kubernetes.io/hostname": "n3"})),
    ];
    let by_host = [term(
        json!({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}),
    )];
    assert_eq!(
        nodes_allowed(&by_host, &nodes),
        BTreeSet::from(["n2".to_string()])
    );
    let by_label_or_field = [
        term(
            json!({"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}),
        ),
        term(
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n3"]}]}),
        ),
    ];
    assert_eq!(
        nodes_allowed(&by_label_or_field, &nodes),
        BTreeSet::from(["n2".to_string(), "n3".to_string()])
    );
    assert!(
        nodes_allowed(&[term(json!({}))], &nodes).is_empty(),
        "an empty term: none"
    );
    assert!(nodes_allowed(&[], &nodes).is_empty());
}

#[test]
fn the_pin_annotation_round_trips() {
    let value = nodes_annotation(["a", "b"]);
    assert_eq!(value, "a,b");
    assert_eq!(split_nodes(&value).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(split_nodes(" a, ,b ").collect::<Vec<_>>(), ["a", "b"]);
}
