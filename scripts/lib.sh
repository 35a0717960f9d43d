# shellcheck shell=bash disable=SC2034
# Shared by the scripts: paths, checks and dependency installation. Source it; do not run it.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# CI clones afresh each run: keep build outputs outside the clone so a returning machine reuses them.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/vpc-cni/target}
BIN_DIR=${VPC_CNI_BIN_DIR:-$CARGO_TARGET_DIR/debug}
# What kube-in-a-box runs (Kubernetes, etcd, containerd, runc, two images), built once by
# scripts/kube-build.sh and kept outside the clone for the same reason.
# Absolute: containerd's config and the node's CNI bin dir name files in it.
KUBE_CACHE=$(realpath -m "${VPC_CNI_KUBE_CACHE:-$HOME/.cache/vpc-cni/kube}")

die() { echo "error: $*" >&2; exit 1; }
say() { echo "==> $*" >&2; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (network namespaces); run it with sudo"
}

# Installs Debian packages.
install_packages() {
  [ "$(id -u)" -eq 0 ] || die "missing packages: $* (install them, or run as root)"
  say "installing $*"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >&2; then
    die "could not install $*"
  fi
}

# Installs the Debian packages whose commands are missing. Arguments: command:package pairs.
ensure_packages() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] || install_packages "${missing[@]}"
}

# The tools the box, the demo and the root tests use (ipamd programs SNAT with iptables).
ensure_box_packages() {
  ensure_packages ip:iproute2 ping:iputils-ping jq:jq iptables:iptables curl:curl
}

