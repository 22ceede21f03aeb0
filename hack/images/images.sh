# shellcheck shell=bash
# Images of real workloads for the real node, built here without Docker or a registry: a Debian root
# file system made by debootstrap (minbase) from Debian's packages, what PyPI serves installed into it,
# written as a docker-archive and imported with `ctr images import` when the real node comes up.
# Sourced by hack/realnode.sh (which cluster.sh sources); it uses cluster.sh's helpers (die, log,
# install_pyspark) and variables (ROOT, CACHE, LOGS, PYSPARK_VENV, ...).
#
#   sluice.local/spark:<pyspark version>  Java 17 (openjdk-17-jre-headless) and the jars of the pinned
#                                          pyspark wheel in /opt/spark/jars: Spark's executors
#                                          (entrypoint: hack/images/spark/entrypoint.sh executor)
#   sluice.local/ray:<ray version>        Python 3.11 (Debian's python3), ray[default] from PyPI and wget
#                                          (KubeRay's probes): head, workers and the autoscaler sidecar
#
# Which images the real node gets: SLUICE_REAL_NODE_IMAGES, a space-separated list of spark and ray
# (default: none, so that a real node for other tests comes up without them). Each image is cached as
# $CACHE/images/<name>-<key>.tar, where <key> hashes every input (these scripts, the Debian suite and
# package list, the pyspark version and its jar names, the ray version): a warm run rebuilds nothing,
# a changed input builds a new archive. `hack/cluster.sh build --real-node` builds them without a
# cluster.

IMAGES_CACHE=$CACHE/images
IMAGES_SRC=$ROOT/hack/images
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
REAL_NODE_IMAGES=${SLUICE_REAL_NODE_IMAGES:-}
SPARK_IMAGE=sluice.local/spark:$PYSPARK_VERSION
RAY_IMAGE=sluice.local/ray:$RAY_VERSION
SPARK_PACKAGES=openjdk-17-jre-headless
RAY_PACKAGES=python3,wget

# A short hash of everything an image is made of: this script and the given inputs.
images_key() { # inputs...
  { cat "$IMAGES_SRC/images.sh"; printf '%s\n' "$DEBIAN_SUITE" "$@"; } | sha256sum | cut -c1-16
}

# A Debian root file system (debootstrap minbase plus `packages`), without apt's lists and caches,
# documentation and locales. Downloaded .debs stay in $CACHE/images/debs for the next build.
debian_rootfs() { # dir packages(comma-separated)
  command -v debootstrap >/dev/null || {
    [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || die "building images needs debootstrap (Debian: apt-get install debootstrap)"
    log "installing debootstrap (apt-get, first time only)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >>"$LOGS/images.log" 2>&1 \
      || fail_with_log images "apt-get install debootstrap failed"
  }
  mkdir -p "$IMAGES_CACHE/debs"
  debootstrap --variant=minbase --include="$2" --cache-dir="$IMAGES_CACHE/debs" "$DEBIAN_SUITE" "$1" "$DEBIAN_MIRROR" \
    >>"$LOGS/images.log" 2>&1 || { images_unmount "$1"; fail_with_log images "debootstrap $DEBIAN_SUITE ($2) from $DEBIAN_MIRROR failed"; }
  images_unmount "$1"
  rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/usr/share/doc/* \
    "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/locale/* "$1"/var/log/*.log
}

images_unmount() { # dir: whatever a failed debootstrap left mounted under it
  local mnt
  while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done < <(awk -v p="$1/" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r)
}

# A docker-archive (manifest.json, config, one layer) of a root file system, with its environment.
images_archive() { # rootfs name:tag out.tar entrypoint-json cmd-json env-json
  local rootfs=$1 ref=$2 out=$3 work diffid cfgsum
  work=$(dirname "$out")/archive.$$
  mkdir -p "$work"
  tar --sort=name --mtime=@0 --numeric-owner --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* \
    -C "$rootfs" -cf "$work/layer.tar" . || die "writing the layer of $ref failed"
  diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","config":{"Env":%s,"Entrypoint":%s,"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}\n' \
    "$6" "$4" "$5" "$diffid" >"$work/config.json"
  cfgsum=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$cfgsum.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]\n' "$cfgsum" "$ref" >"$work/manifest.json"
  tar -C "$work" -cf "$out" manifest.json "$cfgsum.json" layer.tar || die "writing $out failed"
  rm -rf "$work"
}

# Builds one image's archive unless the cache has it; prints its path. One build at a time per cache
# (a lock), the archive moved into place only when complete.
images_build() { # name key build-function
  local name=$1 key=$2 fn=$3 out=$IMAGES_CACHE/$1-$2.tar work t0=$SECONDS
  mkdir -p "$IMAGES_CACHE" "$LOGS"
  exec {lock}>"$IMAGES_CACHE/.lock"
  flock "$lock"
  if [[ ! -f $out ]]; then
    log "building the $name image ($key; first time only, cached in $IMAGES_CACHE; log: $LOGS/images.log)"
    work=$(mktemp -d "$IMAGES_CACHE/build-$name.XXXXXX")
    "$fn" "$work/rootfs" "$work/image.tar"
    mv "$work/image.tar" "$out"
    rm -rf "$work"
    echo "$((SECONDS - t0))" >"$IMAGES_CACHE/$name-$key.seconds"
    log "built the $name image in $((SECONDS - t0))s ($(du -h "$out" | cut -f1))"
    # Older archives of the same image are garbage now.
    find "$IMAGES_CACHE" -maxdepth 1 \( -name "$name-*.tar" -o -name "$name-*.seconds" \) ! -name "$name-$key.*" -delete
  fi
  exec {lock}>&-
  echo "$out"
}

spark_image_rootfs() { # rootfs out.tar
  local jars
  jars=$(echo "$PYSPARK_VENV"/lib/python3*/site-packages/pyspark/jars)
  debian_rootfs "$1" "$SPARK_PACKAGES"
  mkdir -p "$1/opt/spark"
  cp -r "$jars" "$1/opt/spark/jars"
  install -m 0755 "$IMAGES_SRC/spark/entrypoint.sh" "$1/opt/entrypoint.sh"
  images_archive "$1" "$SPARK_IMAGE" "$2" '["/opt/entrypoint.sh"]' null \
    '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64","SPARK_HOME=/opt/spark"]'
}

