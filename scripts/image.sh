#!/usr/bin/env bash
# The DaemonSet's image built without docker or a registry: an OCI image archive equivalent
# to the Dockerfile's, made from the Dockerfile's own lines.
#
#   scripts/image.sh [--tag TAG] [--skip-build]
#       Builds the release artifacts (scripts/build-release.sh, as the Dockerfile's build stage
#       does; --skip-build uses the ones already in $CARGO_TARGET_DIR/dist), writes the image
#       localhost/vpc-cni:TAG (TAG defaults to the workspace version) to
#       $VPC_CNI_IMAGE_CACHE/vpc-cni-TAG.tar (default ~/.cache/vpc-cni/image) and prints that
#       path. Load it on a node with `ctr -n k8s.io images import FILE`. Needs root (mmdebstrap).
#
# How each line of the Dockerfile's final stage is reproduced:
#   FROM debian:SUITE-slim + RUN apt-get install PKGS
#       one base layer made by mmdebstrap (variant minbase, as Debian's images) from Debian's
#       archive with PKGS, without docs, man pages and locales (as the -slim images), apt's
#       lists removed; cached by suite and package list
#   COPY --from=STAGE, STAGE a `FROM debian:SUITE-slim` stage that installs packages
#       the files of those packages, extracted from Debian's archive (cached)
#   COPY --from=STAGE, STAGE the stage that runs scripts/build-release.sh
#       /src/target/dist/X is $CARGO_TARGET_DIR/dist/X, /src/X is the repository's X
#   COPY SRC (the build context)
#       the repository's SRC
#   WORKDIR, ENTRYPOINT, CMD
#       the image config
# Any other instruction in the final stage, or a RUN that is not the apt-get pattern, is
# refused: the image would not be the Dockerfile's. The copied files form a second layer, and
# the image's /app must then hold exactly the files the COPY lines name.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

DOCKERFILE=Dockerfile
MIRROR=http://deb.debian.org/debian
IMAGE_CACHE=$(realpath -m "${VPC_CNI_IMAGE_CACHE:-$HOME/.cache/vpc-cni/image}")
# What Debian's -slim images leave out (debuerreotype's slimming), as dpkg options.
SLIM=(
  'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright'
  'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*'
  'path-exclude=/usr/share/groff/*' 'path-exclude=/usr/share/lintian/*'
  'path-exclude=/usr/share/linda/*' 'path-exclude=/usr/share/locale/*'
)

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

tag="" skip_build=0
while [ $# -gt 0 ]; do
  case $1 in
    --tag) [ $# -ge 2 ] || die "--tag needs a value"; tag=$2; shift 2;;
    --skip-build) skip_build=1; shift;;
    -h|--help) usage;;
    *) die "unknown argument '$1' (see $0 --help)";;
  esac
done
if [ -z "$tag" ]; then
  tag=$(cargo metadata --no-deps --format-version 1 | jq -r '.packages[] | select(.name == "ipamd") | .version')
fi
# The OCI reference grammar's tag.
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--tag '$tag' is not an image tag ([A-Za-z0-9_][A-Za-z0-9_.-]*)"
[ "$(id -u)" -eq 0 ] || die "image.sh needs root (mmdebstrap unpacks Debian packages as root)"
ensure_packages mmdebstrap:mmdebstrap jq:jq unshare:util-linux

# --- reading the Dockerfile --------------------------------------------------------------------
declare -A STAGE_BASE=() STAGE_PKGS=()
BUILD_STAGE="" FINAL="" FINAL_PKGS="" WORKDIR="/" ENTRYPOINT=null CMD=null
declare -a COPIES=() # "FROM|SRC|DEST" of the final stage
stage=""

