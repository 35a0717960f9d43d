#!/usr/bin/env bash
# Builds what the image ships, the one way both the Dockerfile's build stage and
# scripts/image.sh build it, into $CARGO_TARGET_DIR/dist (default target/dist):
#   ipamd    the daemon, a static executable: only the parts of glibc it runs are in its
#            pages, which are its own to order and give back (docs/reports/memory-profile.md).
#            Stripped here: the build keeps its symbols in $CARGO_TARGET_DIR/<host>/release/ipamd,
#            for scripts/hot-code.sh and profilers
#   vpc-cni  the plugin, a static executable: the entrypoint copies it onto the node, whose
#            OS is not ours (Amazon Linux 2 has glibc 2.26, older than any we build with)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target_dir=${CARGO_TARGET_DIR:-target}
host=$(rustc -vV | sed -n 's/^host: //p')
[ -n "$host" ] || { echo "error: rustc -vV names no host triple" >&2; exit 1; }

# crt-static links glibc into the executables. The flag goes with an explicit --target so that
# it reaches only the binaries and their dependencies: build scripts and proc macros are built
# for the host without it, as they must be (a proc macro cannot be a static executable). Two
# commands, so that each binary's dependencies get only the features it asks for.
static() { RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" cargo build --release --locked --target "$host" "$@"; }
static -p ipamd
static -p cni-plugin

mkdir -p "$target_dir/dist"
# strip comes with binutils, which linking needs anyway.
strip --strip-all -o "$target_dir/dist/ipamd" "$target_dir/$host/release/ipamd"
chmod 755 "$target_dir/dist/ipamd"
install -m 755 "$target_dir/$host/release/vpc-cni" "$target_dir/dist/vpc-cni"
# A program interpreter (ld-linux) or a needed library would make it dynamic: refuse to ship it.
# readelf comes with binutils, which linking needs anyway.
for bin in ipamd vpc-cni; do
  if readelf -lW "$target_dir/dist/$bin" | grep -q INTERP || readelf -dW "$target_dir/dist/$bin" | grep -q NEEDED; then
    echo "error: $target_dir/dist/$bin is dynamically linked: the static build did not take" >&2
    exit 1
  fi
done
echo "$target_dir/dist"