ray_image_rootfs() { # rootfs out.tar
  debian_rootfs "$1" "$RAY_PACKAGES"
  local site=$1/usr/local/lib/python3.11/dist-packages
  # Installed by this host's Python 3.11 (same ABI as Debian's 3.11) into the image's site-packages;
  # pip's own cache keeps the wheels for the next build.
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --only-binary=:all: \
    --target "$site" "ray[default]==$RAY_VERSION" >>"$LOGS/images.log" 2>&1 \
    || fail_with_log images "pip install ray[default]==$RAY_VERSION (from PyPI) failed"
  rm -rf "$site/bin"
  # The console scripts pip wrote name the host's Python: the image's own, for Debian's python3.
  printf '#!/usr/bin/python3\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n' >"$1/usr/local/bin/ray"
  chmod 0755 "$1/usr/local/bin/ray"
  images_archive "$1" "$RAY_IMAGE" "$2" null '["/bin/bash"]' \
    '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8"]'
}

spark_image() {
  install_pyspark
  local jars
  jars=$(cd "$PYSPARK_VENV"/lib/python3*/site-packages/pyspark/jars && ls)
  images_build spark "$(images_key "$(cat "$IMAGES_SRC/spark/entrypoint.sh")" "$PYSPARK_VERSION" "$SPARK_PACKAGES" "$jars")" spark_image_rootfs
}

ray_image() {
  command -v python3 >/dev/null || die "python3 (3.11) is needed to install ray into the Ray image"
  [[ $(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') == 3.11 ]] \
    || die "the Ray image's site-packages are installed by this host's python3, which must be 3.11 (Debian $DEBIAN_SUITE's)"
  images_build ray "$(images_key "$RAY_VERSION" "$RAY_PACKAGES")" ray_image_rootfs
}

images_check() { # SLUICE_REAL_NODE_IMAGES names only images this file builds
  local name
  for name in $REAL_NODE_IMAGES; do
    [[ $name == spark || $name == ray || $name == sluice-upgrade ]] || die "SLUICE_REAL_NODE_IMAGES: unknown image '$name' (spark, ray, sluice-upgrade)"
  done
}

# Builds (or finds in the cache) every image SLUICE_REAL_NODE_IMAGES names.
real_images_build() {
  images_check
  local name
  for name in $REAL_NODE_IMAGES; do [[ $name == sluice-upgrade ]] || "${name}_image" >/dev/null; done
}

# Imports them into the real node's containerd (import_image skips what it already holds).
real_images_import() {
  images_check
  local name archive
  for name in $REAL_NODE_IMAGES; do
    [[ $name == sluice-upgrade ]] && continue  # built and imported by realnode_images (hack/image.sh)
    archive=$("${name}_image")
    case $name in spark) import_image "$SPARK_IMAGE" "$archive" ;; ray) import_image "$RAY_IMAGE" "$archive" ;; esac
  done
}
