# syntax=docker/dockerfile:1
#
# The vpc-cni DaemonSet image (config/kubernetes/daemonset.yaml): ipamd, the vpc-cni plugin, the
# core plugins the conflist chains, and the conflist. Build it from the repository root:
#
#   docker build -t vpc-cni:0.1.0 .
#
# Layout: /app/ipamd; /app/cni-bin/{vpc-cni,portmap,loopback}, which `ipamd entrypoint` copies
# into the host's CNI bin dir; /app/10-vpc-cni.conflist, which it writes into the host's CNI
# conf dir once ipamd serves.
#
# Our machines cannot run docker (no daemon, no registry), so the test suite never builds this
# file. scripts/check-config.sh holds it to the workspace instead: it runs the same
# scripts/build-release.sh as the build stage below and checks that every artifact copied
# from target/dist is one that build makes, that every file copied from the build context
# exists, and that ENTRYPOINT runs a copied binary. Keep COPY lines in the plain form
# (`COPY [--from=stage] src... dest`) so that it and scripts/image.sh can read them.
#
# The plugins run on the host, not in this image. vpc-cni is a static executable (see
# scripts/build-release.sh), so it runs on any node OS the Go CNI supports, Amazon Linux 2
# included. Debian's portmap and loopback (below) are Go programs linked against glibc
# dynamically and still need glibc 2.34 or later on the node: the image cannot serve an
# Amazon Linux 2 node until it ships static builds of those two (docs/compatibility.md says so).
#
# Without a registry, scripts/image.sh builds the same runtime stage from this file's own
# lines (the Debian suite, the packages, the COPY lines, WORKDIR, ENTRYPOINT) and refuses
# any line of that stage it cannot reproduce.

# Dependencies are compiled in their own layer (cargo-chef), keyed only on the manifests and
# Cargo.lock, so a source change rebuilds the workspace crates alone and not aws-sdk-ec2.
FROM rust:1.95-trixie AS chef
RUN cargo install cargo-chef --locked --version 0.1.78
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
COPY --from=planner /src/recipe.json recipe.json
# The workspace's release profile, packages and lock file, as in scripts/check-config.sh, and
# scripts/build-release.sh's static build for the host, so that its dependencies are the ones
# cooked here.
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo chef cook --release --locked -p ipamd \
    --target "$(rustc -vV | sed -n 's/^host: //p')" --recipe-path recipe.json
COPY . .
RUN scripts/build-release.sh

# portmap (chained by the conflist) and loopback (the runtime sets up the pod's lo with it),
# from Debian's containernetworking-plugins: /usr/lib/cni in bookworm and trixie.
FROM debian:trixie-slim AS cni-plugins
RUN apt-get update \
    && apt-get install -y --no-install-recommends containernetworking-plugins \
    && rm -rf /var/lib/apt/lists/*

FROM debian:trixie-slim
# iptables brings both backends (iptables-nft-* and iptables-legacy-*): ipamd uses the one the
# node's rules are in. nftables brings `nft`, with which ipamd removes the Go CNI's leftover
# connmark table when a node switches over. ca-certificates: the EC2 API is HTTPS, and the
# clients (AWS SDK, kube-rs) trust the system's roots; without them ipamd cannot reach EC2.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates iptables nftables \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/dist/ipamd /app/ipamd
COPY --from=build /src/target/dist/vpc-cni /app/cni-bin/vpc-cni
COPY --from=cni-plugins /usr/lib/cni/portmap /app/cni-bin/portmap
COPY --from=cni-plugins /usr/lib/cni/loopback /app/cni-bin/loopback
COPY config/10-vpc-cni.conflist /app/10-vpc-cni.conflist
WORKDIR /app
ENTRYPOINT ["/app/ipamd", "entrypoint"]
