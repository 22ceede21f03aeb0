//! Reading a ScavengerJob's spec: its duration, its requests, its mounts; each refusal names the
//! field. Pure: the webhook and the controller both judge with these.

use std::time::Duration;

use crate::api::{ScavengerJobSpec, ScavengerMount};
use crate::resources::{ResourceList, parse_amount};

/// The longest `duration` accepted (a year): the ramp's arithmetic stays far from overflow.
const MAX_DURATION: Duration = Duration::from_secs(366 * 86400);

/// Parses `spec.duration` ("30m", "2h", "90s"): more than 0, at most a year.
pub fn duration(text: &str) -> Result<Duration, String> {
    let digits = text.trim().chars().take_while(char::is_ascii_digit).count();
    // Bounded before parsing: crate::duration multiplies without checking.
    if digits > 9 {
        return Err(format!(
            "spec.duration: {text:?} is too long; at most a year (e.g. 30m, 2h, 7d)"
        ));
    }
    let d = crate::duration::parse_duration(text).map_err(|e| format!("spec.duration: {e}"))?;
    if d.is_zero() || d > MAX_DURATION {
        return Err(format!(
            "spec.duration: {text:?} must be more than 0 and at most a year (e.g. 30m, 2h, 7d)"
        ));
    }
    Ok(d)
}

/// The requests of one pod (`spec.resources.requests`), checked: every quantity valid and not
/// negative, requests equal to limits for every resource named in either (Guaranteed pods), and
/// cpu and memory both set.
pub fn pod_requests(spec: &ScavengerJobSpec) -> Result<ResourceList, String> {
    let read = |field: &str, map: &std::collections::BTreeMap<String, _>| {
        let mut list = ResourceList::new();
        for (name, q) in map {
            let q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity = q;
            let value =
                parse_amount(&q.0).map_err(|e| format!("spec.resources.{field}.{name}: {e}"))?;
            list.0.insert(name.clone(), value);
        }
        Ok::<_, String>(list)
    };
    let requests = read("requests", &spec.resources.requests)?;
    let limits = read("limits", &spec.resources.limits)?;
    for name in ["cpu", "memory"] {
        if !requests.0.contains_key(name) {
            return Err(format!(
                "spec.resources.requests.{name}: must be set (and equal to spec.resources.limits.{name}): scavenger pods are Guaranteed"
            ));
        }
    }
    for name in requests.0.keys().chain(limits.0.keys()) {
        let (r, l) = (requests.0.get(name), limits.0.get(name));
        if r != l {
            let show = |m: &std::collections::BTreeMap<
                String,
                k8s_openapi::apimachinery::pkg::api::resource::Quantity,
            >| {
                m.get(name)
                    .map(|q| q.0.clone())
                    .unwrap_or_else(|| "(not set)".into())
            };
            return Err(format!(
                "spec.resources: requests.{name} ({}) must equal limits.{name} ({}): scavenger pods are Guaranteed",
                show(&spec.resources.requests),
                show(&spec.resources.limits)
            ));
        }
    }
    Ok(requests)
}

/// The requests of all its pods together (one pod's × `parallelism`, plus a `pods` each).
pub fn demand(spec: &ScavengerJobSpec) -> Result<ResourceList, String> {
    let mut one = pod_requests(spec)?;
    one.0.insert("pods".into(), 1000);
    let mut total = ResourceList::new();
    total
        .try_add_scaled(&one, i64::from(spec.parallelism.max(1)))
        .map_err(|name| {
            format!("spec.resources.requests.{name} × spec.parallelism is too large")
        })?;
    Ok(total)
}

/// What a mount names: (kind as people say it, name).
pub fn mount_source(mount: &ScavengerMount, index: usize) -> Result<(MountKind, &str), String> {
    let set: Vec<(MountKind, &str)> = [
        (
            MountKind::PersistentVolumeClaim,
            &mount.persistent_volume_claim,
        ),
        (MountKind::ConfigMap, &mount.config_map),
        (MountKind::Secret, &mount.secret),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
    .collect();
    match set.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!(
            "spec.mounts[{index}]: name one of persistentVolumeClaim, configMap or secret"
        )),
        _ => Err(format!(
            "spec.mounts[{index}]: name only one of persistentVolumeClaim, configMap or secret"
        )),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MountKind {
    PersistentVolumeClaim,
    ConfigMap,
    Secret,
}

impl MountKind {
    pub fn field(self) -> &'static str {
        match self {
            MountKind::PersistentVolumeClaim => "persistentVolumeClaim",
            MountKind::ConfigMap => "configMap",
            MountKind::Secret => "secret",
        }
    }
    pub fn kind(self) -> &'static str {
        match self {
            MountKind::PersistentVolumeClaim => "PersistentVolumeClaim",
            MountKind::ConfigMap => "ConfigMap",
            MountKind::Secret => "Secret",
        }
    }
}

