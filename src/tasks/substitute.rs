//! `${...}` substitution of context variables in every executor's fields. Pure.
//!
//! Variables: `${task.name}`, `${task.namespace}`, `${input}` (the TaskObject's data, as JSON) and
//! `${input.<field>[.<field>|.<index>...]}`, `${parent.name}`, `${parent.result}` and
//! `${parent.result.<field>...}`. Strings are inserted as they are, other values as compact JSON.
//! `$${` stands for a literal `${`.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubstitutionError {
    #[error("unknown variable ${{{variable}}} in {field:?}: {why} (known: {known})")]
    Unknown {
        variable: String,
        field: String,
        why: String,
        known: String,
    },
    #[error(
        "unterminated ${{ in {field:?}: every ${{ needs a closing }} (write $${{ for a literal ${{)"
    )]
    Unterminated { field: String },
}

/// The values `${...}` can refer to: a tree per root name (`task`, `input`, `parent`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Variables {
    roots: BTreeMap<String, Value>,
}

impl Variables {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a root (`task`, `input`, `parent`).
    pub fn with(mut self, root: &str, value: Value) -> Self {
        self.roots.insert(root.to_string(), value);
        self
    }

    fn known(&self) -> String {
        let mut names = Vec::new();
        for (root, value) in &self.roots {
            names.push(format!("${{{root}}}"));
            if let Value::Object(map) = value {
                for key in map.keys() {
                    names.push(format!("${{{root}.{key}}}"));
                }
            }
        }
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }

    /// The value of one variable (`input.count`).
    pub fn lookup(&self, variable: &str, field: &str) -> Result<&Value, SubstitutionError> {
        let unknown = |why: String| SubstitutionError::Unknown {
            variable: variable.to_string(),
            field: field.to_string(),
            why,
            known: self.known(),
        };
        let mut parts = variable.split('.');
        let root = parts.next().unwrap_or_default().trim();
        let mut value = self.roots.get(root).ok_or_else(|| {
            unknown(match root {
                "input" => "the Task has no input (spec.input)".into(),
                "parent" => "the Task has no parent (spec.parent)".into(),
                _ => format!("no variable called {root:?}"),
            })
        })?;
        let mut path = root.to_string();
        for part in parts {
            let next = match value {
                Value::Object(map) => map.get(part),
                Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            };
            value = next.ok_or_else(|| unknown(format!("{path} has no field {part:?}")))?;
            path = format!("{path}.{part}");
        }
        Ok(value)
    }
}

/// The text a value is inserted as.
pub fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Substitutes every `${...}` in `text`. `field` names where the text comes from, for errors.
pub fn substitute(text: &str, vars: &Variables, field: &str) -> Result<String, SubstitutionError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail
                .find('}')
                .ok_or_else(|| SubstitutionError::Unterminated {
                    field: field.to_string(),
                })?;
            let variable = tail[..end].trim();
            out.push_str(&render(vars.lookup(variable, field)?));
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Substitutes in every string of a JSON value (keys are left alone). `field` is the path of the
/// value, for errors.
pub fn substitute_json(
    value: &Value,
    vars: &Variables,
    field: &str,
) -> Result<Value, SubstitutionError> {
    Ok(match value {
        Value::String(s) => Value::String(substitute(s, vars, field)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| substitute_json(v, vars, &format!("{field}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    Ok((
                        k.clone(),
                        substitute_json(v, vars, &format!("{field}.{k}"))?,
                    ))
                })
                .collect::<Result<_, SubstitutionError>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> Variables {
        Variables::new()
            .with("task", json!({"name": "task-3", "namespace": "demo"}))
            .with(
                "input",
                json!({"count": 3, "limit": 10, "tags": ["a", "b"], "who": {"n": "x"}}),
            )
            .with("parent", json!({"name": "task-2", "result": {"count": 2}}))
    }

    #[test]
    fn substitutes_names_fields_and_json() {
        let v = vars();
        assert_eq!(
            substitute("${task.namespace}/${task.name}", &v, "f").unwrap(),
            "demo/task-3"
        );
        assert_eq!(substitute("n=${input.count}", &v, "f").unwrap(), "n=3");
        assert_eq!(substitute("${input.tags.1}", &v, "f").unwrap(), "b");
        assert_eq!(substitute("${ input.who.n }", &v, "f").unwrap(), "x");
        assert_eq!(
            substitute("${parent.result}", &v, "f").unwrap(),
            r#"{"count":2}"#
        );
        assert_eq!(substitute("${parent.result.count}", &v, "f").unwrap(), "2");
        assert_eq!(
            substitute("cost: $5, $${x}", &v, "f").unwrap(),
            "cost: $5, ${x}"
        );
        assert_eq!(substitute("no variables", &v, "f").unwrap(), "no variables");
    }

    #[test]
    fn unknown_variables_say_what_is_known() {
        let err = substitute("${task.nmae}", &vars(), "http.url").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("${task.nmae}"), "{text}");
        assert!(text.contains("http.url"), "{text}");
        assert!(text.contains("task has no field \"nmae\""), "{text}");
        assert!(text.contains("${task.name}"), "{text}");
        let err = substitute("${colour}", &vars(), "f").unwrap_err();
        assert!(err.to_string().contains("no variable called \"colour\""));
        let no_parent = Variables::new().with("task", json!({"name": "t"}));
        let err = substitute("${parent.result}", &no_parent, "f").unwrap_err();
        assert!(err.to_string().contains("no parent"), "{err}");
        assert!(matches!(
            substitute("${task.name", &vars(), "f"),
            Err(SubstitutionError::Unterminated { .. })
        ));
    }

    #[test]
    fn substitutes_inside_json_values() {
        let manifest = json!({"metadata": {"name": "${task.name}-cm"}, "data": {"n": "${input.count}", "k": 1}});
        let out = substitute_json(&manifest, &vars(), "manifest").unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "task-3-cm"}, "data": {"n": "3", "k": 1}})
        );
        let bad = json!({"spec": {"args": ["${nope}"]}});
        let err = substitute_json(&bad, &vars(), "template").unwrap_err();
        assert!(err.to_string().contains("template.spec.args[0]"), "{err}");
    }
}