need_binaries() {
  local b
  for b in vpc-sim ipamd vpc-cni; do
    [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing: build with 'cargo build --workspace' (or set VPC_CNI_BIN_DIR)"
  done
}

# Waits up to $1 seconds for the command in the remaining arguments to succeed, trying it
# every 0.1 s. The bound is on the clock, not on the tries: a command such as kubectl may
# itself take a good part of a second.
wait_for() {
  local deadline=$(( ${EPOCHREALTIME//[!0-9]/} + $1 * 1000000 )); shift
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    [ "${EPOCHREALTIME//[!0-9]/}" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# The real runtimes the runtime tests drive: podman (CNI backend) with crun, conmon and a static
# busybox for its rootfs, and the reference plugins (portmap, ptp, host-local).
ensure_runtimes() {
  local missing=() pair
  for pair in podman:podman crun:crun conmon:conmon busybox:busybox-static; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ -x /usr/lib/cni/portmap ] || missing+=(containernetworking-plugins)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing packages: ${missing[*]} (install them, or run as root)"
  say "installing ${missing[*]}"
  # No recommends: podman's would pull in netavark, a second network backend we do not test.
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${missing[@]}"; } >&2 || die "could not install ${missing[*]}"
}

# Makes `apt-get source` work: adds a deb-src entry for this release's main component unless
# one is active already.
ensure_deb_src() {
  local codename src
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || die "cannot tell the Debian release from /etc/os-release"
  src=/etc/apt/sources.list.d/vpc-cni-deb-src.sources
  # Only an active entry counts: Debian's sources.list often carries commented-out deb-src lines.
  if ! grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    say "adding a deb-src entry for $codename main ($src)"
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$codename" >"$src"
  fi
}

# cnitool, libcni's own command-line runtime. It is in no binary package: build it from Debian's
# libcni source package (it builds offline against the packaged library) into the cache.
CNITOOL=${VPC_CNI_CNITOOL:-$HOME/.cache/vpc-cni/bin/cnitool}
ensure_cnitool() {
  [ -x "$CNITOOL" ] && return 0
  [ "$(id -u)" -eq 0 ] || die "cnitool is missing at $CNITOOL (run as root to build it)"
  local build
  ensure_deb_src
  install_packages golang-go golang-github-appc-cni-dev
  build=$(mktemp -d)
  chmod 755 "$build"  # apt-get source downloads as the _apt user where it can
  say "building cnitool from Debian's golang-github-appc-cni source package"
  if ! (cd "$build" && apt-get source --download-only -qq golang-github-appc-cni >&2 \
        && tar xf golang-github-appc-cni_*.orig.tar.* \
        && cd golang-github-appc-cni-*/cnitool \
        && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$build/gocache" go build -o "$build/cnitool" .); then
    rm -rf "$build"; die "could not build cnitool"
  fi
  mkdir -p "$(dirname "$CNITOOL")"
  mv "$build/cnitool" "$CNITOOL"
  rm -rf "$build"
}

# cargo-nextest, the suite's runner: on these machines already; else installed from crates.io,
# pinned, into cargo's own bin directory.
NEXTEST_VERSION=0.9.143
ensure_nextest() {
  cargo nextest --version >/dev/null 2>&1 && return 0
  say "installing cargo-nextest $NEXTEST_VERSION"
  env -u CARGO_TARGET_DIR cargo install --quiet --locked --version "$NEXTEST_VERSION" cargo-nextest >&2 \
    || die "could not install cargo-nextest"
}

# cargo-machete (unused dependencies of each crate), pinned, installed from crates.io into
# cargo's own bin directory the first time.
MACHETE_VERSION=0.9.2
ensure_cargo_machete() {
  if cargo machete --version 2>/dev/null | grep -qx "$MACHETE_VERSION"; then
    return 0
  fi
  say "installing cargo-machete $MACHETE_VERSION"
  cargo install --quiet --locked --version "$MACHETE_VERSION" cargo-machete >&2 \
    || die "could not install cargo-machete"
}

# Fails naming every [workspace.dependencies] entry that no member's manifest uses: cargo-machete
# looks at each crate's own list, not at the workspace's pins.
check_workspace_deps() {
  python3 - "$REPO" <<'PY'
import pathlib, sys, tomllib
repo = pathlib.Path(sys.argv[1])
root = tomllib.loads((repo / "Cargo.toml").read_text())
used = set()
for member in root["workspace"]["members"]:
    manifest = tomllib.loads((repo / member / "Cargo.toml").read_text())
    for section in ("dependencies", "dev-dependencies", "build-dependencies"):
        used.update(manifest.get(section, {}))
unused = sorted(set(root["workspace"]["dependencies"]) - used)
if unused:
    sys.exit("pinned in [workspace.dependencies] but used by no member: " + ", ".join(unused))
PY
}

# The Dockerfile's instructions, one a line: continuations joined, comment lines dropped
# (docker drops them too, even inside a continuation), blanks squeezed.
dockerfile_instructions() {
  awk '
    /^[[:space:]]*#/ { next }
    {
      line = line $0
      if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, " ", line); next }
      gsub(/[[:space:]]+/, " ", line); sub(/^ /, "", line); sub(/ $/, "", line)
      if (line != "") print line
      line = ""
    }
  ' "$1"
}

# A reproducible tarball of directory DIR's contents (sorted, root-owned, mtime 0), which an
# image layer must be for equal content to give equal digests. Extra arguments go to tar.
layer_tar() { # dir out tar-args...
  local dir=$1 out=$2; shift 2
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir" "$@" -cf "$out" .
}

# Copies FILE into the OCI layout WORK/layout under its digest; prints "DIGEST SIZE".
oci_blob() { # work file
  local digest size
  digest=$(sha256sum "$2" | cut -d' ' -f1)
  size=$(stat -c %s "$2")
  cp "$2" "$1/layout/blobs/sha256/$digest"
  echo "$digest $size"
}

# Writes OUT, an OCI image layout tarball of image REF: CONFIG is the image config's "config"
# object (Entrypoint, Env, ...), the layers are uncompressed tarballs, bottom first. `ctr
# images import` takes the name from the index's annotation. WORK is scratch space.
oci_archive() { # work ref config-json out layer.tar...
  local work=$1 ref=$2 config=$3 out=$4 layer digest size cfg manifest layers='[]'
  shift 4
  rm -rf "$work/layout"; mkdir -p "$work/layout/blobs/sha256"
  for layer; do
    read -r digest size <<<"$(oci_blob "$work" "$layer")"
    layers=$(jq -c --arg d "$digest" --argjson s "$size" \
      '. + [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: "sha256:\($d)", size: $s}]' <<<"$layers")
  done
  jq -cn --arg arch "$(dpkg --print-architecture)" --argjson config "$config" --argjson layers "$layers" \
    '{architecture: $arch, os: "linux", config: $config, rootfs: {type: "layers", diff_ids: [$layers[].digest]}}' \
    >"$work/config.json"
  cfg=$(oci_blob "$work" "$work/config.json")
  jq -cn --arg cfg "${cfg%% *}" --argjson cfgsize "${cfg##* }" --argjson layers "$layers" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: "sha256:\($cfg)", size: $cfgsize},
      layers: $layers}' >"$work/manifest.json"
  manifest=$(oci_blob "$work" "$work/manifest.json")
  jq -cn --arg m "${manifest%% *}" --argjson size "${manifest##* }" --arg ref "$ref" \
    '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json",
      digest: "sha256:\($m)", size: $size,
      annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": ($ref | sub(".*:"; ""))}}]}' \
    >"$work/layout/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
  # Renamed into place: an import running meanwhile reads the old archive or the new one.
  layer_tar "$work/layout" "$out.tmp.$$"
  mv "$out.tmp.$$" "$out"
}
