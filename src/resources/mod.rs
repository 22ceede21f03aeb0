//! Resource quantities as integers (milli-units), parsed the way Kubernetes parses them, and pod
//! requests counted the way the scheduler counts them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A set of resource amounts in milli-units (1 cpu = 1000, 1 byte of memory = 1000).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceList(pub BTreeMap<String, i64>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid quantity {quantity:?}: {reason}")]
pub struct QuantityError {
    pub quantity: String,
    pub reason: &'static str,
}

impl ResourceList {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Adds, saturating at i64::MAX. Amounts are never negative (parsing refuses them), so a
    /// saturated total is only ever too high: a queue looks full, it never looks emptier than it
    /// is. Where an application asks, use the `try_` forms and refuse it instead.
    pub fn add(&mut self, name: &str, milli: i64) {
        // The name is copied only when missing: adding into a list that already has the
        // resource (a pass's tallies, most of the time) allocates nothing.
        match self.0.get_mut(name) {
            Some(slot) => *slot = slot.saturating_add(milli),
            None => {
                self.0.insert(name.to_string(), milli);
            }
        }
    }

    /// Sets `name` to `milli`, copying the name only when it is missing.
    fn set(&mut self, name: &str, milli: i64) {
        match self.0.get_mut(name) {
            Some(slot) => *slot = milli,
            None => {
                self.0.insert(name.to_string(), milli);
            }
        }
    }

    pub fn add_all(&mut self, other: &ResourceList) {
        for (name, value) in &other.0 {
            self.add(name, *value);
        }
    }

    /// Adds `other` `times` times, saturating as [`ResourceList::add`] does.
    pub fn add_scaled(&mut self, other: &ResourceList, times: i64) {
        for (name, value) in &other.0 {
            self.add(name, value.saturating_mul(times));
        }
    }

    /// Adds `other`, or names the first resource whose total would overflow (the list is then
    /// left partly added: callers refuse the whole thing).
    pub fn try_add_all(&mut self, other: &ResourceList) -> Result<(), String> {
        self.try_add_scaled(other, 1)
    }

    /// Adds `other` `times` times, or names the first resource whose total would overflow.
    pub fn try_add_scaled(&mut self, other: &ResourceList, times: i64) -> Result<(), String> {
        for (name, value) in &other.0 {
            let now = self.get(name);
            let sum = value
                .checked_mul(times)
                .and_then(|v| now.checked_add(v))
                .ok_or_else(|| name.clone())?;
            self.set(name, sum);
        }
        Ok(())
    }

    /// Every entry the larger of the two.
    pub fn max_with(&mut self, other: &ResourceList) {
        for (name, value) in &other.0 {
            let larger = self.get(name).max(*value);
            self.set(name, larger);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(|v| *v == 0)
    }

    /// Parses a Kubernetes resource list of amounts (a quota, a pod set's requests): none negative.
    pub fn from_quantities(map: &BTreeMap<String, Quantity>) -> Result<Self, QuantityError> {
        let mut list = ResourceList::new();
        for (name, quantity) in map {
            list.0.insert(name.clone(), parse_amount(&quantity.0)?);
        }
        Ok(list)
    }

    /// The list as Kubernetes quantities, formatted for people (`2`, `500m`, `8Gi`).
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        self.0
            .iter()
            .map(|(name, value)| (name.clone(), Quantity(format_quantity(name, *value))))
            .collect()
    }
}

/// Why a quantity is refused. The first three are apimachinery's own refusals.
const NOT_A_QUANTITY: &str =
    "not a quantity: a number with an optional suffix, such as 500m, 1.5, 8Gi or 1e3";
const UNKNOWN_SUFFIX: &str =
    "unknown suffix: n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3";
const NO_DIGITS: &str = "no digits";
pub const TOO_LARGE: &str = "too large: sluice counts up to 9223372036854775807m";
const NEGATIVE: &str = "must not be negative";

