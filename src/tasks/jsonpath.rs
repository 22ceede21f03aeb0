//! JSONPath for results (`resultJsonPath`), and the conditions (`successCondition`,
//! `failureCondition`) of the resource executor: JSONPath or CEL. Pure.
//!
//! A path is RFC 9535 JSONPath (`$.status.phase`, `$.items[?@.ready == true]`); `.status.phase` and
//! kubectl's `{.status.phase}` are accepted too. A condition starting with `$`, `.`, `{` or `[` is
//! JSONPath: a path alone (holds when it selects a value that is not `false`, `null`, `""`, `[]` or
//! `{}`) or a path compared with a JSON literal: `$.status.phase == "Succeeded"`,
//! `$.data.done != "false"` (a bare word is taken as a string). Any other condition is CEL, with the
//! object as `self` (and `object`), and must evaluate to a bool:
//! `self.status.phase == "Succeeded" && self.status.succeeded >= 1`. A field that does not exist
//! (yet) makes a CEL condition not hold; use `has(self.status.x)` to test for it.

use jsonpath_rust::JsonPath;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("invalid JSONPath {path:?}: {message}")]
    Invalid { path: String, message: String },
    #[error("JSONPath {path:?} selected nothing")]
    NoMatch { path: String },
    #[error("CEL condition {expr:?}: {message}")]
    Cel { expr: String, message: String },
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
pub enum Condition {
    Path {
        path: String,
        compare: Option<(bool, Value)>,
    },
    Cel {
        expr: String,
    },
}

fn is_jsonpath(expr: &str) -> bool {
    matches!(
        expr.trim_start().chars().next(),
        Some('$' | '.' | '{' | '[')
    )
}

fn cel_program(expr: &str) -> Result<cel_interpreter::Program, PathError> {
    let cel_err = |message: String| PathError::Cel {
        expr: expr.to_string(),
        message,
    };
    // cel-parser 0.10 (antlr4rust) panics on some malformed input instead of returning an error: a
    // user's typo must fail their Task, not the controller.
    std::panic::catch_unwind(|| cel_interpreter::Program::compile(expr))
        .map_err(|_| cel_err("not a valid CEL expression (the parser gave up)".into()))?
        .map_err(|e| cel_err(e.to_string()))
}

fn cel_holds(expr: &str, object: &Value) -> Result<bool, PathError> {
    let cel_err = |message: String| PathError::Cel {
        expr: expr.to_string(),
        message,
    };
    let program = cel_program(expr)?;
    let mut context = cel_interpreter::Context::default();
    for name in ["self", "object"] {
        context
            .add_variable(name, object.clone())
            .map_err(|e| cel_err(format!("the object as CEL: {e}")))?;
    }
    let executed =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.execute(&context)))
            .map_err(|_| cel_err("evaluation failed inside the CEL library".into()))?;
    match executed {
        Ok(cel_interpreter::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(cel_err(format!("evaluates to {other:?}, not a bool"))),
        // Not there yet: the condition does not hold (yet).
        Err(cel_interpreter::ExecutionError::NoSuchKey(_)) => Ok(false),
        Err(e) => Err(cel_err(e.to_string())),
    }
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
        if !is_jsonpath(expr) {
            cel_program(expr)?;
            return Ok(Condition::Cel {
                expr: expr.trim().to_string(),
            });
        }
        let (path, compare) = match split_comparison(expr) {
            Some((at, equal)) => {
                let literal = expr[at + 2..].trim();
                let value = serde_json::from_str(literal).unwrap_or_else(|_| {
                    // 'single quoted' or a bare word: a string.
                    Value::String(literal.trim_matches('\'').to_string())
                });
                (expr[..at].trim().to_string(), Some((equal, value)))
            }
            None => (expr.trim().to_string(), None),
        };
        // Validate the path once, on an empty document.
        select(&Value::Null, &path)?;
        Ok(Condition::Path { path, compare })
    }

    pub fn holds(&self, value: &Value) -> Result<bool, PathError> {
        let (path, compare) = match self {
            Condition::Cel { expr } => return cel_holds(expr, value),
            Condition::Path { path, compare } => (path, compare),
        };
        let found = select(value, path)?;
        Ok(match compare {
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

    #[test]
    fn cel_conditions() {
        let doc =
            json!({"status": {"phase": "Succeeded", "succeeded": 2}, "data": {"done": "true"}});
        let holds = |c: &str| Condition::parse(c).unwrap().holds(&doc);
        assert!(
            holds(r#"self.status.phase == "Succeeded" && self.status.succeeded >= 1"#).unwrap()
        );
        assert!(holds(r#"object.data.done == "true""#).unwrap());
        assert!(!holds(r#"self.status.phase == "Failed""#).unwrap());
        assert!(holds("has(self.status.phase)").unwrap());
        assert!(!holds("has(self.status.failed)").unwrap());
        // Not there yet: does not hold.
        assert!(!holds(r#"self.status.failed == "x""#).unwrap());
        // Not a bool: an error that says so.
        let err = holds("self.status.succeeded").unwrap_err();
        assert!(err.to_string().contains("not a bool"), "{err}");
        assert!(Condition::parse("self.status.phase ==").is_err());
    }
}
