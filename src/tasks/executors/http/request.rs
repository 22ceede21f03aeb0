//! The HAR request made concrete (pure): `${...}` substituted, the query string appended, the body
//! built from `postData`; and the Task's outcome judged from the response.

use serde_json::Value;

use crate::api::{HarNameValue, HarParam, HarRequest, HttpExecutor};
use crate::tasks::executors::{ExecError, Outcome, parse_result};
use crate::tasks::jsonpath::{self, Condition};
use crate::tasks::substitute::{Variables, substitute};

/// The HTTP version asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    Http2,
}

/// The request after substitution.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: String,
    /// With the query string appended.
    pub url: String,
    pub version: Version,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

impl Request {
    pub fn is_https(&self) -> bool {
        self.url.starts_with("https://")
    }
}

const METHODS: &[&str] = &[
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE",
];

fn invalid(message: String) -> ExecError {
    ExecError::Invalid(message)
}

fn version(text: Option<&str>) -> Result<Version, ExecError> {
    match text.map(|t| t.trim().to_ascii_uppercase()).as_deref() {
        None | Some("") | Some("HTTP/1.1") => Ok(Version::Http11),
        Some("HTTP/1.0") => Ok(Version::Http10),
        Some("HTTP/2") | Some("HTTP/2.0") | Some("H2") => Ok(Version::Http2),
        Some(other) => Err(invalid(format!(
            "http.request.httpVersion {other:?}: use HTTP/1.1, HTTP/1.0 or HTTP/2"
        ))),
    }
}