# The packages of a RUN made only of `apt-get update`, `apt-get install [-y|--no-install-recommends] PKG...`
# and `rm -rf /var/lib/apt/lists/*`; fails on anything else.
apt_packages() { # run-arguments
  local cmd words pkgs=() w
  while IFS= read -r cmd; do
    read -ra words <<<"$cmd"
    case "${words[*]}" in
      "apt-get update"|"rm -rf /var/lib/apt/lists/*") ;;
      "apt-get install "*)
        for w in "${words[@]:2}"; do
          case $w in
            -y|--no-install-recommends) ;;
            -*) return 1;;
            *) pkgs+=("$w");;
          esac
        done;;
      *) return 1;;
    esac
  done <<<"${1// && /$'\n'}"
  [ ${#pkgs[@]} -gt 0 ] || return 1
  echo "${pkgs[*]}"
}

while IFS= read -r instruction; do
  read -ra words <<<"$instruction"
  keyword=${words[0]^^}
  args=("${words[@]:1}")
  rest=${instruction#* }
  case $keyword in
    FROM)
      stage=${args[-1]}
      [ ${#args[@]} -ge 3 ] || stage="#final"
      STAGE_BASE[$stage]=${args[0]}
      # Only the last stage is the image: what earlier ones set is forgotten.
      FINAL=$stage WORKDIR=/ ENTRYPOINT=null CMD=null FINAL_PKGS=""
      COPIES=()
      ;;
    RUN)
      if [[ " $rest " == *" scripts/build-release.sh "* ]]; then
        BUILD_STAGE=$stage
      elif installs=$(apt_packages "$rest"); then
        STAGE_PKGS[$stage]=$installs
        FINAL_PKGS=$installs
      elif [ "$stage" = "#final" ]; then
        die "$DOCKERFILE: cannot reproduce 'RUN $rest' in the final stage (only apt-get update/install and removing apt's lists)"
      fi
      ;;
    COPY)
      from=""
      while [ "${args[0]:0:2}" = -- ]; do
        case ${args[0]} in --from=*) from=${args[0]#--from=};; *) die "$DOCKERFILE: cannot reproduce the flag in '$instruction'";; esac
        args=("${args[@]:1}")
      done
      [ ${#args[@]} -eq 2 ] || die "$DOCKERFILE: cannot reproduce '$instruction': one source and one destination per COPY"
      COPIES+=("$from|${args[0]}|${args[1]}")
      ;;
    WORKDIR) WORKDIR=${args[0]};;
    ENTRYPOINT) ENTRYPOINT=$(jq -c . <<<"$rest") || die "$DOCKERFILE: ENTRYPOINT must be a JSON list: $rest";;
    CMD) CMD=$(jq -c . <<<"$rest") || die "$DOCKERFILE: CMD must be a JSON list: $rest";;
    *)
      # Build-stage instructions (WORKDIR, ARG...) do not reach the final image.
      [ "$stage" != "#final" ] || die "$DOCKERFILE: cannot reproduce '$instruction' in the final stage"
      ;;
  esac
done <<<"$(dockerfile_instructions "$DOCKERFILE")"

