//! A pod's requests counted the way the scheduler counts them: the larger of its init containers'
//! and its containers' (plus sidecars and overhead), or its pod-level resources.

use super::quantity::{NEGATIVE, parse_quantity};
use super::*;

/// A pod's resources that cannot be counted: the field and what is wrong with it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {problem}")]
pub struct ResourceError {
    /// The field's path, e.g. `spec.containers[1].resources.requests.cpu`.
    pub field: String,
    pub problem: String,
}

impl ResourceError {
    pub(super) fn too_large(field: &str, resource: &str) -> Self {
        ResourceError {
            field: field.to_string(),
            problem: format!(
                "the pod's {resource} adds up to more than sluice can count (9223372036854775807m)"
            ),
        }
    }
}

/// The path of the entry `name` of the resource list at `path`.
pub(super) fn entry_path(path: &str, name: &str) -> String {
    if name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        format!("{path}.{name}")
    } else {
        format!("{path}[{name}]")
    }
}

/// Reads the requests or limits at `path`: every entry a quantity, none negative. The webhook
/// runs before the API server validates a pod, and templates are never validated as pods.
pub(super) fn read_list(
    map: Option<&BTreeMap<String, Quantity>>,
    path: &str,
) -> Result<ResourceList, ResourceError> {
    let mut list = ResourceList::new();
    for (name, quantity) in map.into_iter().flatten() {
        let problem = |reason: String| ResourceError {
            field: entry_path(path, name),
            problem: reason,
        };
        let value = parse_quantity(&quantity.0).map_err(|e| problem(e.to_string()))?;
        if value < 0 {
            return Err(problem(format!("{NEGATIVE} ({:?})", quantity.0)));
        }
        list.0.insert(name.clone(), value);
    }
    Ok(list)
}

pub(super) fn container_requests(
    container: &Container,
    path: &str,
) -> Result<ResourceList, ResourceError> {
    // The scheduler uses requests, and limits where a request is missing (the API server defaults
    // requests from limits, so this matters only for objects that were never stored).
    let resources = container.resources.as_ref();
    let path = format!("{path}.resources");
    let mut list = read_list(
        resources.and_then(|r| r.limits.as_ref()),
        &format!("{path}.limits"),
    )?;
    let requests = read_list(
        resources.and_then(|r| r.requests.as_ref()),
        &format!("{path}.requests"),
    )?;
    list.0.extend(requests.0);
    Ok(list)
}

/// What a pod requests, as the scheduler counts it (component-helpers' `PodRequests`): the larger
/// of (all app containers + sidecars) and each init container together with the sidecars started
/// before it; pod-level requests (`spec.resources`) instead for the resources set there; plus the
/// pod overhead, plus one `pods`. Err names the field that is invalid, negative or overflows.
/// Sums are checked, never saturated: a pod whose total overflows is refused, not counted.
pub fn pod_requests(spec: &PodSpec) -> Result<ResourceList, ResourceError> {
    let mut total = container_requests_total(spec)?;
    apply_pod_level(spec, &mut total)?;
    let overhead = read_list(spec.overhead.as_ref(), "spec.overhead")?;
    total
        .try_add_all(&overhead)
        .map_err(|name| ResourceError::too_large("spec.overhead", &name))?;
    total.0.insert("pods".to_string(), 1000);
    Ok(total)
}

/// The containers' aggregate (component-helpers' `AggregateContainerRequests`).
pub(super) fn container_requests_total(spec: &PodSpec) -> Result<ResourceList, ResourceError> {
    let mut total = ResourceList::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        total
            .try_add_all(&container_requests(c, &path)?)
            .map_err(|name| ResourceError::too_large(&path, &name))?;
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        let requests = container_requests(c, &path)?;
        let too_large = |name: String| ResourceError::too_large(&path, &name);
        if c.restart_policy.as_deref() == Some("Always") {
            // A sidecar runs beside everything that starts after it.
            total.try_add_all(&requests).map_err(too_large)?;
            sidecars.try_add_all(&requests).map_err(too_large)?;
            init_peak.max_with(&sidecars);
        } else {
            let mut during = sidecars.clone();
            during.try_add_all(&requests).map_err(too_large)?;
            init_peak.max_with(&during);
        }
    }
    total.max_with(&init_peak);
    Ok(total)
}

/// Resources the scheduler takes from the pod level (component-helpers'
/// `IsSupportedPodLevelResource`).
pub(super) fn is_pod_level_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

/// Pod-level resources (`spec.resources`, PodLevelResources): for a resource requested there the
/// scheduler counts that request instead of the containers'. The API server defaults a missing
/// pod-level request from the pod-level limit when no container requests the resource (always
/// for hugepages); templates are never defaulted, so that is done here too.
pub(super) fn apply_pod_level(
    spec: &PodSpec,
    total: &mut ResourceList,
) -> Result<(), ResourceError> {
    let Some(resources) = &spec.resources else {
        return Ok(());
    };
    let requests = read_list(resources.requests.as_ref(), "spec.resources.requests")?;
    let limits = read_list(resources.limits.as_ref(), "spec.resources.limits")?;
    let defaulted = limits.0.iter().filter(|(name, _)| {
        !requests.0.contains_key(*name)
            && (!total.0.contains_key(*name) || name.starts_with("hugepages-"))
    });
    let pod_level: Vec<(String, i64)> = requests
        .0
        .iter()
        .chain(defaulted)
        .filter(|(name, _)| is_pod_level_resource(name))
        .map(|(name, value)| (name.clone(), *value))
        .collect();
    for (name, value) in pod_level {
        // Validation (after this webhook) requires the pod level to be at least the containers'
        // aggregate; the larger of the two is the same for a valid pod and never less otherwise.
        let slot = total.0.entry(name).or_insert(0);
        *slot = (*slot).max(value);
    }
    Ok(())
}
