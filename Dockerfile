# syntax=docker/dockerfile:1
# The sluice image: one static release binary on an empty base, run as a non-root user.
#
#   docker build --build-arg VERSION=0.1.0 --build-arg GIT_COMMIT=$(git rev-parse HEAD) -t sluice:0.1.0 .
#   buildah build --layers --build-arg VERSION=0.1.0 --build-arg GIT_COMMIT=$(git rev-parse HEAD) -t sluice:0.1.0 .
#
# Stage 1 (build) compiles `sluice` in the official Rust image (BUILDER_IMAGE) with glibc linked
# statically (`+crt-static`): the binary needs no shared library, no loader, no libc in the image.
# glibc >= 2.34 has its "files" and "dns" name services inside libc, so a static binary still
# resolves names. Stage 2 is `scratch`: the binary, an /etc/passwd naming the non-root user 65532,
# and nothing else (no shell, no package manager). The Deployment runs it with a read-only root
# file system; sluice writes nothing to disk (its certificates live in a Secret).
#
# Offline (no registry, as hack/realnode.sh builds it for the real node): BUILDER_IMAGE names a
# local image with gcc and libc6-dev (made by debootstrap from Debian's packages), and the host's
# Rust toolchain and crate registry are mounted where the official image keeps them
# (/usr/local/rustup, /usr/local/cargo) with CARGO_NET_OFFLINE=true. The Dockerfile is the same.
ARG BUILDER_IMAGE=docker.io/library/rust:1.95-bookworm

FROM ${BUILDER_IMAGE} AS build
ARG VERSION=0.1.0
ARG GIT_COMMIT=unknown
ARG CARGO_NET_OFFLINE=false
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /src
COPY . .
# The build cache (target/) survives between builds of the same builder (docker and buildah both
# keep `type=cache` mounts), so a second build recompiles only sluice's own crates.
RUN --mount=type=cache,id=sluice-image-target,target=/src/target \
    test "$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)" = "${VERSION%%-*}" \
      || { echo "VERSION=$VERSION does not match Cargo.toml's workspace version" >&2; exit 1; } \
 && SLUICE_GIT_COMMIT="$GIT_COMMIT" CARGO_NET_OFFLINE="$CARGO_NET_OFFLINE" \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --bin sluice --target x86_64-unknown-linux-gnu \
 && cp target/x86_64-unknown-linux-gnu/release/sluice /sluice \
 && /sluice --version \
 && printf 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >/passwd \
 && printf 'nonroot:x:65532:\n' >/group

FROM scratch
ARG VERSION=0.1.0
ARG GIT_COMMIT=unknown
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="A capacity gate for dynamic batch workloads (Spark, Ray) on Kubernetes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.source="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /passwd /etc/passwd
COPY --from=build /group /etc/group
COPY --from=build /sluice /usr/local/bin/sluice
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve"]
