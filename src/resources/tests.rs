//! Unit tests of quantities (against Kubernetes' own parsing vectors) and of pod requests as the
//! scheduler counts them.

use super::*;

#[test]
fn parses_kubernetes_quantities() {
    assert_eq!(parse_quantity("4"), Ok(4000));
    assert_eq!(parse_quantity("500m"), Ok(500));
    assert_eq!(parse_quantity("1.5"), Ok(1500));
    assert_eq!(parse_quantity("0.1m"), Ok(1)); // rounds up
    assert_eq!(parse_quantity("8Gi"), Ok(8 * (1 << 30) * 1000));
    assert_eq!(parse_quantity("100M"), Ok(100_000_000 * 1000));
    assert_eq!(parse_quantity("1e3"), Ok(1_000_000));
    assert_eq!(parse_quantity("1.5Gi"), Ok(3 * (1 << 29) * 1000));
    assert_eq!(parse_quantity("2k"), Ok(2_000_000));
    assert!(parse_quantity("").is_err());
    assert!(parse_quantity("abc").is_err());
    assert!(parse_quantity("1.2.3").is_err());
    assert!(parse_quantity("4X").is_err());
    assert!(parse_quantity("99999999999999999999Ei").is_err());
}

#[test]
fn formats_for_people() {
    assert_eq!(format_quantity("cpu", 4000), "4");
    assert_eq!(format_quantity("cpu", 1500), "1500m");
    assert_eq!(format_quantity("memory", 8 * (1 << 30) * 1000), "8Gi");
    assert_eq!(format_quantity("memory", 1536 * (1 << 20) * 1000), "1536Mi");
    assert_eq!(format_quantity("pods", 3000), "3");
    assert_eq!(describe_quantity("cpu", 2500), "2.5");
    assert_eq!(describe_quantity("memory", 3 * (1 << 29) * 1000), "1.5Gi");
}

/// One case of `testdata/quantity_vectors.json`: how Kubernetes reads a quantity.
#[derive(serde::Deserialize)]
struct Vector {
    input: String,
    valid: bool,
    /// Milli-units, or "too large" for a valid quantity beyond an i64 of them.
    milli: Option<String>,
}

