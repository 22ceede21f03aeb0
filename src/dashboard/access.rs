//! Who looks, and what they may see: the bearer token checked by a TokenReview, the rights by
//! SubjectAccessReviews (list dynamicworkloads cluster-wide: everything; else the namespaces where
//! they may list dynamicworkloads). Sessions are random ids in an HttpOnly, SameSite=Strict cookie;
//! the token stays on the server, and the rights are checked again every [`RECHECK`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::dashboard::model::Scope;

/// How long the rights found for a token are used before they are checked again.
pub const RECHECK: Duration = Duration::from_secs(30);
/// A session's life.
pub const SESSION_LIFE: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most (the oldest go first).
const MAX_SESSIONS: usize = 10_000;
/// SubjectAccessReviews in flight at once for one viewer.
const SAR_CONCURRENCY: usize = 8;
/// The name of the session cookie.
pub const COOKIE: &str = "sluice_dashboard";

/// A viewer: who, and what they may see.
#[derive(Clone, Debug, PartialEq)]
pub struct Viewer {
    pub user: String,
    pub scope: Scope,
}

struct Session {
    token: String,
    viewer: Viewer,
    checked: Instant,
    created: Instant,
}

/// The sessions and the clients to check tokens with.
pub struct Access {
    client: Client,
    sessions: Mutex<HashMap<String, Session>>,
}

/// Why a request is refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("not logged in: send a bearer token (kubectl create token ...)")]
    NoCredentials,
    #[error("the token was not accepted by the API server")]
    BadToken,
    #[error("the rights could not be checked: {0}")]
    Api(String),
}

impl Access {
    pub fn new(client: Client) -> Access {
        Access {
            client,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Checks `token` and opens a session; returns its id and the viewer.
    pub async fn login(
        &self,
        token: &str,
        namespaces: Vec<String>,
    ) -> Result<(String, Viewer), Refused> {
        let viewer = self.review(token, namespaces).await?;
        let id = random_id()?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| s.created.elapsed() < SESSION_LIFE);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        let now = Instant::now();
        sessions.insert(
            id.clone(),
            Session {
                token: token.to_string(),
                viewer: viewer.clone(),
                checked: now,
                created: now,
            },
        );
        Ok((id, viewer))
    }

    pub fn logout(&self, id: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(id);
    }

    /// The viewer of session `id`, its rights checked again when [`RECHECK`] has passed.
    pub async fn session(&self, id: &str, namespaces: Vec<String>) -> Result<Viewer, Refused> {
        let token = {
            let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let Some(s) = sessions.get(id) else {
                return Err(Refused::NoCredentials);
            };
            if s.created.elapsed() >= SESSION_LIFE {
                return Err(Refused::NoCredentials);
            }
            if s.checked.elapsed() < RECHECK {
                return Ok(s.viewer.clone());
            }
            s.token.clone()
        };
        let checked = self.review(&token, namespaces).await;
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        match checked {
            Ok(viewer) => {
                if let Some(s) = sessions.get_mut(id) {
                    s.viewer = viewer.clone();
                    s.checked = Instant::now();
                }
                Ok(viewer)
            }
            Err(e) => {
                if matches!(e, Refused::BadToken) {
                    sessions.remove(id);
                }
                Err(e)
            }
        }
    }

    /// TokenReview, then the rights over `namespaces` (the namespaces the cluster has).
    pub async fn review(&self, token: &str, namespaces: Vec<String>) -> Result<Viewer, Refused> {
        let user = self.authenticate(token).await?;
        let name = user.username.clone().unwrap_or_default();
        if self.may_list(&user, None).await? {
            return Ok(Viewer {
                user: name,
                scope: Scope::All,
            });
        }
        let allowed: BTreeSet<String> = stream::iter(namespaces)
            .map(|ns| {
                let user = &user;
                async move { (self.may_list(user, Some(&ns)).await, ns) }
            })
            .buffer_unordered(SAR_CONCURRENCY)
            .filter_map(|(allowed, ns)| async move { matches!(allowed, Ok(true)).then_some(ns) })
            .collect()
            .await;
        Ok(Viewer {
            user: name,
            scope: Scope::Namespaces(allowed),
        })
    }

    async fn authenticate(&self, token: &str) -> Result<UserInfo, Refused> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Refused::Api(e.to_string()))?;
        let status = answer.status.unwrap_or_default();
        match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Ok(user),
            _ => Err(Refused::BadToken),
        }
    }

    /// Whether `user` may list dynamicworkloads in `namespace` (None: in every namespace).
    async fn may_list(&self, user: &UserInfo, namespace: Option<&str>) -> Result<bool, Refused> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(crate::api::GROUP.to_string()),
                    resource: Some("dynamicworkloads".into()),
                    verb: Some("list".into()),
                    namespace: namespace.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Refused::Api(e.to_string()))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// 32 random bytes, hex: a session id nobody can guess.
fn random_id() -> Result<String, Refused> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Refused::Api("no random session id could be made".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
