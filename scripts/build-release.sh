#!/usr/bin/env bash
# Builds what the image ships, the one way both the Dockerfile's build stage and
# scripts/image.sh build it, into $CARGO_TARGET_DIR/dist (default target/dist):
#   ipamd    the daemon; it runs inside the image and links the image's glibc
#   vpc-cni  the plugin, a static executable: the entrypoint copies it onto the node, whose
#            OS is not ours (Amazon Linux 2 has glibc 2.26, older than any we build with)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target_dir=${CARGO_TARGET_DIR:-target}
host=$(rustc -vV | sed -n 's/^host: //p')
[ -n "$host" ] || { echo "error: rustc -vV names no host triple" >&2; exit 1; }

cargo build --release --locked -p ipamd
# crt-static links glibc into the executable. The flag goes with an explicit --target so that
# it reaches only the plugin and its dependencies: build scripts and proc macros are built for
# the host without it, as they must be (a proc macro cannot be a static executable).
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked -p cni-plugin --target "$host"

mkdir -p "$target_dir/dist"
install -m 755 "$target_dir/release/ipamd" "$target_dir/dist/ipamd"
install -m 755 "$target_dir/$host/release/vpc-cni" "$target_dir/dist/vpc-cni"
# A program interpreter (ld-linux) or a needed library would make it dynamic: refuse to ship it.
# readelf comes with binutils, which linking needs anyway.
if readelf -lW "$target_dir/dist/vpc-cni" | grep -q INTERP || readelf -dW "$target_dir/dist/vpc-cni" | grep -q NEEDED; then
  echo "error: $target_dir/dist/vpc-cni is dynamically linked: the static build did not take" >&2
  exit 1
fi
echo "$target_dir/dist"
