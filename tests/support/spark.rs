//! Spark's own spark-submit on the host, for the Spark tests (e2e_spark on kwok, real_node/spark.rs
//! on the real node): the pyspark installation hack/cluster.sh made, and a client-mode submission
//! in a process group of its own, killed with its JVMs when the test lets go of it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The pyspark package (its `bin/spark-submit`) of the installation hack/cluster.sh made in the
/// cache (`$SLUICE_CACHE`, else ~/.cache/sluice) in a virtualenv whose name starts with `venv`
/// (`pyspark-`, or one version's), or `$SPARK_HOME`; fails saying `how_to_get` it.
pub fn spark_home(venv: &str, how_to_get: &str) -> PathBuf {
    if let Some(home) = std::env::var_os("SPARK_HOME") {
        return PathBuf::from(home);
    }
    let cache = std::env::var_os("SLUICE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/sluice")
        });
    let venvs = std::fs::read_dir(&cache).into_iter().flatten();
    let pyspark = venvs
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(venv))
        })
        .flat_map(|venv| std::fs::read_dir(venv.join("lib")).into_iter().flatten())
        .filter_map(Result::ok)
        .map(|python| python.path().join("site-packages/pyspark"))
        .find(|p| p.join("bin/spark-submit").exists());
    pyspark.unwrap_or_else(|| panic!("no pyspark under {}: {how_to_get}", cache.display()))
}

/// A spark-submit in its own process group, killed (group and all) when dropped.
pub struct SparkSubmit(Child);

impl Drop for SparkSubmit {
    fn drop(&mut self) {
        let pgid = self.0.id() as i32;
        // SIGKILL: the JVM runs shutdown hooks on TERM that can wait on the API server; the
        // namespace deletion removes the executors anyway.
        // `--` is vital: procps' kill reads "-KILL -<pgid>" as kill(-1), every process there is.
        if pgid > 1 {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{pgid}")])
                .status();
        }
        let _ = self.0.wait();
    }
}

/// What one client-mode spark-submit runs: the application `name` against the API server at
/// `server`, the Python `job` with `args`, each of `confs` as a `--conf`; the driver's address is
/// `local_ip`; all it prints goes to `log`.
pub struct Submission<'a> {
    pub server: &'a str,
    pub name: &'a str,
    pub confs: &'a [String],
    pub job: &'a Path,
    pub args: &'a [String],
    pub local_ip: &'a str,
    pub log: &'a Path,
}

impl Submission<'_> {
    /// Starts spark-submit from the pyspark package `home` with its virtualenv's Python.
    pub fn start(&self, home: &Path) -> SparkSubmit {
        let python = home
            .ancestors()
            .nth(4)
            .map(|venv| venv.join("bin/python"))
            .expect("venv python");
        let log = std::fs::File::create(self.log).expect("log");
        let mut command = Command::new(home.join("bin/spark-submit"));
        command.args(["--master", &format!("k8s://{}", self.server)]);
        command.args(["--deploy-mode", "client", "--name", self.name]);
        for conf in self.confs {
            command.args(["--conf", conf]);
        }
        let child = command
            .arg(self.job)
            .args(self.args)
            .env("SPARK_HOME", home)
            .env("PYSPARK_PYTHON", &python)
            .env("SPARK_LOCAL_IP", self.local_ip)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("spark-submit");
        SparkSubmit(child)
    }
}

/// A client-mode spark-submit in `env`'s namespace: a job of 20 one-core tasks with dynamic
/// allocation (1 executor at first, up to `max_executors` of 1 cpu and 512m), with `extra` confs
/// (the executors' queue label, annotations, a pod template); the driver runs on the host. Needs the `spark`
/// ServiceAccount (`TestEnv::create_service_account`) and hack/cluster.sh's pyspark.
pub async fn submit_dynamic_spark(
    env: &super::TestEnv,
    name: &str,
    max_executors: u32,
    extra: &[String],
) -> SparkSubmit {
    let home = spark_home(
        "pyspark-",
        "run the tests with hack/test.sh (it starts the cluster with --with-spark-operator)",
    );
    let job = std::env::temp_dir().join(format!("{}-{name}.py", env.namespace));
    std::fs::write(&job, "from pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\nprint(spark.sparkContext.parallelize(range(100), 20).count())\n").expect("job");
    let config = kube::Config::infer().await.expect("config");
    let server = config.cluster_url.to_string();
    let log = std::env::temp_dir().join(format!("{}-{name}-spark.log", env.namespace));
    eprintln!("spark-submit log: {}", log.display());
    let mut confs: Vec<String> = vec![
        format!("spark.kubernetes.namespace={}", env.namespace),
        "spark.kubernetes.container.image=apache/spark:4.0.0".into(),
        "spark.kubernetes.authenticate.driver.serviceAccountName=spark".into(),
        "spark.dynamicAllocation.enabled=true".into(),
        "spark.dynamicAllocation.shuffleTracking.enabled=true".into(),
        "spark.dynamicAllocation.minExecutors=1".into(),
        "spark.dynamicAllocation.initialExecutors=1".into(),
        format!("spark.dynamicAllocation.maxExecutors={max_executors}"),
        "spark.executor.cores=1".into(),
        "spark.executor.memory=512m".into(),
        "spark.driver.host=127.0.0.1".into(),
    ];
    confs.extend_from_slice(extra);
    Submission {
        server: server.trim_end_matches('/'),
        name,
        confs: &confs,
        job: &job,
        args: &[],
        local_ip: "127.0.0.1",
        log: &log,
    }
    .start(&home)
}
