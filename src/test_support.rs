//! Helpers shared by unit tests that need an API client or a leadership term.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::time::Instant;

use crate::leader::Term;

/// A client of an API server that accepts connections and never answers: every call hangs until
/// the caller's own timeout. The task holds the connections; abort it when done.
pub async fn silent_api_client() -> (Client, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"))
        .parse()
        .expect("url");
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let client = Client::try_from(kube::Config::new(url)).expect("client");
    (client, server)
}

/// A leadership term valid for an hour, whose end stops nothing.
pub fn long_term() -> Arc<Term> {
    Term::new(
        Instant::now() + Duration::from_secs(3600),
        tokio_util::sync::CancellationToken::new(),
        Arc::new(|| {}),
    )
}
