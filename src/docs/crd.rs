//! One reference page per CRD, read from the CRD objects sluice generates (the same objects as
//! `manifests/crds/`): names, scope, `kubectl get` columns and every field of the schema with its
//! type, default, allowed values, validation rules and description.

use serde_json::Value;

use super::cell;

/// `(file name, Markdown)` per CRD, in the order [`crate::api::crds`] gives them.
pub(super) fn pages() -> anyhow::Result<Vec<(String, String)>> {
    let mut pages = Vec::new();
    for crd in crate::api::crds() {
        let crd = serde_json::to_value(&crd)?;
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        pages.push((format!("crd-{}.md", kind.to_lowercase()), page(&kind, &crd)));
    }
    Ok(pages)
}

/// The page of one CRD (as JSON).
fn page(kind: &str, crd: &Value) -> String {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("?");
    let mut out = format!("# {kind}\n\n");
    let short = strings(&spec["names"]["shortNames"]);
    out.push_str(&format!(
        "`{group}`, {} scope, plural `{}`{}. CRD `{}`.\n\n",
        spec["scope"].as_str().unwrap_or("?"),
        spec["names"]["plural"].as_str().unwrap_or("?"),
        if short.is_empty() {
            String::new()
        } else {
            format!(", short names `{}`", short.join("`, `"))
        },
        crd["metadata"]["name"].as_str().unwrap_or("?"),
    ));
    for version in spec["versions"].as_array().into_iter().flatten() {
        out.push_str(&version_section(version));
    }
    out
}

/// One served version: its description, its printer columns and its fields.
fn version_section(version: &Value) -> String {
    let name = version["name"].as_str().unwrap_or("?");
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut out = format!("## Version `{name}`\n\n");
    if let Some(description) = schema["description"].as_str() {
        out.push_str(&format!("{}\n\n", super::prose(description.trim())));
    }
    let columns = version["additionalPrinterColumns"].as_array();
    if let Some(columns) = columns.filter(|c| !c.is_empty()) {
        out.push_str("### `kubectl get` columns\n\n| column | from | shown | description |\n|---|---|---|---|\n");
        for column in columns {
            out.push_str(&format!(
                "| {} | `{}` | {} | {} |\n",
                column["name"].as_str().unwrap_or("?").to_uppercase(),
                column["jsonPath"].as_str().unwrap_or("?"),
                if column["priority"].as_i64().unwrap_or(0) > 0 {
                    "`-o wide`"
                } else {
                    "always"
                },
                cell(column["description"].as_str().unwrap_or("")),
            ));
        }
        out.push('\n');
    }
    let mut rows = Vec::new();
    for part in ["spec", "status"] {
        if !schema["properties"][part].is_null() {
            let required = strings(&schema["required"]).contains(&part.to_string());
            field_rows(part, &schema["properties"][part], required, &mut rows);
        }
    }
    out.push_str("### Fields\n\n| field | type | required | default | description |\n|---|---|---|---|---|\n");
    for row in rows {
        out.push_str(&row);
    }
    out.push('\n');
    out
}

/// The row of the field at `path` and of every field below it (object properties, array items,
/// map values).
fn field_rows(path: &str, schema: &Value, required: bool, rows: &mut Vec<String>) {
    let mut notes = Vec::new();
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", plain(v))).collect();
        notes.push(format!("One of {}.", values.join(", ")));
    }
    for (key, what) in [("minimum", "at least"), ("maximum", "at most")] {
        if let Some(bound) = schema.get(key) {
            notes.push(format!("{} {}.", capitalised(what), plain(bound)));
        }
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        notes.push(format!(
            "Rule `{}`: {}",
            rule["rule"].as_str().unwrap_or("?"),
            rule["message"].as_str().unwrap_or("")
        ));
    }
    let mut description = schema["description"].as_str().unwrap_or("").to_string();
    for note in notes {
        description.push_str("\n\n");
        description.push_str(&note);
    }
    rows.push(format!(
        "| `{path}` | {} | {} | {} | {} |\n",
        type_of(schema),
        if required { "yes" } else { "" },
        schema
            .get("default")
            .map(|d| format!("`{}`", plain(d)))
            .unwrap_or_default(),
        cell(&description),
    ));
    let required: Vec<String> = strings(&schema["required"]);
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let child = format!("{path}.{name}");
            field_rows(&child, property, required.contains(name), rows);
        }
    }
    if schema["type"] == "array" && has_fields(&schema["items"]) {
        field_rows(&format!("{path}[]"), &schema["items"], false, rows);
    }
    if has_fields(&schema["additionalProperties"]) {
        field_rows(
            &format!("{path}.*"),
            &schema["additionalProperties"],
            false,
            rows,
        );
    }
}

/// Whether a schema has fields of its own to list (an object with properties).
fn has_fields(schema: &Value) -> bool {
    schema["properties"]
        .as_object()
        .is_some_and(|p| !p.is_empty())
}

/// A field's type in words: `string`, `integer (int32)`, `array of object`, `map of quantity`.
fn type_of(schema: &Value) -> String {
    if schema["x-kubernetes-int-or-string"] == true {
        return "quantity (integer or string)".to_string();
    }
    if schema["x-kubernetes-preserve-unknown-fields"] == true && schema["properties"].is_null() {
        return "any JSON".to_string();
    }
    let base = match schema["type"].as_str() {
        Some("array") => format!("array of {}", type_of(&schema["items"])),
        Some("object") if schema["additionalProperties"].is_object() => {
            format!("map of {}", type_of(&schema["additionalProperties"]))
        }
        Some(t) => match schema["format"].as_str() {
            Some(format) => format!("{t} ({format})"),
            None => t.to_string(),
        },
        None => "any".to_string(),
    };
    if schema["nullable"] == true {
        format!("{base}, nullable")
    } else {
        base
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// A JSON value as written in a spec: strings bare, the rest as JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_has_a_page_that_lists_its_spec_fields() {
        let pages = pages().expect("pages");
        assert_eq!(pages.len(), crate::api::crds().len());
        let queue = pages
            .iter()
            .find(|(name, _)| name == "crd-capacityqueue.md")
            .map(|(_, body)| body)
            .expect("the CapacityQueue page");
        for field in [
            "`spec.quota`",
            "`spec.cohort`",
            "`status.usage`",
            "`spec.preemption.maxPriority`",
        ] {
            assert!(queue.contains(field), "{field} is missing:\n{queue}");
        }
        assert!(queue.contains("short names `cq`"));
    }

    #[test]
    fn types_read_in_words() {
        let schema = serde_json::json!({"type": "object", "additionalProperties":
            {"x-kubernetes-int-or-string": true}});
        assert_eq!(type_of(&schema), "map of quantity (integer or string)");
        let schema = serde_json::json!({"type": "array", "items": {"type": "integer", "format": "int32"},
            "nullable": true});
        assert_eq!(type_of(&schema), "array of integer (int32), nullable");
    }
}
