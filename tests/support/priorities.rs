//! PriorityClasses for the end-to-end tests: cluster-scoped, so created per test under the test's
//! namespace as a prefix, and deleted when the test ends (even failing).

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::TestEnv;

/// The PriorityClasses one test created, deleted on drop.
pub struct Priorities {
    prefix: String,
    names: Vec<String>,
}

impl Priorities {
    /// Creates one PriorityClass `<namespace>-<short>` per `(short, value)`.
    pub async fn create(env: &TestEnv, classes: &[(&str, i32)]) -> Priorities {
        let api: Api<PriorityClass> = Api::all(env.client.clone());
        let mut created = Priorities {
            prefix: env.namespace.clone(),
            names: Vec::new(),
        };
        for (short, value) in classes {
            let name = created.name(short);
            let class: PriorityClass = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"sluice-e2e": "true"}},
                "value": value,
                "description": "sluice e2e",
            }))
            .expect("priority class");
            api.create(&PostParams::default(), &class)
                .await
                .unwrap_or_else(|e| panic!("create PriorityClass {name}: {e}"));
            created.names.push(name);
        }
        created
    }

    pub fn name(&self, short: &str) -> String {
        format!("{}-{short}", self.prefix)
    }
}

impl Drop for Priorities {
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.names);
        // The test's runtime may be going down (a failed assertion unwinds through here): delete
        // from a thread with a runtime and a client of its own.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(client) = Client::try_default().await else {
                    return;
                };
                let api: Api<PriorityClass> = Api::all(client);
                for name in names {
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
            });
        })
        .join();
    }
}
