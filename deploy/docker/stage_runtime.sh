#!/usr/bin/env bash
# Collects what a specdec runtime image needs from a build tree, so the runtime stage of the
# Dockerfiles installs exactly the Debian packages the binaries load and nothing is listed by hand:
#   <stage>/bin/            the binaries of SERVICE (router, target, drafter, policy, cli, or all)
#   <stage>/packages.txt    the Debian packages owning every shared library they load (ldd, with
#                           symlinks such as the BLAS alternative resolved, looked up in dpkg's
#                           file lists)
#
#   deploy/docker/stage_runtime.sh BUILD_DIR SERVICE STAGE_DIR [BUNDLED_LIB_DIR...]
#
# Libraries under a BUNDLED_LIB_DIR (e.g. the CUDA libtorch in /opt/libtorch/lib) are left out of
# packages.txt: the image copies that directory instead. A library that no package owns and no
# bundled directory holds is an error, so an image never misses one silently.
set -euo pipefail
build=$1 service=$2 stage=$3
shift 3
bundled=("$@")

case "$service" in
  router|target|drafter|policy) bins=("$build/services/$service/specdec-$service") ;;
  cli) bins=("$build/cli/specdec") ;;
  all) bins=()
       for s in router target drafter policy; do bins+=("$build/services/$s/specdec-$s"); done
       bins+=("$build/cli/specdec") ;;
  *) echo "stage_runtime: SERVICE must be router, target, drafter, policy, cli or all (got '$service')" >&2
     exit 2 ;;
esac

mkdir -p "$stage/bin"
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "stage_runtime: $b is missing (build it first)" >&2; exit 1; }
  install -m 0755 "$b" "$stage/bin/"
done

# Every library ldd resolves, with its symlink target and the /usr-merged twin of each path
# (dpkg records some files under /lib and others under /usr/lib).
libs=$(ldd "${bins[@]}" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p' | sort -u)
declare -A owner=()
candidates=$(for lib in $libs; do
  for p in "$lib" "$(readlink -f "$lib")"; do
    echo "$p"
    case "$p" in /usr/*) echo "${p#/usr}" ;; *) echo "/usr$p" ;; esac
  done
done | sort -u)
# One pass over dpkg's file lists instead of a dpkg -S per library.
# (List files are named <package>[:<arch>].list.)
while IFS=$'\t' read -r list path; do
  pkg=$(basename "$list")
  owner[$path]=${pkg%%:*}
done < <(grep -Fx -f <(echo "$candidates") /var/lib/dpkg/info/*.list | sed 's/\.list:/\t/')

declare -A pkgs=()
missing=0
for lib in $libs; do
  real=$(readlink -f "$lib")
  for dir in "${bundled[@]}"; do
    case "$real" in "$(readlink -f "$dir")"/*) continue 2 ;; esac
  done
  pkg=""
  for p in "$lib" "$real"; do
    for q in "$p" "/usr$p" "${p#/usr}"; do
      if [ -n "${owner[$q]:-}" ]; then pkg=${owner[$q]}; break 2; fi
    done
  done
  if [ -z "$pkg" ]; then
    echo "stage_runtime: no Debian package owns $lib" >&2
    missing=1
    continue
  fi
  pkgs[$pkg]=1
done
[ "$missing" = 0 ] || exit 1
for p in "${!pkgs[@]}"; do echo "$p"; done | sort -u >"$stage/packages.txt"
echo "stage_runtime: ${#bins[@]} binaries, $(wc -l <"$stage/packages.txt") packages -> $stage"