/// The vectors come from Kubernetes' own ParseQuantity (apimachinery v0.36.3). Regenerate
/// them with the command at the top of hack/tools/quantity-vectors/main.go.
#[test]
fn quantities_parse_as_kubernetes_parses_them() {
    let vectors: Vec<Vector> =
        serde_json::from_str(include_str!("testdata/quantity_vectors.json")).expect("vectors");
    assert!(vectors.len() > 200, "the table is all there");
    let wrong: Vec<String> = vectors
        .iter()
        .filter_map(|v| {
            let got = parse_quantity(&v.input);
            let agrees = match (v.valid, v.milli.as_deref(), &got) {
                (false, _, Err(e)) => e.reason != TOO_LARGE,
                (true, Some("too large"), Err(e)) => e.reason == TOO_LARGE,
                (true, Some(milli), Ok(value)) => milli.parse::<i64>() == Ok(*value),
                _ => false,
            };
            (!agrees).then(|| {
                format!(
                    "{:?}: Kubernetes valid={} milli={:?}, sluice {got:?}",
                    v.input, v.valid, v.milli
                )
            })
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Issue 16, hole 2: `0e2000000000` looped two billion times on the webhook's thread.
#[test]
fn huge_exponents_and_digit_strings_parse_without_work_proportional_to_the_exponent() {
    let long = format!("{}e-9990", "1".repeat(10_000));
    let inputs = [
        "0e2000000000",
        "1e2000000000",
        "1e-2000000000",
        "1e-2147483648",
        "1e2147483647",
        "9e9223372036854775807",
        long.as_str(),
    ];
    let start = std::time::Instant::now();
    for _ in 0..100 {
        for input in inputs {
            let _ = parse_quantity(input);
        }
    }
    assert!(
        start.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(parse_quantity("0e2000000000"), Ok(0));
    assert_eq!(parse_quantity("1e-2000000000"), Ok(1));
    assert_eq!(
        parse_quantity("1e2000000000").map_err(|e| e.reason),
        Err(TOO_LARGE)
    );
}

fn requests(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    )
}

fn with_resources(
    requests_: &[(&str, &str)],
    limits: &[(&str, &str)],
) -> Option<k8s_openapi::api::core::v1::ResourceRequirements> {
    Some(k8s_openapi::api::core::v1::ResourceRequirements {
        requests: requests(requests_),
        limits: requests(limits),
        ..Default::default()
    })
}

/// Issue 16, hole 2: a `cpu: "-1000"` pod let 3 cpu into a 2-cpu queue.
#[test]
fn a_negative_request_is_refused_naming_the_field() {
    let spec = PodSpec {
        containers: vec![
            container("1", false),
            Container {
                resources: with_resources(&[("cpu", "-1000")], &[]),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let err = pod_requests(&spec).expect_err("negative");
    assert_eq!(
        err.to_string(),
        r#"spec.containers[1].resources.requests.cpu: must not be negative ("-1000")"#
    );
}

/// Requests default to limits, so a negative limit would count as a negative request.
#[test]
fn a_negative_limit_init_container_or_overhead_is_refused_naming_the_field() {
    let negative_limit = PodSpec {
        containers: vec![Container {
            resources: with_resources(&[], &[("memory", "-1Gi")]),
            ..Default::default()
        }],
        ..Default::default()
    };
    let err = pod_requests(&negative_limit).expect_err("negative limit");
    assert_eq!(
        err.field, "spec.containers[0].resources.limits.memory",
        "{err}"
    );
    let negative_init = PodSpec {
        init_containers: Some(vec![container("1", true), container("-1m", false)]),
        ..Default::default()
    };
    let err = pod_requests(&negative_init).expect_err("negative init container");
    assert_eq!(err.field, "spec.initContainers[1].resources.requests.cpu");
    let negative_overhead = PodSpec {
        overhead: requests(&[("cpu", "-5")]),
        ..Default::default()
    };
    let err = pod_requests(&negative_overhead).expect_err("negative overhead");
    assert_eq!(err.field, "spec.overhead.cpu");
    let negative_pod_level = PodSpec {
        resources: with_resources(&[("nvidia.com/gpu", "-1")], &[]),
        ..Default::default()
    };
    let err = pod_requests(&negative_pod_level).expect_err("negative pod level");
    assert_eq!(err.field, "spec.resources.requests[nvidia.com/gpu]");
}

#[test]
fn an_unparsable_request_is_refused_naming_the_field() {
    let spec = PodSpec {
        containers: vec![container("1 Gi", false)],
        ..Default::default()
    };
    let err = pod_requests(&spec).expect_err("unparsable");
    assert_eq!(err.field, "spec.containers[0].resources.requests.cpu");
    assert!(err.problem.contains("not a quantity"), "{err}");
}

/// Sums that overflow are refused, never wrapped (release) nor a panic (debug).
#[test]
fn requests_that_add_up_beyond_i64_are_refused_not_wrapped() {
    let max = "9223372036854775807m";
    let spec = PodSpec {
        containers: vec![container(max, false), container("1m", false)],
        ..Default::default()
    };
    let err = pod_requests(&spec).expect_err("overflow");
    assert_eq!(err.field, "spec.containers[1]");
    assert!(err.problem.contains("more than sluice can count"), "{err}");
    let sidecar = PodSpec {
        containers: vec![container("1", false)],
        init_containers: Some(vec![container(max, true)]),
        ..Default::default()
    };
    assert_eq!(
        pod_requests(&sidecar).expect_err("overflow").field,
        "spec.initContainers[0]"
    );
    let overhead = PodSpec {
        containers: vec![container(max, false)],
        overhead: requests(&[("cpu", "1m")]),
        ..Default::default()
    };
    assert_eq!(
        pod_requests(&overhead).expect_err("overflow").field,
        "spec.overhead"
    );
    let mut list = ResourceList::new();
    list.add("cpu", i64::MAX);
    list.add("cpu", 1);
    assert_eq!(list.get("cpu"), i64::MAX, "add saturates, never wraps");
    assert_eq!(
        list.try_add_scaled(&ResourceList(BTreeMap::from([("cpu".into(), 2)])), i64::MAX),
        Err("cpu".to_string())
    );
}

/// Issue 16, hole 5: pod-level `spec.resources` was not counted.
#[test]
fn pod_level_requests_count_instead_of_tiny_container_requests() {
    let spec = PodSpec {
        containers: vec![container("10m", false), container("10m", false)],
        resources: with_resources(&[("cpu", "8")], &[]),
        overhead: requests(&[("cpu", "100m")]),
        ..Default::default()
    };
    let r = pod_requests(&spec).expect("counted");
    assert_eq!(r.get("cpu"), 8100, "pod level 8 plus the overhead");
    assert_eq!(r.get("pods"), 1000);
}

#[test]
fn pod_level_limits_count_where_nothing_requests_the_resource() {
    // No container asks for memory: the API server defaults the pod-level request to the
    // pod-level limit. cpu is requested by a container: its request stays the aggregate.
    let spec = PodSpec {
        containers: vec![container("500m", false)],
        resources: with_resources(&[], &[("cpu", "4"), ("memory", "8Gi")]),
        ..Default::default()
    };
    let r = pod_requests(&spec).expect("counted");
    assert_eq!(r.get("memory"), 8 * (1 << 30) * 1000);
    assert_eq!(r.get("cpu"), 500);
    // Resources the pod level does not support are the containers' alone.
    let spec = PodSpec {
        containers: vec![container("1", false)],
        resources: with_resources(&[("cpu", "2"), ("nvidia.com/gpu", "4")], &[]),
        ..Default::default()
    };
    let r = pod_requests(&spec).expect("counted");
    assert_eq!((r.get("cpu"), r.get("nvidia.com/gpu")), (2000, 0));
    // A pod level below the containers' (invalid: the API server refuses it after the
    // webhook) never counts less than the containers.
    let spec = PodSpec {
        containers: vec![container("3", false)],
        resources: with_resources(&[("cpu", "1")], &[]),
        ..Default::default()
    };
    assert_eq!(pod_requests(&spec).expect("counted").get("cpu"), 3000);
}

fn container(cpu: &str, restart_always: bool) -> Container {
    Container {
        resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "cpu".to_string(),
                Quantity(cpu.to_string()),
            )])),
            ..Default::default()
        }),
        restart_policy: restart_always.then(|| "Always".to_string()),
        ..Default::default()
    }
}