/// Parses an amount of a resource: a quantity, not negative.
pub fn parse_amount(text: &str) -> Result<i64, QuantityError> {
    match parse_quantity(text)? {
        value if value < 0 => Err(QuantityError {
            quantity: text.to_string(),
            reason: NEGATIVE,
        }),
        value => Ok(value),
    }
}

/// Parses a Kubernetes quantity ("4", "500m", "1.5", "8Gi", "1e3", "100M") into milli-units,
/// rounding the magnitude up as Kubernetes does when a value has more precision than a milli-unit.
///
/// It accepts and refuses exactly what Kubernetes does when it reads a quantity from an object
/// (`Quantity.UnmarshalJSON`: `ParseQuantity(strings.TrimSpace(s))`, apimachinery v0.36.3), quirks
/// included, with the same value; a value beyond an i64 of milli-units is refused as too large.
/// The work is proportional to the text's length, never to an exponent. Checked against Kubernetes
/// itself: see `quantities_parse_as_kubernetes_parses_them` below.
pub fn parse_quantity(text: &str) -> Result<i64, QuantityError> {
    let err = |reason| QuantityError {
        quantity: text.to_string(),
        reason,
    };
    let parts = Parts::split(text.trim()).ok_or_else(|| err(NOT_A_QUANTITY))?;
    let suffix = Suffix::interpret(parts.suffix).ok_or_else(|| err(UNKNOWN_SUFFIX))?;
    let slow = parts.slow_path(suffix);
    if !parts.has_digits {
        // The slow path reads the number's text and finds no digit; the int64 one reads zero.
        return if slow { Err(err(NO_DIGITS)) } else { Ok(0) };
    }
    let (exp10, exp2) = parts.scale(suffix, slow);
    let digits = [parts.whole, parts.fraction].concat();
    let magnitude = milli_magnitude(&digits, exp10 + 3, exp2).ok_or_else(|| err(TOO_LARGE))?;
    Ok(if parts.negative {
        -magnitude
    } else {
        magnitude
    })
}

/// A quantity's text cut as apimachinery's `parseQuantityString` cuts it:
/// `[+-]? digits* (. digits*)? [eEinumkKMGTP]* [+-]? digits*`, nothing else.
struct Parts<'a> {
    negative: bool,
    /// Whether the number has a digit at all: `.`, `-` and `e3` have none.
    has_digits: bool,
    /// The digits before the point, leading zeros removed.
    whole: &'a [u8],
    fraction: &'a [u8],
    suffix: &'a [u8],
}

impl<'a> Parts<'a> {
    fn split(text: &'a str) -> Option<Self> {
        let b = text.as_bytes();
        if b.is_empty() {
            return None;
        }
        let (negative, mut pos) = match b[0] {
            b'-' => (true, 1),
            b'+' => (false, 1),
            _ => (false, 0),
        };
        let count = |from: usize, accept: fn(&u8) -> bool| {
            b[from..].iter().take_while(|c| accept(c)).count()
        };
        let zeros = count(pos, |c| *c == b'0');
        pos += zeros;
        let whole = &b[pos..pos + count(pos, u8::is_ascii_digit)];
        pos += whole.len();
        let mut fraction: &[u8] = &[];
        if b.get(pos) == Some(&b'.') {
            pos += 1;
            fraction = &b[pos..pos + count(pos, u8::is_ascii_digit)];
            pos += fraction.len();
        }
        let suffix = &b[pos..];
        pos += count(pos, |c| b"eEinumkKMGTP".contains(c));
        if matches!(b.get(pos), Some(b'+' | b'-')) {
            pos += 1;
        }
        pos += count(pos, u8::is_ascii_digit);
        (pos == b.len()).then_some(Parts {
            negative,
            has_digits: zeros > 0 || !whole.is_empty() || !fraction.is_empty(),
            whole,
            fraction,
            suffix,
        })
    }

