//! The dashboard's HTTP server: the embedded page, the login, the JSON views and the live stream.
//!
//! Safety of the page: every value is put into the DOM as text by the page's script (never as
//! HTML), a Content-Security-Policy allows only the page's own script and style, the session
//! cookie is HttpOnly and SameSite=Strict, and the login takes JSON only (a cross-site form cannot
//! send it) from the page's own origin. Everything is read-only.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::Stream;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::dashboard::Dashboard;
use crate::dashboard::access::{COOKIE, Refused, SESSION_LIFE, Viewer};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Live updates to one page are at least this far apart (changes in between are coalesced); a
/// change after a quiet spell goes out at once.
const MIN_UPDATE_SPACING: Duration = Duration::from_millis(150);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes.
pub fn router(dashboard: Arc<Dashboard>) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route("/api/login", post(login))
        .route("/api/logout", post(logout))
        .route("/api/me", get(me))
        .route("/api/state", get(state))
        .route("/api/history", get(history))
        .route("/api/workload/{namespace}/{name}", get(workload))
        .route("/api/stream", get(stream))
        .with_state(dashboard)
        .layer(axum::middleware::map_response(secure_headers))
}

pub async fn serve(
    addr: SocketAddr,
    dashboard: Arc<Dashboard>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, "dashboard serving");
    axum::serve(listener, router(dashboard))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn refused(e: Refused) -> Response {
    let code = match e {
        Refused::Api(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::UNAUTHORIZED,
    };
    (code, Json(serde_json::json!({ "error": e.to_string() }))).into_response()
}

fn cookie_session(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// The viewer of a request: its session cookie, else its bearer token (scripts, benchmarks).
async fn viewer(d: &Dashboard, headers: &HeaderMap) -> Result<Viewer, Refused> {
    if let Some(id) = cookie_session(headers) {
        return d.access.session(&id, d.namespace_names()).await;
    }
    match bearer(headers) {
        Some(token) => d.access.review(&token, d.namespace_names()).await,
        None => Err(Refused::NoCredentials),
    }
}

#[derive(Deserialize)]
struct Login {
    token: String,
}

/// A request from another origin (the browser says which in `Origin`) is refused.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let bare = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    host.is_some() && bare == host
}

async fn login(
    State(d): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Json(body): Json<Login>,
) -> Response {
    if !same_origin(&headers) {
        return (StatusCode::FORBIDDEN, "cross-origin login refused").into_response();
    }
    match d.access.login(body.token.trim(), d.namespace_names()).await {
        Ok((id, viewer)) => {
            let cookie = format!(
                "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
                SESSION_LIFE.as_secs()
            );
            let mut response = Json(viewer_json(&viewer)).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(e) => refused(e),
    }
}

async fn logout(State(d): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie_session(&headers) {
        d.access.logout(&id);
    }
    let clear = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn viewer_json(v: &Viewer) -> serde_json::Value {
    serde_json::json!({ "user": v.user, "scope": v.scope })
}

async fn me(State(d): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    match viewer(&d, &headers).await {
        Ok(v) => Json(viewer_json(&v)).into_response(),
        Err(e) => refused(e),
    }
}

fn json_body(json: Arc<String>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        json.as_ref().clone(),
    )
        .into_response()
}

async fn state(State(d): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    match viewer(&d, &headers).await {
        Ok(v) => json_body(d.state_json(&v.scope).await),
        Err(e) => refused(e),
    }
}

async fn history(State(d): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    match viewer(&d, &headers).await {
        Ok(v) => Json(d.history(&v.scope)).into_response(),
        Err(e) => refused(e),
    }
}

async fn workload(
    State(d): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let v = match viewer(&d, &headers).await {
        Ok(v) => v,
        Err(e) => return refused(e),
    };
    match d.workload(&v.scope, &namespace, &name).await {
        Some(detail) => Json(detail).into_response(),
        // The same answer whether it does not exist or is not the viewer's to see.
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error": "no such workload in your namespaces" })),
        )
            .into_response(),
    }
}

/// The live stream: the state at once, then again after every change (coalesced), until the
/// session ends or its rights are withdrawn.
async fn stream(State(d): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    let first = match viewer(&d, &headers).await {
        Ok(v) => v,
        Err(e) => return refused(e),
    };
    Sse::new(updates(d, headers, first))
        .keep_alive(KeepAlive::default())
        .into_response()
}

struct Live {
    d: Arc<Dashboard>,
    headers: HeaderMap,
    rx: tokio::sync::watch::Receiver<u64>,
    viewer: Option<Viewer>,
    last: Option<Arc<String>>,
    /// When the last update went out.
    sent: Option<tokio::time::Instant>,
}

fn updates(
    d: Arc<Dashboard>,
    headers: HeaderMap,
    first: Viewer,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let rx = d.version.subscribe();
    let live = Live {
        d,
        headers,
        rx,
        viewer: Some(first),
        last: None,
        sent: None,
    };
    futures::stream::unfold(live, |mut live| async move {
        loop {
            let viewer = match live.viewer.take() {
                Some(v) => v,
                None => {
                    if live.rx.changed().await.is_err() {
                        return None;
                    }
                    if let Some(sent) = live.sent {
                        tokio::time::sleep_until(sent + MIN_UPDATE_SPACING).await;
                    }
                    match viewer(&live.d, &live.headers).await {
                        Ok(v) => v,
                        Err(e) => {
                            let bye = Event::default().event("logout").data(e.to_string());
                            return Some((Ok(bye), end(live)));
                        }
                    }
                }
            };
            live.rx.mark_unchanged();
            let json = live.d.state_json(&viewer.scope).await;
            if live.last.as_ref() == Some(&json) {
                continue;
            }
            live.last = Some(json.clone());
            live.sent = Some(tokio::time::Instant::now());
            return Some((
                Ok(Event::default().event("state").data(json.as_str())),
                live,
            ));
        }
    })
}

/// A stream state whose next wait ends at once: the sender it waits on is gone.
fn end(mut live: Live) -> Live {
    let (tx, rx) = tokio::sync::watch::channel(0);
    drop(tx);
    live.rx = rx;
    live.viewer = None;
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[test]
    fn a_login_from_another_origin_is_refused() {
        let same = headers(&[("host", "dash:8080"), ("origin", "http://dash:8080")]);
        assert!(same_origin(&same));
        let other = headers(&[("host", "dash:8080"), ("origin", "https://evil.example")]);
        assert!(!same_origin(&other));
        // No Origin: not a browser's cross-site request (curl, scripts).
        assert!(same_origin(&headers(&[("host", "dash:8080")])));
        assert!(!same_origin(&headers(&[("origin", "http://dash:8080")])));
    }

    #[test]
    fn the_session_cookie_and_bearer_token_are_read_exactly() {
        let h = headers(&[("cookie", "a=1; sluice_dashboard=abc; b=2")]);
        assert_eq!(cookie_session(&h).as_deref(), Some("abc"));
        let h = headers(&[("cookie", "xsluice_dashboard=abc")]);
        assert_eq!(cookie_session(&h), None);
        let h = headers(&[("authorization", "Bearer t0k")]);
        assert_eq!(bearer(&h).as_deref(), Some("t0k"));
        assert_eq!(bearer(&headers(&[("authorization", "Bearer ")])), None);
        assert_eq!(bearer(&headers(&[("authorization", "Basic eA==")])), None);
    }
}
