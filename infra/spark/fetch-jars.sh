#!/usr/bin/env bash
# Download the JARs listed in $1 into $2 and verify each one.
#   group:artifact:version:sha256  -> checked against the pinned SHA-256 (the normal case)
#   group:artifact:version         -> not pinned yet: checked against Maven Central's .sha1,
#                                     and refused when REQUIRE_PINNED=1 (release builds).
# `infra/spark/pin-jars.sh` records the SHA-256 values (it needs Maven Central).
set -euo pipefail
list=$1; dest=$2
repo=${MAVEN_REPO:-https://repo1.maven.org/maven2}
grep -v '^#' "$list" | while IFS=: read -r group artifact version sha256; do
  [ -n "$group" ] || continue
  jar="$dest/${artifact}-${version}.jar"
  path="${group//.//}/${artifact}/${version}/${artifact}-${version}.jar"
  curl -fsSL -o "$jar" "$repo/$path"
  if [ -n "$sha256" ]; then
    echo "$sha256  $jar" | sha256sum -c -
  elif [ "${REQUIRE_PINNED:-0}" = 1 ]; then
    echo "$group:$artifact:$version has no pinned SHA-256: run infra/spark/pin-jars.sh" >&2
    exit 1
  else
    echo "$(curl -fsSL "$repo/$path.sha1" | cut -c1-40)  $jar" | sha1sum -c -
    echo "not pinned: $group:$artifact:$version:$(sha256sum "$jar" | cut -c1-64)" >&2
  fi
done
