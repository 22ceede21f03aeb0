//! The AdmissionReviews the load generator sends: real pod shapes (a Spark executor, a Ray worker)
//! as the API server sends them, with the `managedFields` entry of their creator.

use serde_json::json;

use super::Shape;

/// The AdmissionReview of pod `i` in the chosen shape.
pub(crate) fn review(shape: Shape, i: usize) -> Vec<u8> {
    match shape {
        Shape::Spark => spark_review(i),
        Shape::Ray => ray_review(i),
        Shape::Mixed if i.is_multiple_of(2) => spark_review(i),
        Shape::Mixed => ray_review(i),
    }
}

/// The review of creating `pod`, as the API server sends it: the pod carries the `managedFields`
/// entry of its creator (the API server records field ownership before mutating admission).
fn admission_review(
    i: usize,
    namespace: &str,
    username: &str,
    mut pod: serde_json::Value,
) -> Vec<u8> {
    let fields = fields_v1(&pod);
    let manager = if username.contains("kuberay") {
        "kuberay-operator"
    } else {
        "spark-driver"
    };
    pod["metadata"]["managedFields"] = json!([{
        "manager": manager, "operation": "Update", "apiVersion": "v1",
        "time": "2026-11-24T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields,
    }]);
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": username, "uid": "3c7d9a52-1f0e-4b8e-9a6d-5e2f7c1b0a99", "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": pod, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    }))
    .expect("review encodes")
}

/// The FieldsV1 set of every field `value` sets, in the API server's notation: `f:<field>` for
/// object fields, `k:{"name":...}` for list items keyed by name (containers, env, volumes, ...),
/// other lists owned whole.
fn fields_v1(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::{Map, Value};
    match value {
        Value::Object(fields) => {
            let mut set = Map::new();
            for (key, field) in fields {
                if key == "apiVersion" || key == "kind" {
                    continue;
                }
                set.insert(format!("f:{key}"), fields_v1(field));
            }
            Value::Object(set)
        }
        Value::Array(items) if items.iter().all(|item| item.get("name").is_some()) => {
            let mut set = Map::new();
            for item in items {
                let mut entry = match fields_v1(item) {
                    Value::Object(entry) => entry,
                    _ => Map::new(),
                };
                entry.insert(".".into(), json!({}));
                let key = json!({ "name": item["name"] });
                set.insert(format!("k:{key}"), Value::Object(entry));
            }
            Value::Object(set)
        }
        _ => json!({}),
    }
}