[ "$FINAL" = "#final" ] || die "$DOCKERFILE: the last stage must be unnamed (FROM IMAGE)"
[[ ${STAGE_BASE[#final]} =~ ^debian:([a-z]+)-slim$ ]] \
  || die "$DOCKERFILE: the final stage's base ${STAGE_BASE[#final]} is not debian:SUITE-slim"
SUITE=${BASH_REMATCH[1]}
[ -n "$FINAL_PKGS" ] || die "$DOCKERFILE: the final stage installs no packages"
[ -n "$BUILD_STAGE" ] || die "$DOCKERFILE: no stage runs scripts/build-release.sh"
[ ${#COPIES[@]} -gt 0 ] || die "$DOCKERFILE: the final stage copies nothing"

mkdir -p "$IMAGE_CACHE"
WORK=$(mktemp -d "$IMAGE_CACHE/work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# mmdebstrap in root mode mounts /proc, /sys and /dev inside its target: in a mount namespace
# of its own, so nothing it mounts is ever seen by (or left on) the machine.
debstrap() { unshare -m --propagation private mmdebstrap --mode=root --quiet "$@" >&2; }

# --- the base layer ----------------------------------------------------------------------------
key=$(printf '%s\n' "$SUITE" "$FINAL_PKGS" "${SLIM[@]}" | sha256sum | cut -c1-16)
BASE=$IMAGE_CACHE/base-$SUITE-$key.tar
if [ ! -f "$BASE" ]; then
  say "building the base layer: debian $SUITE (minbase, slim) + $FINAL_PKGS, from $MIRROR"
  opts=(); for o in "${SLIM[@]}"; do opts+=(--dpkgopt="$o"); done
  # shellcheck disable=SC2086 # the package list is words
  debstrap --variant=minbase --include="${FINAL_PKGS// /,}" "${opts[@]}" "$SUITE" "$WORK/base" "$MIRROR" \
    || die "mmdebstrap could not build debian $SUITE with $FINAL_PKGS"
  # apt's lists go as the Dockerfile's RUN removes them; device nodes are the runtime's to make.
  rm -rf "$WORK/base/var/lib/apt/lists/"*
  layer_tar "$WORK/base" "$WORK/base.tar" --exclude='./dev/*'
  mv "$WORK/base.tar" "$BASE"
  rm -rf "$WORK/base"
  # Bases of an earlier package list are of no further use.
  find "$IMAGE_CACHE" -maxdepth 1 -name "base-$SUITE-*.tar" ! -name "${BASE##*/}" -delete
fi

# --- where each COPY source is ------------------------------------------------------------------
# Prints the path on this machine of SRC as seen from stage FROM.
source_path() { # from src
  local from=$1 src=$2 suite pkgs dir
  if [ -z "$from" ]; then
    echo "$REPO/${src#./}"
  elif [ "$from" = "$BUILD_STAGE" ]; then
    case $src in
      /src/target/*) echo "$CARGO_TARGET_DIR/${src#/src/target/}";;
      /src/*) echo "$REPO/${src#/src/}";;
      *) die "$DOCKERFILE: cannot tell where $src of stage $from is";;
    esac
  elif [[ ${STAGE_BASE[$from]:-} =~ ^debian:([a-z]+)-slim$ ]] && [ -n "${STAGE_PKGS[$from]:-}" ]; then
    suite=${BASH_REMATCH[1]} pkgs=${STAGE_PKGS[$from]}
    dir=$IMAGE_CACHE/extract-$suite-$(sha256sum <<<"$pkgs" | cut -c1-16)
    if [ ! -d "$dir" ]; then
      say "extracting $pkgs from debian $suite"
      debstrap --variant=extract --include="${pkgs// /,}" "$suite" "$WORK/extract" "$MIRROR" \
        || die "mmdebstrap could not extract $pkgs from debian $suite"
      mv "$WORK/extract" "$dir"
    fi
    echo "$dir$src"
  else
    die "$DOCKERFILE: cannot reproduce stage $from (COPY --from=$from $src)"
  fi
}

if [ $skip_build -eq 0 ]; then
  say "building the release artifacts (scripts/build-release.sh)"
  scripts/build-release.sh >/dev/null
fi

# --- the app layer -------------------------------------------------------------------------------
mkdir -p "$WORK/app"
declare -a WANT=()
for copy in "${COPIES[@]}"; do
  IFS='|' read -r from src dest <<<"$copy"
  path=$(source_path "$from" "$src")
  [ -f "$path" ] || die "$DOCKERFILE: COPY ${from:+--from=$from }$src: $path is not a file${from:+ (build it: scripts/build-release.sh)}"
  [ "${dest: -1}" != / ] || dest=$dest${src##*/}
  install -D -m "$(stat -c %a "$path")" "$path" "$WORK/app$dest"
  WANT+=("$dest")
done
mkdir -p "$WORK/app$WORKDIR"
layer_tar "$WORK/app" "$WORK/app.tar"

# The drift check: the files the image adds to the base are exactly those the COPY lines
# name, and the base holds every package the final stage installs.
have=$(tar -tf "$WORK/app.tar" | sed -n 's|^\.\(/.*[^/]\)$|\1|p' | sort)
want=$(printf '%s\n' "${WANT[@]}" | sort)
[ "$have" = "$want" ] || die "the image's files differ from $DOCKERFILE's COPY lines: $(diff <(echo "$want") <(echo "$have") | grep '^[<>]' | paste -sd' ')"
installed=$(tar -xOf "$BASE" ./var/lib/dpkg/status | awk '/^Package: /{p=$2} /^Status: install ok installed/{print p}')
for p in $FINAL_PKGS; do
  grep -qx "$p" <<<"$installed" || die "the base layer $BASE lacks $p, which $DOCKERFILE installs"
done

config=$(jq -cn --arg wd "$WORKDIR" --argjson ep "$ENTRYPOINT" --argjson cmd "$CMD" \
  '{Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], WorkingDir: $wd}
   + (if $ep == null then {} else {Entrypoint: $ep} end) + (if $cmd == null then {} else {Cmd: $cmd} end)')
OUT=$IMAGE_CACHE/vpc-cni-$tag.tar
oci_archive "$WORK" "localhost/vpc-cni:$tag" "$config" "$OUT" "$BASE" "$WORK/app.tar"
say "image localhost/vpc-cni:$tag: $OUT ($(du -h "$OUT" | cut -f1); /app: $(echo "$have" | paste -sd' '))"
echo "$OUT"