    /// Whether apimachinery takes its slow path (arbitrary precision) rather than its int64 one.
    /// The two give the same value, but the slow one reads the number's text and refuses one
    /// without digits, and its exponent arithmetic differs at the int32 edges.
    fn slow_path(&self, suffix: Suffix) -> bool {
        let whole_len = self.whole.len().max(1); // no digit before the point counts as "0"
        match suffix {
            Suffix::Decimal(exponent) => {
                whole_len + self.fraction.len() > 18
                    || exponent.wrapping_sub(self.fraction_len()) < -9
            }
            Suffix::Binary(exponent) => {
                // apimachinery's estimate of the digits a binary suffix adds.
                let precision = 15 - whole_len as i64 - i64::from(exponent * 3 / 10) - 1;
                !self.fraction.is_empty() || precision < 0
            }
        }
    }

    /// The powers of 10 and 2 the digits (whole and fraction) are multiplied by. On the int64
    /// path the decimal one is the suffix's exponent less the fraction's length; on the slow path
    /// the fraction's length less the exponent, negated: both in int32 arithmetic that wraps, so
    /// an exponent near -2^31 makes a huge number, not a tiny one.
    fn scale(&self, suffix: Suffix, slow: bool) -> (i64, u32) {
        let fraction_len = self.fraction_len();
        match suffix {
            Suffix::Decimal(exponent) if slow => (
                -i64::from(fraction_len.wrapping_add(exponent.wrapping_neg())),
                0,
            ),
            Suffix::Decimal(exponent) => (i64::from(exponent.wrapping_sub(fraction_len)), 0),
            Suffix::Binary(exponent) => (-i64::from(fraction_len), exponent),
        }
    }

    fn fraction_len(&self) -> i32 {
        // A request body is far shorter than 2^31 bytes.
        i32::try_from(self.fraction.len()).unwrap_or(i32::MAX)
    }
}

#[derive(Clone, Copy)]
enum Suffix {
    /// × 10^n
    Decimal(i32),
    /// × 2^n
    Binary(u32),
}

impl Suffix {
    fn interpret(suffix: &[u8]) -> Option<Self> {
        Some(match suffix {
            b"" => Suffix::Decimal(0),
            b"n" => Suffix::Decimal(-9),
            b"u" => Suffix::Decimal(-6),
            b"m" => Suffix::Decimal(-3),
            b"k" => Suffix::Decimal(3),
            b"M" => Suffix::Decimal(6),
            b"G" => Suffix::Decimal(9),
            b"T" => Suffix::Decimal(12),
            b"P" => Suffix::Decimal(15),
            b"E" => Suffix::Decimal(18),
            b"Ki" => Suffix::Binary(10),
            b"Mi" => Suffix::Binary(20),
            b"Gi" => Suffix::Binary(30),
            b"Ti" => Suffix::Binary(40),
            b"Pi" => Suffix::Binary(50),
            b"Ei" => Suffix::Binary(60),
            [b'e' | b'E', exponent @ ..] if !exponent.is_empty() => {
                // apimachinery parses an int64 and keeps its low 32 bits.
                let exponent: i64 = std::str::from_utf8(exponent).ok()?.parse().ok()?;
                Suffix::Decimal(exponent as i32)
            }
            _ => return None,
        })
    }
}

/// ceil(digits × 10^exp10 × 2^exp2) as an i64, None when it does not fit. The digits are ASCII
/// decimal digits, leading zeros allowed; the work is linear in their number whatever exp10.
fn milli_magnitude(digits: &[u8], exp10: i64, exp2: u32) -> Option<i64> {
    let first = digits.iter().position(|d| *d != b'0');
    let Some(first) = first else {
        return Some(0);
    };
    let mut digits: Vec<u8> = digits[first..].iter().map(|d| d - b'0').collect();
    if exp2 > 0 {
        multiply(&mut digits, 1u64 << exp2);
    }
    let len = i64::try_from(digits.len()).ok()?;
    if exp10 >= 0 {
        // At least 10^(len - 1 + exp10): more than 19 digits never fits.
        if len + exp10 > 19 {
            return None;
        }
        let value = to_u64(&digits)?.checked_mul(10u64.checked_pow(u32::try_from(exp10).ok()?)?)?;
        return i64::try_from(value).ok();
    }
    // Dividing by 10^-exp10 keeps the leading len + exp10 digits; any other non-zero rounds up.
    let kept = usize::try_from(len + exp10).unwrap_or(0);
    let rest_non_zero = digits[kept..].iter().any(|d| *d != 0);
    let value = to_u64(&digits[..kept])?.checked_add(u64::from(rest_non_zero))?;
    i64::try_from(value).ok()
}

