#!/usr/bin/env bash
# Builds the sluice image from the Dockerfile at the root, without a Docker daemon and without a
# registry: Debian's buildah (installed with apt-get at the version hack/versions.sh pins), chroot
# isolation, and a local builder image instead of the official Rust image (base images cannot be
# pulled here). Writes a docker-archive that `ctr images import` (the real node) or `docker load`
# reads.
#
# usage: hack/image.sh [--version V] [--commit C] [--tag REF] [--out FILE]
#   --version  the image's version (default: Cargo.toml's); must be Cargo's, a -suffix allowed
#   --commit   the git commit baked in (default: git rev-parse HEAD, -dirty when the tree is)
#   --tag      the image reference (default: sluice:<version>)
#   --out      the archive (default: $SLUICE_CACHE/images/sluice-<version>.tar)
#
# The builder image (sluice.local/rust-builder:bookworm: debootstrap minbase + gcc + libc6-dev) is
# made once and kept in buildah's storage under $SLUICE_CACHE/buildah. The host's Rust toolchain
# (~/.rustup) and cargo home (~/.cargo: the crates, already downloaded by the host's builds) are
# mounted where the official image keeps them, with CARGO_NET_OFFLINE=true: the build reads no
# network. The Dockerfile's target/ cache mount stays in buildah's cache between builds, so a second
# build recompiles only sluice's own crates. Prints the archive's path on stdout.
set -euo pipefail
# shellcheck source=hack/lib/script.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/script.sh"   # ROOT (the working directory), usage_if_asked
usage_if_asked "$0" "$@"
# shellcheck source=hack/versions.sh
source "$ROOT/hack/versions.sh"
# shellcheck source=hack/lib/deb.sh
source "$ROOT/hack/lib/deb.sh"   # deb_version: a pinned Debian package, or its newest once replaced
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
log() { echo "image.sh: $*" >&2; }
die() { echo "image.sh: error: $*" >&2; exit 1; }

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
COMMIT=
TAG=
OUT=
while (($#)); do
  case $1 in
    --version) VERSION=$2; shift 2 ;;
    --commit) COMMIT=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
