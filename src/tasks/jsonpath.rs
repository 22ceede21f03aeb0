//! JSONPath for results (`resultJsonPath`) and conditions (`successCondition`,
//! `failureCondition`). Pure.
//!
//! A path is RFC 9535 JSONPath (`$.status.phase`, `$.items[?@.ready == true]`); `.status.phase` and
//! kubectl's `{.status.phase}` are accepted too. A condition is a path alone (holds when it selects
//! a value that is not `false`, `null`, `""`, `[]` or `{}`) or a path compared with a JSON literal:
//! `$.status.phase == "Succeeded"`, `$.data.done != "false"` (a bare word is taken as a string).

use jsonpath_rust::JsonPath;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("invalid JSONPath {path:?}: {message}")]
    Invalid { path: String, message: String },
    #[error("JSONPath {path:?} selected nothing")]
    NoMatch { path: String },
}

/// `$`-rooted form of a path written in any accepted style.
pub fn normalize(path: &str) -> String {
    let mut p = path.trim();
    if p.starts_with('{') && p.ends_with('}') && p.len() >= 2 {
        p = p[1..p.len() - 1].trim();
    }
    if p.starts_with('$') {
        p.to_string()
    } else if p.starts_with('.') || p.starts_with('[') {
        format!("${p}")
    } else {
        format!("$.{p}")
    }
}

/// Every value the path selects.
pub fn select(value: &Value, path: &str) -> Result<Vec<Value>, PathError> {
    let normalized = normalize(path);
    value
        .query(&normalized)
        .map(|found| found.into_iter().cloned().collect())
        .map_err(|e| PathError::Invalid {
            path: path.to_string(),
            message: e.to_string(),
        })
}

/// The result a path picks: the one value it selects, or an array of all when it selects several.
pub fn pick(value: &Value, path: &str) -> Result<Value, PathError> {
    let mut found = select(value, path)?;
    match found.len() {
        0 => Err(PathError::NoMatch {
            path: path.to_string(),
        }),
        1 => Ok(found.remove(0)),
        _ => Ok(Value::Array(found)),
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    path: String,
    compare: Option<(bool, Value)>,
}

/// Finds a top-level ` == ` or ` != ` (outside brackets, parentheses and quotes).
fn split_comparison(expr: &str) -> Option<(usize, bool)> {
    let bytes = expr.as_bytes();
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i + 1 < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'[' | b'(' | b'{' => depth += 1,
                b']' | b')' | b'}' => depth -= 1,
                b'=' | b'!' if depth == 0 && bytes[i + 1] == b'=' => return Some((i, b == b'=')),
                _ => {}
            },
        }
        i += 1;
    }
    None
}

impl Condition {
    pub fn parse(expr: &str) -> Result<Condition, PathError> {
        let (path, compare) = match split_comparison(expr) {
            Some((at, equal)) => {
                let literal = expr[at + 2..].trim();
                let value = serde_json::from_str(literal)
                    .or_else(|_| {
                        // 'single quoted' or a bare word: a string.
                        let unquoted = literal.trim_matches('\'');
                        Ok::<Value, serde_json::Error>(Value::String(unquoted.to_string()))
                    })
                    .unwrap_or(Value::Null);
                (expr[..at].trim().to_string(), Some((equal, value)))
            }
            None => (expr.trim().to_string(), None),
        };
        // Validate the path once, on an empty document.
        select(&Value::Null, &path)?;
        Ok(Condition { path, compare })
    }

    pub fn holds(&self, value: &Value) -> Result<bool, PathError> {
        let found = select(value, &self.path)?;
        Ok(match &self.compare {
            None => found.iter().any(truthy),
            Some((true, literal)) => found.iter().any(|v| v == literal),
            Some((false, literal)) => !found.is_empty() && found.iter().all(|v| v != literal),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_in_every_style() {
        let doc = json!({"status": {"phase": "Succeeded", "n": [1, 2]}});
        for p in [
            "$.status.phase",
            ".status.phase",
            "{.status.phase}",
            "status.phase",
        ] {
            assert_eq!(pick(&doc, p).unwrap(), json!("Succeeded"), "{p}");
        }
        assert_eq!(pick(&doc, "$.status.n[*]").unwrap(), json!([1, 2]));
        assert!(matches!(
            pick(&doc, "$.nothing"),
            Err(PathError::NoMatch { .. })
        ));
        assert!(matches!(
            select(&doc, "$.[[["),
            Err(PathError::Invalid { .. })
        ));
    }

    #[test]
    fn conditions() {
        let doc = json!({"status": {"phase": "Succeeded", "ready": true, "failed": false}, "data": {"done": "true"}});
        let holds = |c: &str| Condition::parse(c).unwrap().holds(&doc).unwrap();
        assert!(holds(r#"$.status.phase == "Succeeded""#));
        assert!(holds(".status.phase == 'Succeeded'"));
        assert!(holds(".status.phase == Succeeded"));
        assert!(!holds(r#"$.status.phase == "Failed""#));
        assert!(holds(r#"$.status.phase != "Failed""#));
        assert!(!holds(r#"$.status.missing != "Failed""#));
        assert!(holds("$.status.ready"));
        assert!(!holds("$.status.failed"));
        assert!(!holds("$.status.missing"));
        assert!(holds(r#"$.data.done == "true""#));
        // A filter with == inside brackets is part of the path.
        assert!(holds(r#"$[?@.phase == "Succeeded"]"#));
        assert!(Condition::parse("$.[[[").is_err());
    }
}