/// Multiplies the decimal digits (most significant first) by `factor`, in place.
fn multiply(digits: &mut Vec<u8>, factor: u64) {
    let mut carry: u128 = 0;
    for d in digits.iter_mut().rev() {
        let v = u128::from(*d) * u128::from(factor) + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    while carry > 0 {
        digits.insert(0, (carry % 10) as u8);
        carry /= 10;
    }
}

/// The digits as a number, None beyond u64.
fn to_u64(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |value, d| {
        value.checked_mul(10)?.checked_add(u64::from(*d))
    })
}

/// Formats milli-units for people: cpu-like values as `2` or `1500m`, byte-like values (memory,
/// storage) in the largest binary unit that divides them, everything else as a plain number.
pub fn format_quantity(name: &str, milli: i64) -> String {
    let bytes_like =
        name == "memory" || name.ends_with("storage") || name.starts_with("hugepages-");
    if bytes_like && milli % 1000 == 0 {
        let bytes = milli / 1000;
        for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
            if bytes != 0 && bytes % (1i64 << shift) == 0 {
                return format!("{}{suffix}", bytes >> shift);
            }
        }
        return bytes.to_string();
    }
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Formats an amount for a message: memory in Gi/Mi with decimals allowed, cpu in cores.
pub fn describe_quantity(name: &str, milli: i64) -> String {
    if name == "memory" {
        let bytes = milli as f64 / 1000.0;
        let gib = bytes / (1u64 << 30) as f64;
        if gib >= 1.0 {
            return format!("{}Gi", trim_float(gib));
        }
        return format!("{}Mi", trim_float(bytes / (1u64 << 20) as f64));
    }
    if milli % 1000 == 0 {
        return (milli / 1000).to_string();
    }
    trim_float(milli as f64 / 1000.0)
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A pod's resources that cannot be counted: the field and what is wrong with it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {problem}")]
pub struct ResourceError {
    /// The field's path, e.g. `spec.containers[1].resources.requests.cpu`.
    pub field: String,
    pub problem: String,
}

impl ResourceError {
    fn too_large(field: &str, resource: &str) -> Self {
        ResourceError {
            field: field.to_string(),
            problem: format!(
                "the pod's {resource} adds up to more than sluice can count (9223372036854775807m)"
            ),
        }
    }
}

/// The path of the entry `name` of the resource list at `path`.
fn entry_path(path: &str, name: &str) -> String {
    if name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        format!("{path}.{name}")
    } else {
        format!("{path}[{name}]")
    }
}

/// Reads the requests or limits at `path`: every entry a quantity, none negative. The webhook
/// runs before the API server validates a pod, and templates are never validated as pods.
fn read_list(
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

fn container_requests(container: &Container, path: &str) -> Result<ResourceList, ResourceError> {
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
fn container_requests_total(spec: &PodSpec) -> Result<ResourceList, ResourceError> {
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
fn is_pod_level_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

/// Pod-level resources (`spec.resources`, PodLevelResources): for a resource requested there the
/// scheduler counts that request instead of the containers'. The API server defaults a missing
/// pod-level request from the pod-level limit when no container requests the resource (always
/// for hugepages); templates are never defaulted, so that is done here too.
fn apply_pod_level(spec: &PodSpec, total: &mut ResourceList) -> Result<(), ResourceError> {
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

#[cfg(test)]
mod tests {
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
}
