#!/usr/bin/env bash
# Makes the Debian 12 base image of deploy/docker/Dockerfile on a machine that reaches Debian's
# package repositories but no image registry: debootstrap (minbase variant) of bookworm, slimmed as
# Debian's official "-slim" images are (no documentation, manual pages or locales; dpkg keeps them
# out of later installs too), imported into the container engine's local storage.
#
#   deploy/docker/make_base_image.sh [IMAGE]
#
# IMAGE defaults to localhost/debian:<point release>-slim (e.g. localhost/debian:12.15-slim, the
# release being the one debootstrap installed). Prints the image name on its last line. Needs
# root, debootstrap, and ENGINE (podman or docker; default: podman if installed).
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), ENGINE.
set -euo pipefail
image=${1:-}
ENGINE=${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || {
  echo "make_base_image: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

root=$(mktemp -d "${TMPDIR:-/tmp}/specdec-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || {
  tail -n 20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

# What Debian's slim images leave out, now and in every later apt-get install.
cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/{man,info,locale,lintian}/* "$root"/var/lib/apt/lists/* \
  "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
# Containers get their resolver configuration from the engine.
: >"$root/etc/resolv.conf"

release=$(cat "$root/etc/debian_version")
image=${image:-localhost/debian:$release-slim}
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
tar -C "$root" --numeric-owner -c . | "$ENGINE" import \
  --change 'CMD ["bash"]' \
  --change "LABEL org.opencontainers.image.title=debian org.opencontainers.image.version=$release org.opencontainers.image.created=$created org.opencontainers.image.source=debootstrap-minbase-bookworm" \
  - "$image" >/dev/null
echo "make_base_image: Debian $release (debootstrap minbase, slimmed), $("$ENGINE" image inspect --format '{{.Size}}' "$image") bytes" >&2
echo "$image"