#[test]
fn counts_pod_requests_like_the_scheduler() {
    let spec = PodSpec {
        containers: vec![container("1", false), container("500m", false)],
        init_containers: Some(vec![container("2", false)]),
        overhead: Some(BTreeMap::from([(
            "cpu".to_string(),
            Quantity("100m".into()),
        )])),
        ..Default::default()
    };
    let r = pod_requests(&spec).unwrap();
    // max(1.5, 2) + 0.1
    assert_eq!(r.get("cpu"), 2100);
    assert_eq!(r.get("pods"), 1000);

    // A sidecar adds to the app containers and to init containers after it.
    let spec = PodSpec {
        containers: vec![container("1", false)],
        init_containers: Some(vec![container("250m", true), container("2", false)]),
        ..Default::default()
    };
    let r = pod_requests(&spec).unwrap();
    assert_eq!(r.get("cpu"), 2250);
}

#[test]
fn a_list_is_described_without_pods_or_zeros() {
    let mut list = ResourceList::new();
    list.add("cpu", 1500);
    list.add("memory", 2 * 1024 * 1024 * 1024 * 1000);
    list.add("pods", 3000);
    list.add("nvidia.com/gpu", 0);
    let text = list.describe(|name, amount| format!("{amount} {name}"), "nothing");
    assert_eq!(text, "1.5 cpu, 2Gi memory");
    let mut only_pods = ResourceList::new();
    only_pods.add("pods", 1000);
    assert_eq!(
        only_pods.describe(|n, a| format!("{n} {a}"), "nothing"),
        "nothing"
    );
}