/// `url` with `pairs` appended to its query, each part form-encoded. Pure.
fn with_query(url: &str, pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return url.to_string();
    }
    let (base, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (url, None),
    };
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        query.append_pair(k, v);
    }
    let joiner = if !base.contains('?') {
        "?"
    } else if base.ends_with('?') || base.ends_with('&') {
        ""
    } else {
        "&"
    };
    let mut out = format!("{base}{joiner}{}", query.finish());
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// A multipart/form-data body with `boundary`. Pure.
fn multipart(params: &[(HarParam, String)], boundary: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (param, value) in params {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let name = param.name.replace('"', "%22");
        match &param.file_name {
            Some(file) => {
                let file = file.replace('"', "%22");
                let content_type = param
                    .content_type
                    .as_deref()
                    .unwrap_or("application/octet-stream");
                body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\nContent-Type: {content_type}\r\n\r\n").as_bytes(),
                );
            }
            None => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        body.extend_from_slice(value.as_bytes());
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

/// The names and values of a HAR list (`headers`, `queryString`, `cookies`), the values
/// substituted; an error names the field as `http.request.<list>.<name>`.
fn substituted(
    pairs: &[HarNameValue],
    vars: &Variables,
    list: &str,
) -> Result<Vec<(String, String)>, ExecError> {
    (pairs.iter())
        .map(|p| {
            let field = format!("http.request.{list}.{}", p.name);
            Ok((p.name.clone(), substitute(&p.value, vars, &field)?))
        })
        .collect()
}

/// The body and its Content-Type from `postData`.
fn post_body(
    request: &HarRequest,
    vars: &Variables,
    boundary: &str,
) -> Result<Option<(Vec<u8>, String)>, ExecError> {
    let Some(post) = &request.post_data else {
        return Ok(None);
    };
    let mime = post.mime_type.trim().to_string();
    if let Some(text) = &post.text {
        if !post.params.is_empty() {
            return Err(invalid(
                "http.request.postData has text or params, not both".into(),
            ));
        }
        let text = substitute(text, vars, "http.request.postData.text")?;
        return Ok(Some((text.into_bytes(), mime)));
    }
    let params = post
        .params
        .iter()
        .map(|p| {
            let field = format!("http.request.postData.params.{}", p.name);
            let value = substitute(p.value.as_deref().unwrap_or(""), vars, &field)?;
            Ok((p.clone(), value))
        })
        .collect::<Result<Vec<_>, ExecError>>()?;
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "multipart/form-data" => {
            let content_type = format!("multipart/form-data; boundary={boundary}");
            Ok(Some((multipart(&params, boundary), content_type)))
        }
        "application/x-www-form-urlencoded" | "" => {
            let mut form = form_urlencoded::Serializer::new(String::new());
            for (p, v) in &params {
                form.append_pair(&p.name, v);
            }
            let mime = if mime.is_empty() {
                "application/x-www-form-urlencoded".to_string()
            } else {
                mime
            };
            Ok(Some((form.finish().into_bytes(), mime)))
        }
        other => Err(invalid(format!(
            "http.request.postData.params need mimeType application/x-www-form-urlencoded or multipart/form-data, not {other:?} (use text for other bodies)"
        ))),
    }
}

/// The request a Task's `http` executor makes, substituted. `boundary` separates multipart parts
/// (the Task's uid: fixed, so a restarted controller builds the same request). Pure.
pub fn build_request(
    spec: &HttpExecutor,
    vars: &Variables,
    boundary: &str,
) -> Result<Request, ExecError> {
    let har = &spec.request;
    let method = har.method.trim().to_ascii_uppercase();
    if !METHODS.contains(&method.as_str()) {
        return Err(invalid(format!(
            "http.request.method {:?}: use one of {}",
            har.method,
            METHODS.join(", ")
        )));
    }
    let url = substitute(&har.url, vars, "http.request.url")?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(invalid(format!(
            "http.request.url {url:?}: an absolute http:// or https:// URL is needed"
        )));
    }
    let query = substituted(&har.query_string, vars, "queryString")?;
    let url = with_query(&url, &query);
    let mut headers = substituted(&har.headers, vars, "headers")?;
    if !har.cookies.is_empty() {
        let cookies: Vec<String> = (substituted(&har.cookies, vars, "cookies")?.into_iter())
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        headers.push(("Cookie".into(), cookies.join("; ")));
    }
    let body = match post_body(har, vars, boundary)? {
        Some((body, content_type)) => {
            let has_type = headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
            if !has_type && !content_type.is_empty() {
                headers.push(("Content-Type".into(), content_type));
            }
            Some(body)
        }
        None => None,
    };
    Ok(Request {
        method,
        url,
        version: version(har.http_version.as_deref())?,
        headers,
        body,
    })
}

/// The most of a body kept as the Task's result (it lands in the Task's status, an etcd object).
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// The body as a result: JSON when it is JSON (and fits), else its text, cut at
/// [`MAX_RESULT_BYTES`]; and whether it was cut. Pure.
fn capped_result(body: &[u8]) -> (Option<Value>, bool) {
    if body.len() <= MAX_RESULT_BYTES {
        return (parse_result(&String::from_utf8_lossy(body)), false);
    }
    let text = String::from_utf8_lossy(&body[..MAX_RESULT_BYTES]);
    // A cut may split a UTF-8 character: the lossy decoding ends it with U+FFFD, dropped here.
    let text = text.trim_end_matches('\u{FFFD}').to_string();
    (Some(Value::String(text)), true)
}