/// Checks every mount: one source each, an absolute path not used twice, and the object existing
/// (`exists(kind, name)`). Err names the field and what is missing.
pub fn check_mounts(
    spec: &ScavengerJobSpec,
    namespace: &str,
    exists: &dyn Fn(MountKind, &str) -> bool,
) -> Result<(), String> {
    let mut paths = std::collections::BTreeSet::new();
    for (i, mount) in spec.mounts.iter().enumerate() {
        let (kind, name) = mount_source(mount, i)?;
        if !mount.mount_path.starts_with('/') || mount.mount_path.contains("..") {
            return Err(format!(
                "spec.mounts[{i}].mountPath: {:?} must be an absolute path without '..'",
                mount.mount_path
            ));
        }
        if !paths.insert(mount.mount_path.trim_end_matches('/')) {
            return Err(format!(
                "spec.mounts[{i}].mountPath: {:?} is mounted twice",
                mount.mount_path
            ));
        }
        if !exists(kind, name) {
            return Err(format!(
                "spec.mounts[{i}].{}: {} {namespace}/{name} does not exist",
                kind.field(),
                kind.kind()
            ));
        }
    }
    Ok(())
}

/// Every check that needs nothing but the spec: duration, resources, parallelism, command.
pub fn check(spec: &ScavengerJobSpec) -> Result<(), String> {
    if spec.image.trim().is_empty() {
        return Err("spec.image: must not be empty".into());
    }
    if !(1..=1000).contains(&spec.parallelism) {
        return Err(format!(
            "spec.parallelism: {} must be between 1 and 1000",
            spec.parallelism
        ));
    }
    duration(&spec.duration)?;
    demand(spec)?;
    if spec.run_as_user.is_some_and(|u| u < 0) {
        return Err("spec.runAsUser: must not be negative".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> ScavengerJobSpec {
        serde_json::from_value(value).expect("spec")
    }

    fn good() -> serde_json::Value {
        json!({"image": "busybox", "parallelism": 2, "duration": "30m",
               "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                             "limits": {"cpu": "500m", "memory": "64Mi"}}})
    }

    #[test]
    fn a_good_spec_passes_and_its_demand_counts_every_pod() {
        let s = spec(good());
        assert_eq!(check(&s), Ok(()));
        let d = demand(&s).expect("demand");
        assert_eq!(d.get("cpu"), 1000);
        assert_eq!(d.get("pods"), 2000);
        assert_eq!(d.get("memory"), 2 * 64 * 1024 * 1024 * 1000);
    }

    #[test]
    fn durations_that_are_not_durations_are_refused_naming_the_field() {
        for bad in ["", "soon", "30x", "0s", "-5m", "99999999999d", "400d"] {
            let e = duration(bad).expect_err(bad);
            assert!(e.starts_with("spec.duration"), "{bad}: {e}");
        }
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn requests_must_equal_limits_and_be_quantities() {
        let mut v = good();
        v["resources"]["limits"]["cpu"] = json!("1");
        let e = check(&spec(v)).expect_err("differs");
        assert!(
            e.contains("requests.cpu (500m) must equal limits.cpu (1)"),
            "{e}"
        );
        let mut v = good();
        v["resources"]["limits"]["nvidia.com/gpu"] = json!("1");
        let e = check(&spec(v)).expect_err("limit only");
        assert!(e.contains("requests.nvidia.com/gpu ((not set))"), "{e}");
        let mut v = good();
        v["resources"]["requests"]["cpu"] = json!("lots");
        v["resources"]["limits"]["cpu"] = json!("lots");
        let e = check(&spec(v)).expect_err("not a quantity");
        assert!(e.starts_with("spec.resources.requests.cpu"), "{e}");
        let mut v = good();
        v["resources"]["requests"]["cpu"] = json!("-1");
        v["resources"]["limits"]["cpu"] = json!("-1");
        assert!(check(&spec(v)).is_err());
        let mut v = good();
        v["resources"] = json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}});
        let e = check(&spec(v)).expect_err("no memory");
        assert!(e.starts_with("spec.resources.requests.memory"), "{e}");
    }

    #[test]
    fn a_demand_that_overflows_is_refused() {
        let mut v = good();
        v["parallelism"] = json!(1000);
        v["resources"]["requests"]["memory"] = json!("9000P");
        v["resources"]["limits"]["memory"] = json!("9000P");
        let e = check(&spec(v)).expect_err("overflow");
        assert!(e.contains("spec.resources"), "{e}");
    }

    #[test]
    fn mounts_name_one_existing_object_at_a_clean_path() {
        let exists = |kind: MountKind, name: &str| kind == MountKind::ConfigMap && name == "here";
        let with = |mounts: serde_json::Value| {
            let mut v = good();
            v["mounts"] = mounts;
            check_mounts(&spec(v), "ns", &exists)
        };
        assert_eq!(
            with(json!([{"configMap": "here", "mountPath": "/in"}])),
            Ok(())
        );
        assert_eq!(
            with(json!([{"configMap": "gone", "mountPath": "/in"}])),
            Err("spec.mounts[0].configMap: ConfigMap ns/gone does not exist".into())
        );
        assert_eq!(
            with(json!([{"configMap": "here", "mountPath": "/a"},
                        {"secret": "s", "mountPath": "/b"}])),
            Err("spec.mounts[1].secret: Secret ns/s does not exist".into())
        );
        assert!(with(json!([{"mountPath": "/in"}])).is_err());
        assert!(with(json!([{"configMap": "here", "secret": "x", "mountPath": "/in"}])).is_err());
        assert!(with(json!([{"configMap": "here", "mountPath": "relative"}])).is_err());
        assert!(with(json!([{"configMap": "here", "mountPath": "/a/../etc"}])).is_err());
        assert!(
            with(json!([{"configMap": "here", "mountPath": "/a"},
                        {"configMap": "here", "mountPath": "/a/"}]))
            .is_err()
        );
    }
}