/// A Ray worker pod as KubeRay creates it for a RayCluster labelled with queue "research" (~7 KB).
fn ray_review(i: usize) -> Vec<u8> {
    let env: Vec<serde_json::Value> = [
        ("RAY_CLUSTER_NAME", "raycluster-etl".to_string()),
        ("RAY_CLOUD_INSTANCE_ID", format!("raycluster-etl-cpu-workers-worker-{i:05}")),
        ("RAY_NODE_TYPE_NAME", "cpu-workers".to_string()),
        ("KUBERAY_GEN_RAY_START_CMD", "ray start  --address=raycluster-etl-head-svc.research.svc.cluster.local:6379  --block  --dashboard-agent-listen-port=52365  --memory=8589934592  --metrics-export-port=8080  --num-cpus=2 ".to_string()),
        ("RAY_PORT", "6379".to_string()),
        ("RAY_ADDRESS", "raycluster-etl-head-svc.research.svc.cluster.local:6379".to_string()),
        ("RAY_USAGE_STATS_KUBERAY_IN_USE", "1".to_string()),
        ("RAY_USAGE_STATS_EXTRA_TAGS", "kuberay_version=v1.6.2;kuberay_crd=RayCluster".to_string()),
        ("REDIS_PASSWORD", String::new()),
        ("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| json!({"name": k, "value": v}))
    .chain([
        json!({"name": "FQ_RAY_IP", "value": "raycluster-etl-head-svc.research.svc.cluster.local"}),
        json!({"name": "RAY_IP", "value": "raycluster-etl-head-svc"}),
        json!({"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}),
        json!({"name": "RAY_NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
    ])
    .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "raycluster-etl-cpu-workers-worker-", "namespace": "research",
            "labels": {"app.kubernetes.io/created-by": "kuberay-operator", "app.kubernetes.io/name": "kuberay",
                       "ray.io/cluster": "raycluster-etl", "ray.io/group": "cpu-workers", "ray.io/identifier": "raycluster-etl-worker",
                       "ray.io/is-ray-node": "yes", "ray.io/node-type": "worker", "sluice.dev/queue": "research"},
            "annotations": {"ray.io/ft-enabled": "false", "ray.io/overwrite-container-cmd": "false"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "raycluster-etl", "uid": "5e1c2b7a-0d4f-4c59-9a1e-7f3e2d1c0b9a", "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "restartPolicy": "Always",
            "initContainers": [{
                "name": "wait-gcs-ready", "image": "rayproject/ray:2.41.0",
                "command": ["/bin/bash", "-lc", "--"],
                "args": ["SECONDS=0; while true; do if (( SECONDS <= 120 )); then if ray health-check --address raycluster-etl-head-svc.research.svc.cluster.local:6379 > /dev/null 2>&1; then echo \"GCS is ready.\"; break; fi; echo \"$SECONDS seconds elapsed: Waiting for GCS to be ready.\"; else if ray health-check --address raycluster-etl-head-svc.research.svc.cluster.local:6379; then echo \"GCS is ready. Any error messages above can be safely ignored.\"; break; fi; echo \"$SECONDS seconds elapsed: Still waiting for GCS to be ready.\"; fi; sleep 5; done"],
                "env": [{"name": "FQ_RAY_IP", "value": "raycluster-etl-head-svc.research.svc.cluster.local"}, {"name": "RAY_IP", "value": "raycluster-etl-head-svc"}],
                "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}},
            }],
            "containers": [{
                "name": "ray-worker", "image": "rayproject/ray:2.41.0",
                "command": ["/bin/bash", "-lc", "--"],
                "args": ["ulimit -n 65536; ray start  --address=raycluster-etl-head-svc.research.svc.cluster.local:6379  --block  --dashboard-agent-listen-port=52365  --memory=8589934592  --metrics-export-port=8080  --num-cpus=2 "],
                "env": env,
                "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}},
                "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
                "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
                "livenessProbe": {"exec": {"command": ["bash", "-c", "wget -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success"]}, "initialDelaySeconds": 30, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 120},
                "readinessProbe": {"exec": {"command": ["bash", "-c", "wget -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success"]}, "initialDelaySeconds": 10, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 10},
                "volumeMounts": [{"name": "shared-mem", "mountPath": "/dev/shm"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            }],
            "volumes": [{"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}, {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}, {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
    });
    admission_review(
        i,
        "research",
        "system:serviceaccount:ray-system:kuberay-operator",
        pod,
    )
}

/// A Spark executor pod as the driver creates it, governed by queue "research".
fn spark_review(i: usize) -> Vec<u8> {
    // What Spark 3.5 puts in an executor's environment: its identity, the driver's address and
    // one SPARK_JAVA_OPT_n per spark.* setting passed on.
    let mut env: Vec<serde_json::Value> = [
        ("SPARK_USER", "spark".to_string()),
        (
            "SPARK_DRIVER_URL",
            "spark://CoarseGrainedScheduler@etl-driver-svc.research.svc:7078".to_string(),
        ),
        ("SPARK_EXECUTOR_CORES", "1".to_string()),
        ("SPARK_EXECUTOR_MEMORY", "1g".to_string()),
        ("SPARK_APPLICATION_ID", "spark-0123456789abcdef".to_string()),
        ("SPARK_CONF_DIR", "/opt/spark/conf".to_string()),
        ("SPARK_EXECUTOR_ID", i.to_string()),
        ("SPARK_RESOURCE_PROFILE_ID", "0".to_string()),
        ("SPARK_LOCAL_DIRS", "/var/data/spark-1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| json!({"name": k, "value": v}))
    .collect();
    env.push(json!({"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}));
    env.push(json!({"name": "SPARK_EXECUTOR_POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}));
    for (k, opt) in [
        "-Dspark.driver.port=7078",
        "-Dspark.driver.blockManager.port=7079",
        "-Dspark.ui.port=4040",
        "-Dspark.network.timeout=300s",
        "-Dspark.executor.heartbeatInterval=20s",
        "-Dspark.shuffle.service.enabled=false",
        "-Dspark.dynamicAllocation.enabled=true",
        "-Dspark.dynamicAllocation.shuffleTracking.enabled=true",
        "-Dspark.dynamicAllocation.maxExecutors=200",
        "-Dspark.kubernetes.executor.podNamePrefix=etl-exec",
        "-Dspark.sql.adaptive.enabled=true",
        "-Dspark.sql.shuffle.partitions=400",
        "-Dspark.serializer=org.apache.spark.serializer.KryoSerializer",
        "-Dspark.hadoop.fs.s3a.impl=org.apache.hadoop.fs.s3a.S3AFileSystem",
        "-Dspark.hadoop.fs.s3a.aws.credentials.provider=com.amazonaws.auth.WebIdentityTokenCredentialsProvider",
        "-Dspark.eventLog.enabled=true",
        "-Dspark.eventLog.dir=s3a://analytics-spark-events/research/",
        "-Djava.net.preferIPv6Addresses=false",
        "-XX:+IgnoreUnrecognizedVMOptions",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    ]
    .iter()
    .enumerate()
    {
        env.push(json!({"name": format!("SPARK_JAVA_OPT_{k}"), "value": opt}));
    }
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "etl-exec-", "namespace": "research",
            "labels": {"spark-app-selector": "spark-0123456789abcdef", "spark-role": "executor", "spark-exec-id": i.to_string(), "sluice.dev/queue": "research"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "etl-driver", "uid": "9b0f4c1e-8a43-4a4e-9d1e-2f3b9a7c1d11", "controller": true}],
        },
        "spec": {
            "restartPolicy": "Never", "hostname": format!("etl-exec-{i}"),
            "containers": [{
                "name": "spark-kubernetes-executor", "image": "apache/spark:3.5.3",
                "args": ["executor"], "env": env,
                "resources": {"requests": {"cpu": "1", "memory": "1408Mi"}, "limits": {"memory": "1408Mi"}},
                "ports": [{"containerPort": 7079, "name": "blockmanager"}],
                "volumeMounts": [{"name": "spark-local-dir-1", "mountPath": "/var/data/spark-1"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            }],
            "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}, {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
    });
    admission_review(i, "research", "system:serviceaccount:research:spark", pod)
}