/// The Task's outcome from the response. Pure.
pub fn outcome(spec: &HttpExecutor, status: u16, body: &[u8]) -> Outcome {
    let status_ok = if spec.success_codes.is_empty() {
        (200..300).contains(&status)
    } else {
        spec.success_codes.contains(&status)
    };
    let (whole, cut) = capped_result(body);
    let suffix = if cut {
        format!(" (result: the first {MAX_RESULT_BYTES} bytes of the body)")
    } else {
        String::new()
    };
    let fail = |message: String, result: Option<Value>| Outcome {
        success: false,
        result,
        message: format!("{message}{suffix}"),
    };
    if !status_ok {
        let why = if spec.success_codes.is_empty() {
            format!("HTTP {status}: not a 2xx status")
        } else {
            format!("HTTP {status}: not one of {:?}", spec.success_codes)
        };
        return fail(why, whole);
    }
    // The conditions read the whole body (at most the read cap), not the capped result.
    let document = || {
        serde_json::from_slice::<Value>(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    if let Some(c) = &spec.success_condition {
        match Condition::parse(c).and_then(|cond| cond.holds(&document())) {
            Ok(true) => {}
            Ok(false) => {
                return fail(
                    format!("HTTP {status}, but successCondition does not hold: {c}"),
                    whole,
                );
            }
            Err(e) => return fail(format!("HTTP {status}, but successCondition: {e}"), whole),
        }
    }
    let result = match &spec.result_json_path {
        Some(path) => match jsonpath::pick(&document(), path) {
            Ok(v) => Some(v),
            Err(e) => {
                return fail(
                    format!("HTTP {status}, but resultJsonPath failed: {e}"),
                    whole,
                );
            }
        },
        None => whole,
    };
    Outcome {
        success: true,
        result,
        message: format!("HTTP {status}{suffix}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HarNameValue, HarPostData};
    use serde_json::json;

    fn nv(name: &str, value: &str) -> HarNameValue {
        HarNameValue {
            name: name.into(),
            value: value.into(),
            comment: None,
        }
    }

    fn spec(request: HarRequest) -> HttpExecutor {
        HttpExecutor {
            request,
            ..Default::default()
        }
    }

    fn vars() -> Variables {
        Variables::new()
            .with("task", json!({"name": "t1", "namespace": "ns"}))
            .with("input", json!({"n": 2, "q": "a b&c"}))
    }

    #[test]
    fn a_har_request_is_substituted_with_its_query_string_and_body() {
        let request = HarRequest {
            method: "post".into(),
            url: "https://svc/${task.namespace}/${task.name}?x=1#frag".into(),
            http_version: Some("HTTP/2".into()),
            headers: vec![nv("X-N", "${input.n}")],
            query_string: vec![nv("q", "${input.q}"), nv("n", "${input.n}")],
            cookies: vec![nv("session", "${task.name}")],
            post_data: Some(HarPostData {
                mime_type: "application/json".into(),
                text: Some(r#"{"n": ${input.n}}"#.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = build_request(&spec(request), &vars(), "b").unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.url, "https://svc/ns/t1?x=1&q=a+b%26c&n=2#frag");
        assert_eq!(r.version, Version::Http2);
        assert!(r.is_https());
        assert_eq!(
            r.headers,
            vec![
                ("X-N".into(), "2".into()),
                ("Cookie".into(), "session=t1".into()),
                ("Content-Type".into(), "application/json".into()),
            ]
        );
        assert_eq!(r.body.as_deref(), Some(&br#"{"n": 2}"#[..]));
    }

    #[test]
    fn form_params_are_encoded_by_their_mime_type() {
        let params = vec![
            HarParam {
                name: "a".into(),
                value: Some("${input.q}".into()),
                ..Default::default()
            },
            HarParam {
                name: "f".into(),
                value: Some("content".into()),
                file_name: Some("x.txt".into()),
                content_type: Some("text/plain".into()),
                ..Default::default()
            },
        ];
        let form = |mime: &str| HarRequest {
            method: "POST".into(),
            url: "http://svc/".into(),
            post_data: Some(HarPostData {
                mime_type: mime.into(),
                params: params.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = build_request(
            &spec(form("application/x-www-form-urlencoded")),
            &vars(),
            "B",
        )
        .unwrap();
        assert_eq!(r.body.as_deref(), Some(&b"a=a+b%26c&f=content"[..]));
        let r = build_request(&spec(form("multipart/form-data")), &vars(), "B").unwrap();
        let body = String::from_utf8(r.body.unwrap()).unwrap();
        assert!(
            body.starts_with("--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\na b&c\r\n"),
            "{body}"
        );
        assert!(
            body.contains(
                "name=\"f\"; filename=\"x.txt\"\r\nContent-Type: text/plain\r\n\r\ncontent\r\n"
            ),
            "{body}"
        );
        assert!(body.ends_with("--B--\r\n"));
        assert!(r.headers.contains(&(
            "Content-Type".into(),
            "multipart/form-data; boundary=B".into()
        )));
        assert!(build_request(&spec(form("application/json")), &vars(), "B").is_err());
    }

    #[test]
    fn abuse_is_refused_with_what_to_do() {
        let bad = |request: HarRequest| {
            build_request(&spec(request), &vars(), "b")
                .expect_err("refused")
                .to_string()
        };
        let url = |u: &str| HarRequest {
            method: "GET".into(),
            url: u.into(),
            ..Default::default()
        };
        assert!(bad(url("ftp://x/")).contains("http:// or https://"));
        assert!(bad(url("/relative")).contains("absolute"));
        assert!(bad(url("http://x/${task.nope}")).contains("${task.nope}"));
        let mut weird = url("http://x/");
        weird.method = "BREW".into();
        assert!(bad(weird).contains("use one of"));
        let mut v3 = url("http://x/");
        v3.http_version = Some("HTTP/3".into());
        assert!(bad(v3).contains("httpVersion"));
        let mut both = url("http://x/");
        both.post_data = Some(HarPostData {
            mime_type: "text/plain".into(),
            text: Some("t".into()),
            params: vec![HarParam::default()],
            ..Default::default()
        });
        assert!(bad(both).contains("not both"));
    }

    #[test]
    fn success_codes_conditions_and_results() {
        let mut spec = spec(HarRequest::default());
        let o = outcome(&spec, 200, br#"{"result": {"jobs": 3}, "ok": true}"#);
        assert!(o.success);
        assert_eq!(o.result, Some(json!({"result": {"jobs": 3}, "ok": true})));
        spec.result_json_path = Some("$.result.jobs".into());
        spec.success_condition = Some("$.ok".into());
        assert_eq!(
            outcome(&spec, 201, br#"{"result": {"jobs": 3}, "ok": true}"#).result,
            Some(json!(3))
        );
        let not_ok = outcome(&spec, 200, br#"{"result": {"jobs": 3}, "ok": false}"#);
        assert!(!not_ok.success);
        assert!(
            not_ok.message.contains("successCondition does not hold"),
            "{}",
            not_ok.message
        );
        spec.success_condition = Some("self.ok == true".into());
        assert!(outcome(&spec, 200, br#"{"result": {"jobs": 3}, "ok": true}"#).success);
        let failed = outcome(&spec, 500, b"boom");
        assert!(!failed.success);
        assert_eq!(failed.message, "HTTP 500: not a 2xx status");
        assert_eq!(failed.result, Some(json!("boom")));
        spec.success_condition = None;
        let missing = outcome(&spec, 200, br#"{"other": 1}"#);
        assert!(!missing.success);
        assert!(
            missing.message.contains("resultJsonPath"),
            "{}",
            missing.message
        );
        spec.success_codes = vec![404];
        spec.result_json_path = None;
        assert!(outcome(&spec, 404, b"").success);
        assert!(!outcome(&spec, 200, b"").success);
    }

    #[test]
    fn a_large_body_is_cut_to_the_result_cap() {
        let spec = spec(HarRequest::default());
        let body = "é".repeat(MAX_RESULT_BYTES);
        let o = outcome(&spec, 200, body.as_bytes());
        assert!(o.success);
        let Some(Value::String(text)) = o.result else {
            panic!("a text result")
        };
        assert!(text.len() <= MAX_RESULT_BYTES && text.len() > MAX_RESULT_BYTES - 4);
        assert!(o.message.contains("first 65536 bytes"), "{}", o.message);
    }
}
