#!/bin/bash
# The Spark executor image's entrypoint: what Spark's kubernetes/dockerfiles/spark/entrypoint.sh does
# for `executor` (the only role this image plays: the driver runs on the host in client mode). Spark's
# executor pod spec passes everything in the environment: SPARK_DRIVER_URL, SPARK_EXECUTOR_ID,
# SPARK_EXECUTOR_CORES, SPARK_EXECUTOR_MEMORY, SPARK_APPLICATION_ID, SPARK_EXECUTOR_POD_IP,
# SPARK_RESOURCE_PROFILE_ID, SPARK_EXECUTOR_POD_NAME and the JVM options as SPARK_JAVA_OPT_<n>.
set -euo pipefail

case ${1:-} in
  executor)
    shift
    # The JVM options in their order (SPARK_JAVA_OPT_0, _1, ...: sorted by number).
    opts=()
    while IFS= read -r line; do opts+=("${line#*=}"); done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
    exec "$JAVA_HOME/bin/java" "${opts[@]}" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "$SPARK_EXECUTOR_POD_NAME" "$@"
    ;;
  *)
    # Anything else runs as given (a shell, java -version, ...).
    exec "$@"
    ;;
esac