if [[ -z $COMMIT ]]; then
  COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  [[ $COMMIT == unknown || -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || COMMIT+=-dirty
fi
TAG=${TAG:-sluice:$VERSION}
OUT=${OUT:-$CACHE/images/sluice-$VERSION.tar}
LOGFILE=${SLUICE_IMAGE_LOG:-$CACHE/images/image-build.log}
mkdir -p "$CACHE/images" "$(dirname "$OUT")" "$(dirname "$LOGFILE")"

((EUID == 0)) || die "buildah runs here as root (chroot isolation, its storage under $CACHE/buildah)"

# buildah from Debian, at the pinned version.
if [[ $(dpkg-query -W -f '${Version}' buildah 2>/dev/null || true) != "$BUILDAH_DEB_VERSION" ]]; then
  command -v apt-get >/dev/null || die "building the image needs buildah $BUILDAH_DEB_VERSION (Debian); this machine has no apt-get"
  apt-get update -qq >>"$LOGFILE" 2>&1 || die "apt-get update failed (log: $LOGFILE)"
  buildah_version=$(deb_version buildah "$BUILDAH_DEB_VERSION")  # the pin, or Debian's newest once replaced
  [[ -n $buildah_version ]] || die "Debian's archive has no package buildah"
  if [[ $(dpkg-query -W -f '${Version}' buildah 2>/dev/null || true) != "$buildah_version" ]]; then
    log "installing buildah=$buildah_version (apt-get, first time only)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "buildah=$buildah_version" >>"$LOGFILE" 2>&1 \
      || die "apt-get install buildah=$buildah_version failed (log: $LOGFILE)"
  fi
fi

STORAGE=(--root "$CACHE/buildah/storage" --runroot /run/sluice-buildah --storage-driver "${SLUICE_BUILDAH_DRIVER:-overlay}")
BUILDAH() { buildah "${STORAGE[@]}" "$@"; }
BUILDER=sluice.local/rust-builder:bookworm

# One build at a time per cache (the storage and the target/ cache mount are shared).
exec {lock}>"$CACHE/images/.buildah.lock"
flock "$lock"

if ! BUILDAH inspect --type image "$BUILDER" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || {
    log "installing debootstrap (apt-get, first time only)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >>"$LOGFILE" 2>&1 || die "apt-get install debootstrap failed (log: $LOGFILE)"
  }
  log "making the builder image $BUILDER (debootstrap minbase + gcc + libc6-dev; first time only)"
  t0=$SECONDS
  work=$(mktemp -d "$CACHE/images/builder.XXXXXX")
  mkdir -p "$CACHE/images/debs"
  debootstrap --variant=minbase --include=gcc,libc6-dev --cache-dir="$CACHE/images/debs" bookworm "$work/rootfs" \
    "${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >>"$LOGFILE" 2>&1 \
    || die "debootstrap of the builder image failed (log: $LOGFILE)"
  while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done < <(awk -v p="$work/rootfs/" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r)
  rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/* "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/*
  tar --numeric-owner --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -C "$work/rootfs" -cf "$work/rootfs.tar" .
  ctr=$(BUILDAH from scratch)
  BUILDAH add "$ctr" "$work/rootfs.tar" / >>"$LOGFILE" 2>&1 || die "buildah add of the builder's root file system failed"
  BUILDAH config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  BUILDAH commit --quiet --rm "$ctr" "$BUILDER" >>"$LOGFILE" 2>&1 || die "buildah commit $BUILDER failed"
  rm -rf "$work"
  log "made $BUILDER in $((SECONDS - t0))s"
fi

RUSTUP_DIR=${RUSTUP_HOME:-$HOME/.rustup}
CARGO_DIR=${CARGO_HOME:-$HOME/.cargo}
[[ -d $RUSTUP_DIR/toolchains && -x $CARGO_DIR/bin/cargo ]] || die "no Rust toolchain at $RUSTUP_DIR / $CARGO_DIR (install Rust with rustup)"
# Every crate the lock file names, downloaded by the host's cargo (the build inside is offline).
cargo fetch --locked --quiet || die "cargo fetch failed: the image builds offline from the host's crates"

log "building $TAG (version $VERSION, commit $COMMIT) from the Dockerfile (log: $LOGFILE)"
t0=$SECONDS
# TMPDIR: where buildah keeps the Dockerfile's cache mounts (target/), in the cache.
mkdir -p "$CACHE/buildah/tmp"
TMPDIR=$CACHE/buildah/tmp BUILDAH build --isolation chroot --layers --pull-never \
  --build-arg "BUILDER_IMAGE=$BUILDER" --build-arg "VERSION=$VERSION" --build-arg "GIT_COMMIT=$COMMIT" \
  --build-arg CARGO_NET_OFFLINE=true \
  --volume "$RUSTUP_DIR:/usr/local/rustup:ro" --volume "$CARGO_DIR:/usr/local/cargo" \
  -f Dockerfile -t "$TAG" . >>"$LOGFILE" 2>&1 || { tail -n 30 "$LOGFILE" >&2; die "buildah build failed (log: $LOGFILE)"; }
seconds=$((SECONDS - t0))
rm -f "$OUT.tmp"
BUILDAH push --quiet "$TAG" "docker-archive:$OUT.tmp:$TAG" >>"$LOGFILE" 2>&1 || die "buildah push to docker-archive:$OUT failed"
mv "$OUT.tmp" "$OUT"
size=$(du -b "$OUT" | cut -f1)
log "built $TAG in ${seconds}s: archive $OUT ($((size / 1024 / 1024)) MiB)"
echo "$seconds" >"$OUT.seconds"
echo "$OUT"
